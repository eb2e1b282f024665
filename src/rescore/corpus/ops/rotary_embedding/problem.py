"""Rotary position embedding (rotate-half form) on x[batch, seq, heads, head_dim], with per-position
cos and sin tables of shape [seq, head_dim]."""
import torch
import torch.nn as nn

batch_size = 8
seq_len = 8
n_heads = 8
half_dim = 32


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, cos, sin):
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]
        rotated = torch.cat((-x2, x1), dim=-1)
        return x * cos[None, :, None, :] + rotated * sin[None, :, None, :]


def get_inputs():
    inv_freq = 1.0 / (10000.0 ** (torch.arange(half_dim, dtype=torch.float32) / half_dim))
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv_freq)
    angles = torch.cat((angles, angles), dim=-1)
    x = torch.randn(batch_size, seq_len, n_heads, 2 * half_dim)
    return [x, angles.cos(), angles.sin()]


def get_init_inputs():
    return []
