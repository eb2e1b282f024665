"""Row softmax in Triton for float32 only: other dtypes are refused before any launch."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_fp32_kernel(x_ptr, out_ptr, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=float("-inf"))
    numerator = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * n_cols + cols, numerator / tl.sum(numerator, axis=0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        if x.dtype != torch.float32:
            raise TypeError(f"softmax_fp32_kernel supports float32 only, got {x.dtype}")
        x = x.contiguous()
        n_cols = x.shape[-1]
        out = torch.empty_like(x)
        softmax_fp32_kernel[(x.numel() // n_cols,)](x, out, n_cols, BLOCK_SIZE=triton.next_power_of_2(n_cols))
        return out
