import torch
import torch.nn as nn

M = 64
K = 128
N = 64


class Model(nn.Module):
    """Fused matmul, bias and ReLU: relu(A @ B + bias), bias broadcast over the rows."""

    def __init__(self):
        super().__init__()

    def forward(self, A, B, bias):
        return torch.relu(torch.matmul(A, B) + bias)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N), torch.randn(N)]


def get_init_inputs():
    return []
