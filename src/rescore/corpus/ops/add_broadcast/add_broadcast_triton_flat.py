"""Bias add in Triton over the flat index: the bias column is offset % n_cols. The flat index is only
valid for row-major storage, so strided inputs are refused instead of copied."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_bias_flat_kernel(x_ptr, bias_ptr, out_ptr, n_elements, n_rows, n_cols, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    cols = offsets % n_cols
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    bias = tl.load(bias_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + offsets, (x + bias).to(out_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, bias):
        if not (x.is_contiguous() and bias.is_contiguous()):
            raise ValueError("add_bias_flat: x and bias must be contiguous (flat indexing assumes row-major)")
        n_rows, n_cols = x.shape
        out = torch.empty_like(x)
        n_elements = x.numel()
        BLOCK = 1024
        grid = (triton.cdiv(n_elements, BLOCK),)
        add_bias_flat_kernel[grid](x, bias, out, n_elements, n_rows, n_cols, BLOCK=BLOCK)
        return out
