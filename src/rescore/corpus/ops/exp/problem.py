"""Elementwise exponential over a [batch_size, dim] activation tensor."""
import torch
import torch.nn as nn

batch_size = 16
dim = 2048


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.exp(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
