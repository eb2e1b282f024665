"""Bias add in Triton: each program owns BLOCK_ROWS rows and walks across them in column blocks,
so the bias block is loaded once per step and shared by all rows of the tile."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_bias_kernel(x_ptr, bias_ptr, out_ptr, n_rows, n_cols,
                    BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    row_mask = rows < n_rows
    row_start = rows.to(tl.int64) * n_cols
    for col_start in range(0, n_cols, BLOCK_COLS):
        cols = col_start + tl.arange(0, BLOCK_COLS)
        mask = row_mask[:, None]
        offsets = row_start[:, None] + cols[None, :]
        x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
        bias = tl.load(bias_ptr + cols).to(tl.float32)
        y = x + bias[None, :]
        tl.store(out_ptr + offsets, y.to(out_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, bias):
        x = x.contiguous()
        bias = bias.contiguous()
        n_rows, n_cols = x.shape
        out = torch.empty_like(x)
        BLOCK_ROWS, BLOCK_COLS = 16, 128
        grid = (triton.cdiv(n_rows, BLOCK_ROWS),)
        add_bias_kernel[grid](x, bias, out, n_rows, n_cols, BLOCK_ROWS=BLOCK_ROWS, BLOCK_COLS=BLOCK_COLS)
        return out
