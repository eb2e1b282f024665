"""Tolerance policies: named, documented rules that turn a case into pass/fail with the bound used.

`reference-lowp` is the fuzz oracle's default (PyTorch's own practice for reference tests): the
candidate may be no farther from float64 than the reference module run at the test dtype (for half
types: in float32 on the rounded inputs, output rounded, as a correct kernel accumulates), times a
small factor, plus the dtype's `assert_close` tolerance. Against float64 a correct reduction's
error scales with the size of its terms and the reduction length, not with the result, so a fixed
rtol alone would flag correct sums that cancel; the low-precision reference carries that scale.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

# torch.testing.assert_close defaults (rtol, atol) per dtype.
TORCH_DEFAULTS: dict[str, tuple[float, float]] = {
    "float64": (1e-7, 1e-7),
    "float32": (1.3e-6, 1e-5),
    "float16": (1e-3, 1e-5),
    "bfloat16": (1.6e-2, 1e-5),
}

# The dtypes the oracle judges. torch is imported where a tensor is touched, so that the study
# tables (a dozen processes at the end of a run) never import it: 1.6 s each on the CPU machine.
DTYPES: tuple[str, ...] = ("float64", "float32", "float16", "bfloat16")

# KernelBench's allclose tolerance profiles (atol = rtol), per dtype.
KERNELBENCH_PROFILES: dict[str, dict[str, float]] = {
    "kernelbench-v0.1": {"float32": 1e-2, "float16": 1e-2, "bfloat16": 1e-2},
    "kernelbench-head": {"float32": 1e-4, "float16": 1e-2, "bfloat16": 1e-2},
}


@dataclass(frozen=True)
class ReferenceLowp:
    """Pass when |out - truth| <= atol + rtol*|truth| + factor * (max error of the reference at the dtype)."""

    name: str = "reference-lowp"
    factor: float = 4.0

    def bound(self, dtype: str, ref_lowp_err: float, overrides: dict | None = None) -> tuple[float, float, float]:
        """(atol, rtol, slack) for this dtype, with the op's overrides applied."""
        rtol, atol = TORCH_DEFAULTS[dtype]
        factor = self.factor
        o = (overrides or {}).get(dtype) or {}
        factor = float(o.get("factor", factor))
        rtol = float(o.get("rtol", rtol))
        atol = float(o.get("atol", atol))
        return atol, rtol, factor * ref_lowp_err

    def terms_slack(self, dtype: str, terms: torch.Tensor) -> torch.Tensor:
        """Elementwise slack of a linear op (schema `linear`): TERMS_FACTOR x the accumulation
        epsilon (float32 for float32 and the half types, which accumulate in float32) x the size of
        the terms each output sums. It covers any summation order, and the float64 truth's own loss
        where the terms are 2^53 times the result."""
        import torch

        eps = float(torch.finfo(torch.float64 if dtype == "float64" else torch.float32).eps)
        return (TERMS_FACTOR * eps) * terms.to(torch.float64)


# The classical bound on a sum's rounding error is n eps sum|x_i|; the low-precision reference's
# own error covers the usual n, this covers the terms' size (the cancellations it cannot see).
TERMS_FACTOR = 2.0

DEFAULT_POLICY = ReferenceLowp()

# Fixed-form policies: (atol, rtol) per dtype, judged against float64 on every case.
FIXED_POLICIES: dict[str, dict[str, tuple[float, float]]] = {
    "kernelbench-v0.1": {d: (1e-2, 1e-2) for d in ("float32", "float16", "bfloat16")},
    "kernelbench-head": {"float32": (1e-4, 1e-4), "float16": (1e-2, 1e-2), "bfloat16": (1e-2, 1e-2)},
    "gpuemu-default": {"float32": (1e-5, 0.0), "float16": (1e-3, 0.0), "bfloat16": (1e-3, 0.0)},
    "torch-default": {d: (atol, rtol) for d, (rtol, atol) in TORCH_DEFAULTS.items()},
}

POLICY_DOCS: dict[str, str] = {
    "kernelbench-v0.1": "KernelBench v0.1: |out-ref| <= 1e-2 + 1e-2|ref| for every dtype",
    "kernelbench-head": "KernelBench head: atol=rtol=1e-4 for fp32, 1e-2 for fp16/bf16",
    "gpuemu-default": "gpuemu default: absolute only, 1e-5 for fp32, 1e-3 for fp16/bf16",
    "torch-default": "torch.testing.assert_close defaults per dtype",
    "reference-lowp": "rescore's fuzz default: torch defaults + 4x the low-precision reference's own error",
    "p95x1.5": "published calibration: atol = 1.5 x p95 of a control's max abs error per (op, dtype)",
    "calibrated": "rescore: |out-ref| <= k eps (|ref| + sqrt(L) max|ref|), k fit per (op, dtype) on calibration seeds",
}


def policy_ratios(out: torch.Tensor, truth: torch.Tensor, dtype: str, lowp_slack: float | torch.Tensor,
                  reduction_len: int, nonfinite: bool, lowp_tols: tuple[float, float] | None = None
                  ) -> dict[str, float]:
    """Per policy, max over elements of |out - truth| / bound: the case passes that policy iff <= 1.

    `reference-lowp` uses the (atol, rtol) of the case's verdict (`lowp_tols`: the op's overrides
    applied), else the dtype's torch defaults. `calibrated-base` is the calibrated error model with
    k = 1: calibration picks k per (op, dtype), so any k (and any safety multiplier) can be judged
    later from this one number.
    """
    import torch

    if nonfinite:
        return {name: float("inf") for name in [*FIXED_POLICIES, "reference-lowp", "calibrated-base"]}
    o = out.detach().to(torch.float64)
    t = truth.detach().to(torch.float64)
    both = torch.isfinite(o) & torch.isfinite(t)
    if not bool(both.any()):
        return {name: 0.0 for name in [*FIXED_POLICIES, "reference-lowp", "calibrated-base"]}
    err, mag = (o - t).abs()[both], t.abs()[both]
    ratios = {}
    for name, table in FIXED_POLICIES.items():
        atol, rtol = table[dtype]
        ratios[name] = float((err / (atol + rtol * mag)).max())
    atol, rtol = lowp_tols if lowp_tols is not None else TORCH_DEFAULTS[dtype][::-1]
    if isinstance(lowp_slack, torch.Tensor):  # a linear op's elementwise slack
        lowp_slack = lowp_slack.to(torch.float64)[both]
    ratios["reference-lowp"] = float((err / (atol + rtol * mag + lowp_slack)).max())
    eps = float(torch.finfo(torch_dtype(dtype)).eps)
    tiny = float(torch.finfo(torch_dtype(dtype)).smallest_normal)
    scale = float(mag.max()) * max(1, reduction_len) ** 0.5
    ratios["calibrated-base"] = float((err / (eps * (mag + scale) + tiny)).max())
    return ratios


def torch_dtype(name: str) -> torch.dtype:
    import torch

    if name not in DTYPES:
        raise ValueError(f"unknown dtype {name!r}; known: {sorted(DTYPES)}")
    return getattr(torch, name)
