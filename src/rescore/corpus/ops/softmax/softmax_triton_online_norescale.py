"""Row softmax in Triton, online form: one pass keeps a running max and rescales the running sum."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def online_softmax_kernel(x_ptr, out_ptr, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    row_ptr = x_ptr + row * n_cols
    cols = tl.arange(0, BLOCK_SIZE)
    run_max = float("-inf")
    run_sum = 0.0
    for start in range(0, n_cols, BLOCK_SIZE):
        mask = start + cols < n_cols
        x = tl.load(row_ptr + start + cols, mask=mask, other=float("-inf")).to(tl.float32)
        new_max = tl.maximum(run_max, tl.max(x, axis=0))
        # while only -inf has been seen, shift by 0 so the exponentials stay defined
        shift = tl.where(new_max == float("-inf"), 0.0, new_max)
        run_sum = run_sum + tl.sum(tl.exp(x - shift), axis=0)
        run_max = new_max
    for start in range(0, n_cols, BLOCK_SIZE):
        mask = start + cols < n_cols
        x = tl.load(row_ptr + start + cols, mask=mask, other=float("-inf")).to(tl.float32)
        y = tl.exp(x - run_max) / run_sum
        tl.store(out_ptr + row * n_cols + start + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        n_cols = x.shape[-1]
        n_rows = x.numel() // n_cols
        out = torch.empty_like(x)
        block = min(triton.next_power_of_2(n_cols), 1024)
        online_softmax_kernel[(n_rows,)](x, out, n_cols, BLOCK_SIZE=block)
        return out
