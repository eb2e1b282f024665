"""Group norm (eps=1e-5, learned per-channel weight and bias) of a (batch, channels, length) tensor.

channels = num_groups * channels_per_group, so every fuzzed size is a valid grouping.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 4
num_groups = 4
channels_per_group = 8
length = 256


class Model(nn.Module):
    def __init__(self, num_groups, num_channels):
        super().__init__()
        self.num_groups = num_groups
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(num_channels))
        self.bias = nn.Parameter(0.1 * torch.randn(num_channels))

    def forward(self, x):
        return F.group_norm(x, self.num_groups, self.weight, self.bias, eps=1e-5)


def get_inputs():
    return [torch.randn(batch_size, num_groups * channels_per_group, length)]


def get_init_inputs():
    return [num_groups, num_groups * channels_per_group]
