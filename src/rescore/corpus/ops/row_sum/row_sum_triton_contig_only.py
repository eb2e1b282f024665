"""Row sum in Triton that reads rows in place and so refuses non-contiguous inputs instead of copying."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_sum_inplace_kernel(x_ptr, out_ptr, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_SIZE)
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + offs
        acc += tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    tl.store(out_ptr + row, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        if not x.is_contiguous():
            raise NotImplementedError("row_sum_inplace_kernel reads rows in place: contiguous input only")
        n_cols = x.shape[-1]
        out = torch.empty(x.shape[:-1], dtype=x.dtype, device=x.device)
        block = min(triton.next_power_of_2(n_cols), 2048)
        row_sum_inplace_kernel[(out.numel(),)](x, out, n_cols, BLOCK_SIZE=block)
        return out
