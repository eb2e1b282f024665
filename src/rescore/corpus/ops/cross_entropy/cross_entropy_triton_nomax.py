"""Mean cross-entropy in Triton: one program per row runs an online log-sum-exp over the classes and
atomically adds its loss / batch into the scalar result."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def cross_entropy_kernel(logits_ptr, targets_ptr, loss_ptr, n_classes, inv_batch, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    row_ptr = logits_ptr + row * n_classes
    offs = tl.arange(0, BLOCK_SIZE)
    run_sum = 0.0
    for start in range(0, n_classes, BLOCK_SIZE):
        cols = start + offs
        logits = tl.load(row_ptr + cols, mask=cols < n_classes, other=float("-inf")).to(tl.float32)
        run_sum += tl.sum(tl.exp(logits), axis=0)
    lse = tl.log(run_sum)
    target = tl.load(targets_ptr + row)
    target_logit = tl.load(row_ptr + target).to(tl.float32)
    tl.atomic_add(loss_ptr, (lse - target_logit) * inv_batch)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits, targets):
        logits = logits.contiguous()
        targets = targets.contiguous()
        n_rows, n_classes = logits.shape
        loss = torch.zeros(1, dtype=torch.float32, device=logits.device)
        block = min(triton.next_power_of_2(n_classes), 1024)
        cross_entropy_kernel[(n_rows,)](logits, targets, loss, n_classes, 1.0 / n_rows, BLOCK_SIZE=block)
        return loss[0].to(logits.dtype)
