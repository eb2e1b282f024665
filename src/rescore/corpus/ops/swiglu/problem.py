"""SwiGLU gate: the input holds [gate | up] halves along the last dim; out = silu(gate) * up."""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 32
hidden = 1024


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        gate, up = x.chunk(2, dim=-1)
        return F.silu(gate) * up


def get_inputs():
    return [torch.randn(batch_size, 2 * hidden)]


def get_init_inputs():
    return []
