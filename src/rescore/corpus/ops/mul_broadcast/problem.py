"""Row scaling: a [batch_size, dim] tensor times a [batch_size, 1] column broadcast over the columns."""
import torch
import torch.nn as nn

batch_size = 256
dim = 256


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, scale):
        return x * scale


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, 1)]


def get_init_inputs():
    return []
