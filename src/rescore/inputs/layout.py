"""Memory layouts: the same values seen through real non-contiguous strides and storage offsets."""

from __future__ import annotations

import torch

LAYOUTS = ("contiguous", "transposed", "sliced", "offset")


def apply_layout(t: torch.Tensor, layout: str) -> torch.Tensor:
    """A tensor equal to `t` whose storage is laid out as `layout` says (the kernel sees the strides)."""
    if layout == "contiguous" or t.dim() == 0 or t.numel() == 0:
        return t.contiguous()
    if layout == "transposed":
        if t.dim() < 2:
            return apply_layout(t, "sliced")
        return t.transpose(-1, -2).contiguous().transpose(-1, -2)
    if layout == "sliced":
        wide = torch.empty(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype, device=t.device)
        view = wide[..., ::2]
        view.copy_(t)
        return view
    if layout == "offset":
        storage = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)
        view = storage[1:].view(t.shape)
        view.copy_(t)
        return view
    raise ValueError(f"unknown layout {layout!r}; known: {LAYOUTS}")
