"""Mean over dim 1 of a 3-D tensor in Triton: each program owns a strip of dim2 and walks dim1 in tiles.

Strides are passed in, so non-contiguous inputs are read in place.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def mean_dim_kernel(x_ptr, out_ptr, n_reduce, n_cols, stride_b, stride_r, stride_c,
                    BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    batch = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    col_mask = cols < n_cols
    r_offs = tl.arange(0, BLOCK_R)
    acc = tl.zeros([BLOCK_C], dtype=x_ptr.dtype.element_ty)
    for r_start in range(0, n_reduce, BLOCK_R):
        rows = r_start + r_offs
        mask = (rows < n_reduce)[:, None] & col_mask[None, :]
        ptrs = x_ptr + batch * stride_b + rows[:, None] * stride_r + cols[None, :] * stride_c
        tile = tl.load(ptrs, mask=mask, other=0.0)
        acc += tl.sum(tile, axis=0)
    mean = acc / n_reduce
    tl.store(out_ptr + batch * n_cols + cols, mean.to(out_ptr.dtype.element_ty), mask=col_mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        n_batch, n_reduce, n_cols = x.shape
        out = torch.empty((n_batch, n_cols), dtype=x.dtype, device=x.device)
        block_r = min(triton.next_power_of_2(n_reduce), 128)
        block_c = min(triton.next_power_of_2(n_cols), 64)
        grid = (n_batch, triton.cdiv(n_cols, block_c))
        mean_dim_kernel[grid](x, out, n_reduce, n_cols, x.stride(0), x.stride(1), x.stride(2),
                              BLOCK_R=block_r, BLOCK_C=block_c)
        return out
