"""Fused residual add + layer norm in Triton: one program per row, the whole row in one block."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def residual_layernorm_kernel(x_ptr, res_ptr, w_ptr, b_ptr, out_ptr, n_cols, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    res = tl.load(res_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    # centre each input on its own mean before adding: x + res would round away small deviations
    x_mean = tl.sum(x, axis=0) / n_cols
    res_mean = tl.sum(res, axis=0) / n_cols
    diff = tl.where(mask, (x - x_mean) + (res - res_mean), 0.0)
    shift = tl.sum(diff, axis=0) / n_cols
    var = tl.sum(diff * diff, axis=0) / n_cols - shift * shift
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    y = (diff - shift) * rstd * w + b
    tl.store(out_ptr + row * n_cols + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))
        self.bias = nn.Parameter(0.1 * torch.randn(dim))
        self.eps = 1e-5

    def forward(self, x, residual):
        x = x.contiguous()
        residual = residual.contiguous()
        n_cols = x.shape[-1]
        out = torch.empty_like(x)
        block = triton.next_power_of_2(n_cols)
        residual_layernorm_kernel[(x.numel() // n_cols,)](x, residual, self.weight, self.bias, out, n_cols,
                                                          self.eps, BLOCK_SIZE=block)
        return out
