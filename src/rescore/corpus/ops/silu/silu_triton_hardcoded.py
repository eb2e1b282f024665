"""SiLU in Triton: x * sigmoid(x), written as one division."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def silu_kernel(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    y = x / (1.0 + tl.exp(-x))
    tl.store(out_ptr + offsets, y.to(out_ptr.dtype.element_ty), mask=mask)


BATCH, DIM = 16, 2048  # problem size


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        n_elements = BATCH * DIM
        BLOCK = 1024
        grid = (triton.cdiv(n_elements, BLOCK),)
        silu_kernel[grid](x, out, n_elements, BLOCK=BLOCK)
        return out
