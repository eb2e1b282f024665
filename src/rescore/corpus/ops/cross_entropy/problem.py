"""Mean cross-entropy of (batch_size, vocab) logits against int64 class targets."""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 16
vocab = 1024


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits, targets):
        return F.cross_entropy(logits, targets)


def get_inputs():
    return [torch.randn(batch_size, vocab), torch.randint(0, vocab, (batch_size,))]


def get_init_inputs():
    return []
