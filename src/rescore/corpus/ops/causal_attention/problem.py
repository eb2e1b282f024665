import math

import torch
import torch.nn as nn

batch_size = 2
num_heads = 4
seq_len = 64
head_dim = 32


class Model(nn.Module):
    """Causal scaled dot-product attention: query i attends to keys 0..i."""

    def __init__(self):
        super().__init__()

    def forward(self, q, k, v):
        s = q.shape[-2]
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        future = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
        return torch.matmul(torch.softmax(scores, dim=-1), v)


def get_inputs():
    shape = (batch_size, num_heads, seq_len, head_dim)
    return [torch.randn(shape), torch.randn(shape), torch.randn(shape)]


def get_init_inputs():
    return []
