"""Mean over the middle dim of a (batch_size, dim1, dim2) tensor: output (batch_size, dim2)."""
import torch
import torch.nn as nn

batch_size = 4
dim1 = 128
dim2 = 128


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.mean(x, dim=1)


def get_inputs():
    return [torch.randn(batch_size, dim1, dim2)]


def get_init_inputs():
    return []
