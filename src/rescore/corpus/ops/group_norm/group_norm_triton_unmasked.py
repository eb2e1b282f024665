"""Group norm in Triton: one program per (sample, group); the group is one contiguous span, read in blocks."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def group_norm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, group_size, channels_per_group, length, num_groups, eps,
                      BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    group = pid % num_groups
    x_group = x_ptr + pid * group_size
    out_group = out_ptr + pid * group_size
    offs = tl.arange(0, BLOCK_SIZE)

    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, group_size, BLOCK_SIZE):
        idx = start + offs
        acc += tl.load(x_group + idx, mask=idx < group_size, other=0.0).to(tl.float32)
    mean = tl.sum(acc, axis=0) / group_size

    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    acc_sq = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, group_size, BLOCK_SIZE):
        idx = start + offs
        x = tl.load(x_group + idx).to(tl.float32)
        diff = x - mean
        acc += diff
        acc_sq += diff * diff
    # the deviations' own mean corrects the rounding of the first-pass mean
    shift = tl.sum(acc, axis=0) / group_size
    var = tl.sum(acc_sq, axis=0) / group_size - shift * shift
    rstd = 1.0 / tl.sqrt(var + eps)

    for start in range(0, group_size, BLOCK_SIZE):
        idx = start + offs
        mask = idx < group_size
        channel = group * channels_per_group + idx // length
        x = tl.load(x_group + idx, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + channel, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + channel, mask=mask, other=0.0).to(tl.float32)
        y = (x - mean - shift) * rstd * w + b
        tl.store(out_group + idx, y.to(out_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, num_groups, num_channels):
        super().__init__()
        self.num_groups = num_groups
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(num_channels))
        self.bias = nn.Parameter(0.1 * torch.randn(num_channels))
        self.eps = 1e-5

    def forward(self, x):
        x = x.contiguous()
        n_batch, n_channels, length = x.shape
        channels_per_group = n_channels // self.num_groups
        group_size = channels_per_group * length
        out = torch.empty_like(x)
        block = min(triton.next_power_of_2(group_size), 1024)
        group_norm_kernel[(n_batch * self.num_groups,)](
            x, self.weight, self.bias, out, group_size, channels_per_group, length, self.num_groups, self.eps,
            BLOCK_SIZE=block)
        return out
