"""Materialized transpose: out = x.t().contiguous() for a [rows, cols] matrix."""
import torch
import torch.nn as nn

rows = 256
cols = 256


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x.t().contiguous()


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
