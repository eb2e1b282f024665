"""Layer norm over the last dim (biased variance, eps=1e-5) with a learned weight and bias."""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 16
dim = 1024


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))
        self.bias = nn.Parameter(0.1 * torch.randn(dim))

    def forward(self, x):
        return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, eps=1e-5)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim]
