import torch
import torch.nn as nn

batch_size = 4
in_channels = 16
out_channels = 16
length = 256
kernel_size = 3


class Model(nn.Module):
    """Standard 1D convolution, stride 1, 'same' zero padding of kernel_size // 2, with bias."""

    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, padding=kernel_size // 2, bias=True)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(batch_size, in_channels, length)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
