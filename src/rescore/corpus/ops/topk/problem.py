"""The k largest values of each row, sorted descending (torch.topk(...).values; NaN ranks highest)."""
import torch
import torch.nn as nn

batch_size = 16
dim = 1024
k = 8


class Model(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.k = k

    def forward(self, x):
        return torch.topk(x, self.k, dim=-1).values


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [k]
