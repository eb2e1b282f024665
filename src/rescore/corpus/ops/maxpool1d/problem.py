"""1-D max pooling (kernel 3, stride 2, padding 1) of a (batch, channels, length) tensor."""
import torch
import torch.nn as nn

batch_size = 4
channels = 8
length = 1024


class Model(nn.Module):
    def __init__(self, kernel_size, stride, padding):
        super().__init__()
        self.pool = nn.MaxPool1d(kernel_size=kernel_size, stride=stride, padding=padding)

    def forward(self, x):
        return self.pool(x)


def get_inputs():
    return [torch.randn(batch_size, channels, length)]


def get_init_inputs():
    return [3, 2, 1]
