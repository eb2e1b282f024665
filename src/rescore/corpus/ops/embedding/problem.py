"""Embedding lookup: gather rows of a [num_embeddings, embedding_dim] table by int64 token ids."""
import torch
import torch.nn as nn

num_embeddings = 128
embedding_dim = 128
batch_size = 4
seq_len = 32


class Model(nn.Module):
    def __init__(self, num_embeddings, embedding_dim):
        super().__init__()
        self.embedding = nn.Embedding(num_embeddings, embedding_dim)

    def forward(self, indices):
        return self.embedding(indices)


def get_inputs():
    return [torch.randint(0, num_embeddings, (batch_size, seq_len))]


def get_init_inputs():
    return [num_embeddings, embedding_dim]
