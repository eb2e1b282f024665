"""Bias add: a [batch_size, dim] tensor plus a [dim] vector broadcast over the rows."""
import torch
import torch.nn as nn

batch_size = 256
dim = 256


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, bias):
        return x + bias


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(dim)]


def get_init_inputs():
    return []
