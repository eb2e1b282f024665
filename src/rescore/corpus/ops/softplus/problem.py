"""Softplus with beta and threshold over a [batch_size, dim] activation tensor."""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 16
dim = 2048


class Model(nn.Module):
    def __init__(self, beta: float = 2.0, threshold: float = 10.0):
        super().__init__()
        self.beta = beta
        self.threshold = threshold

    def forward(self, x):
        return F.softplus(x, beta=self.beta, threshold=self.threshold)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [2.0, 10.0]
