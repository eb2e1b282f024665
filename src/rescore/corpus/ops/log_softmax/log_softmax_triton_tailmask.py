"""Row log-softmax in Triton: one program per row, the whole row in one block."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def log_softmax_kernel(x_ptr, out_ptr, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    shifted = x - tl.max(x, axis=0)
    log_norm = tl.log(tl.sum(tl.exp(shifted), axis=0))
    y = shifted - log_norm
    tl.store(out_ptr + row * n_cols + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        n_cols = x.shape[-1]
        out = torch.empty_like(x)
        block = triton.next_power_of_2(n_cols)
        log_softmax_kernel[(x.numel() // n_cols,)](x, out, n_cols, BLOCK_SIZE=block)
        return out
