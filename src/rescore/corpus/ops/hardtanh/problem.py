"""Hardtanh (clamp to [min_val, max_val]) over a [batch_size, dim] activation tensor."""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 16
dim = 2048


class Model(nn.Module):
    def __init__(self, min_val: float = -1.0, max_val: float = 1.0):
        super().__init__()
        self.min_val = min_val
        self.max_val = max_val

    def forward(self, x):
        return F.hardtanh(x, min_val=self.min_val, max_val=self.max_val)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [-1.0, 1.0]
