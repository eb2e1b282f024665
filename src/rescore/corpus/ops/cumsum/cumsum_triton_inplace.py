"""Row prefix sum in Triton: one program per row, a block scan per chunk plus a float32 running carry."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def cumsum_kernel(x_ptr, out_ptr, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_SIZE)
    carry = 0.0
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + offs
        mask = cols < n_cols
        x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
        prefix = tl.cumsum(x, axis=0) + carry
        tl.store(out_ptr + row * n_cols + cols, prefix.to(out_ptr.dtype.element_ty), mask=mask)
        carry += tl.sum(x, axis=0)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        n_cols = x.shape[-1]
        out = x  # scan in place
        block = min(triton.next_power_of_2(n_cols), 512)
        cumsum_kernel[(x.numel() // n_cols,)](x, out, n_cols, BLOCK_SIZE=block)
        return out
