"""Rotary embedding in Triton: x is viewed as [batch * seq * heads, head_dim] rows; each program
rotates BLOCK_ROWS rows, both halves at once, with the cos/sin row of each row's position."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def rotary_kernel(x_ptr, cos_ptr, sin_ptr, out_ptr, n_rows, seq_len, n_heads, half,
                  BLOCK_ROWS: tl.constexpr, BLOCK_HALF: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    cols = tl.arange(0, BLOCK_HALF)
    mask = (rows < n_rows)[:, None] & (cols < half)[None, :]
    positions = (rows // n_heads) % seq_len
    x_offsets = rows.to(tl.int64)[:, None] * (2 * half) + cols[None, :]
    t_offsets = positions.to(tl.int64)[:, None] * (2 * half) + cols[None, :]
    x1 = tl.load(x_ptr + x_offsets, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(x_ptr + x_offsets + half, mask=mask, other=0.0).to(tl.float32)
    cos1 = tl.load(cos_ptr + t_offsets, mask=mask, other=0.0).to(tl.float32)
    cos2 = tl.load(cos_ptr + t_offsets + half, mask=mask, other=0.0).to(tl.float32)
    sin1 = tl.load(sin_ptr + t_offsets, mask=mask, other=0.0).to(tl.float32)
    sin2 = tl.load(sin_ptr + t_offsets + half, mask=mask, other=0.0).to(tl.float32)
    out1 = x1 * cos1 - x2 * sin1
    out2 = x2 * cos2 + x1 * sin2
    tl.store(out_ptr + x_offsets, out1.to(out_ptr.dtype.element_ty), mask=mask)
    tl.store(out_ptr + x_offsets + half, out2.to(out_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, cos, sin):
        x, cos, sin = x.contiguous(), cos.contiguous(), sin.contiguous()
        batch, seq_len, n_heads, head_dim = x.shape
        half = head_dim // 2
        n_rows = batch * seq_len * n_heads
        out = torch.empty_like(x)
        BLOCK_ROWS = 64
        BLOCK_HALF = triton.next_power_of_2(half)
        grid = (triton.cdiv(n_rows, BLOCK_ROWS),)
        rotary_kernel[grid](x, cos, sin, out, n_rows, batch, n_heads, half,
                            BLOCK_ROWS=BLOCK_ROWS, BLOCK_HALF=BLOCK_HALF)
        return out
