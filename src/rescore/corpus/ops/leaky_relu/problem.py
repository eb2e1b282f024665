"""LeakyReLU with a negative slope over a [batch_size, dim] activation tensor."""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 16
dim = 2048


class Model(nn.Module):
    def __init__(self, negative_slope: float = 0.01):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        return F.leaky_relu(x, negative_slope=self.negative_slope)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
