"""Row top-k values in Triton: one program per row, k rounds of (max, knock out its first occurrence)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def topk_kernel(x_ptr, out_ptr, n_cols, k, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=float("-inf")).to(tl.float32)
    remaining = x
    for i in range(0, k):
        best = tl.max(remaining, axis=0)
        pos = tl.min(tl.where(mask & (remaining == best), cols, BLOCK_SIZE), axis=0)
        tl.store(out_ptr + row * k + i, best.to(out_ptr.dtype.element_ty))
        remaining = tl.where(cols == pos, float("-inf"), remaining)


class ModelNew(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.k = k

    def forward(self, x):
        x = x.contiguous()
        n_cols = x.shape[-1]
        n_rows = x.numel() // n_cols
        out = torch.empty(x.shape[:-1] + (self.k,), dtype=x.dtype, device=x.device)
        block = triton.next_power_of_2(n_cols)
        topk_kernel[(n_rows,)](x, out, n_cols, self.k, BLOCK_SIZE=block)
        return out
