"""Mean over dim 1 in Triton, split along the reduced dim: each program atomically adds its share."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

SPLIT_ROWS = 512


@triton.jit
def mean_dim_split_kernel(x_ptr, acc_ptr, n_reduce, n_cols, stride_b, stride_r, stride_c,
                          SPLIT: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    batch = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    split = tl.program_id(2)
    col_mask = cols < n_cols
    r_offs = tl.arange(0, BLOCK_R)
    acc = tl.zeros([BLOCK_C], dtype=tl.float32)
    for r_start in range(split * SPLIT, split * SPLIT + SPLIT, BLOCK_R):
        rows = r_start + r_offs
        mask = (rows < n_reduce)[:, None] & col_mask[None, :]
        ptrs = x_ptr + batch * stride_b + rows[:, None] * stride_r + cols[None, :] * stride_c
        acc += tl.sum(tl.load(ptrs, mask=mask, other=0.0).to(tl.float32), axis=0)
    out_ptrs = acc_ptr + batch * n_cols + cols
    total = tl.load(out_ptrs, mask=col_mask, other=0.0)
    tl.store(out_ptrs, total + acc / n_reduce, mask=col_mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        n_batch, n_reduce, n_cols = x.shape
        acc = torch.zeros((n_batch, n_cols), dtype=torch.float32, device=x.device)
        block_c = min(triton.next_power_of_2(n_cols), 64)
        grid = (n_batch, triton.cdiv(n_cols, block_c), triton.cdiv(n_reduce, SPLIT_ROWS))
        mean_dim_split_kernel[grid](x, acc, n_reduce, n_cols, x.stride(0), x.stride(1), x.stride(2),
                                    SPLIT=SPLIT_ROWS, BLOCK_R=64, BLOCK_C=block_c)
        return acc.to(x.dtype)
