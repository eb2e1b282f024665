"""ELU over a [batch_size, dim] activation tensor."""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 16
dim = 2048


class Model(nn.Module):
    def __init__(self, alpha: float = 1.0):
        super().__init__()
        self.alpha = alpha

    def forward(self, x):
        return F.elu(x, alpha=self.alpha)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [1.0]
