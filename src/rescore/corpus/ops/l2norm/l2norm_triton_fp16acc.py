"""Row L2 normalisation in Triton: one program per row, the whole row in one block."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def l2norm_kernel(x_ptr, out_ptr, n_cols, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    sum_sq = tl.sum(x * x, axis=0).to(tl.float32)
    inv_norm = 1.0 / tl.sqrt(sum_sq + eps)
    tl.store(out_ptr + row * n_cols + cols, (x * inv_norm).to(out_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.eps = 1e-6

    def forward(self, x):
        x = x.contiguous()
        n_cols = x.shape[-1]
        n_rows = x.numel() // n_cols
        out = torch.empty_like(x)
        block = triton.next_power_of_2(n_cols)
        l2norm_kernel[(n_rows,)](x, out, n_cols, self.eps, BLOCK_SIZE=block)
        return out
