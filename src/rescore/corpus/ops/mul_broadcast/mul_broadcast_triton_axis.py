"""Row scaling in Triton over the flat index: each element reads the scale of its row, offset // n_cols."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_scale_kernel(x_ptr, scale_ptr, out_ptr, n_elements, n_rows, n_cols, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    rows = offsets // n_rows
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    scale = tl.load(scale_ptr + rows, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + offsets, (x * scale).to(out_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, scale):
        x = x.contiguous()
        scale = scale.contiguous()
        n_rows, n_cols = x.shape
        out = torch.empty_like(x)
        n_elements = x.numel()
        BLOCK = 1024
        grid = (triton.cdiv(n_elements, BLOCK),)
        row_scale_kernel[grid](x, scale, out, n_elements, n_rows, n_cols, BLOCK=BLOCK)
        return out
