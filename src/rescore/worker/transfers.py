"""Copies between the host and a GPU that cost one wait for many tensors, or none.

On a GPU that several worker processes share (without MPS they take turns), each wait for the
device costs a turn: a plain `.cpu()` per tensor waits once per tensor, and a plain upload from
ordinary memory waits too. Small tensors go through pinned memory here: uploads do not wait at all,
and copies back wait once for the lot. Large ones (a 2^31-element trigger) are copied as usual, so
that no pinned block of gigabytes stays cached in the worker.
"""

from __future__ import annotations

import torch

# Past this many bytes a tensor is copied the plain way, not through the pinned cache.
PINNED_COPY_BYTES = 1 << 24


def _small(x: torch.Tensor) -> bool:
    return x.numel() * x.element_size() <= PINNED_COPY_BYTES


def to_host(tensors: list) -> list:
    """`tensors` with every CUDA tensor replaced by a host copy (anything else as it is)."""
    out = list(tensors)
    pending = False
    for i, x in enumerate(out):
        if isinstance(x, torch.Tensor) and x.device.type == "cuda":
            x = x.detach()
            if _small(x):
                out[i] = x.to("cpu", non_blocking=True)
                pending = True
            else:
                out[i] = x.cpu()
    if pending:
        torch.cuda.synchronize()
    return out


def to_device(x: torch.Tensor, device: str) -> torch.Tensor:
    """A host tensor on `device`; to a GPU without waiting when it is small (pinned memory keeps
    its block until the copy is done)."""
    if device != "cuda" or x.device.type != "cpu" or not _small(x):
        return x.to(device)
    return x.pin_memory().to(device, non_blocking=True)
