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


# The classical bound on a sum's rounding error is n eps sum|x_i|; the low-precision reference's
# own error covers the usual n, this covers the terms' size (the cancellations it cannot see).
TERMS_FACTOR = 2.0


def accumulation_eps(dtype: str) -> float:
    """The epsilon a correct kernel sums in: float32's for float32 and the half types (which
    accumulate in float32; their inputs are rounded in the truth already), float64's for float64."""
    import torch

    return float(torch.finfo(torch.float64 if dtype == "float64" else torch.float32).eps)


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

        return (TERMS_FACTOR * accumulation_eps(dtype)) * terms.to(torch.float64)

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
    "calibrated": "rescore: |out-ref| <= k (eps |ref| + eps_acc sqrt(L) max|ref|), k fit per (op, dtype) on "
                  "calibration seeds; eps_acc is float32's for the half types, which accumulate in float32",
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

    from rescore.oracle.compare import CHUNK_ELEMENTS

    names = [*FIXED_POLICIES, "reference-lowp", "calibrated-base"]
    if nonfinite:
        return {name: float("inf") for name in names}
    n = out.numel()
    flat_o, flat_t = out.detach().reshape(-1), truth.detach().reshape(-1)
    flat_s = lowp_slack.reshape(-1) if isinstance(lowp_slack, torch.Tensor) else None
    starts = range(0, n, CHUNK_ELEMENTS)  # one chunk but for a 2^31-element trigger

    def chunk(i: int):
        part = slice(i, i + CHUNK_ELEMENTS)
        o, t = flat_o[part].to(torch.float64), flat_t[part].to(torch.float64)
        both = torch.isfinite(o) & torch.isfinite(t)
        slack = lowp_slack if flat_s is None else flat_s[part].to(torch.float64)[both]  # a linear op's
        return o, t, both, slack

    one = [chunk(i) for i in starts] if n <= CHUNK_ELEMENTS else None  # computed once, used by both passes

    def chunks():
        return one if one is not None else map(chunk, starts)

    top = None  # the largest |truth| where both are finite: the calibrated model's scale
    for _, t, both, _ in chunks():
        if bool(both.any()):
            m = float(t.abs()[both].max())
            top = m if top is None else max(top, m)
    if top is None:
        return {name: 0.0 for name in names}
    atol, rtol = lowp_tols if lowp_tols is not None else TORCH_DEFAULTS[dtype][::-1]
    eps = float(torch.finfo(torch_dtype(dtype)).eps)
    tiny = float(torch.finfo(torch_dtype(dtype)).smallest_normal)
    # The sum's rounding at the accumulation precision: with the half type's eps there, a float16
    # variance summed in float16 passed at bfloat16 (H200, var_dim_triton_fp16acc).
    scale = accumulation_eps(dtype) * top * max(1, reduction_len) ** 0.5
    ratios = {name: 0.0 for name in names}
    for o, t, both, slack in chunks():
        if not bool(both.any()):
            continue
        err, mag = (o - t).abs()[both], t.abs()[both]
        found = {}
        for name, table in FIXED_POLICIES.items():
            f_atol, f_rtol = table[dtype]
            found[name] = float((err / (f_atol + f_rtol * mag)).max())
        found["reference-lowp"] = float((err / (atol + rtol * mag + slack)).max())
        found["calibrated-base"] = float((err / (eps * mag + scale + tiny)).max())
        ratios = {name: max(ratios[name], found[name]) for name in names}
    return ratios


def torch_dtype(name: str) -> torch.dtype:
    import torch

    if name not in DTYPES:
        raise ValueError(f"unknown dtype {name!r}; known: {sorted(DTYPES)}")
    return getattr(torch, name)
