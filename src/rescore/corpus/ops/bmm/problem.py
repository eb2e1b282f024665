import torch
import torch.nn as nn

batch_size = 8
M = 32
K = 64
N = 32


class Model(nn.Module):
    """Batched matrix multiplication C[b] = A[b] @ B[b]."""

    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.bmm(A, B)


def get_inputs():
    return [torch.randn(batch_size, M, K), torch.randn(batch_size, K, N)]


def get_init_inputs():
    return []
