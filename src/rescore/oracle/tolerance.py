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

import torch

from rescore.model.tolerances import DTYPES, FIXED_POLICIES, RATIO_POLICIES, TERMS_FACTOR, TORCH_DEFAULTS
from rescore.oracle import compare


def accumulation_eps(dtype: str) -> float:
    """The epsilon a correct kernel sums in: float32's for float32 and the half types (which
    accumulate in float32; their inputs are rounded in the truth already), float64's for float64."""
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
        return (TERMS_FACTOR * accumulation_eps(dtype)) * terms.to(torch.float64)

DEFAULT_POLICY = ReferenceLowp()

def policy_ratios(out: torch.Tensor, truth: torch.Tensor, dtype: str, lowp_slack: float | torch.Tensor,
                  reduction_len: int, nonfinite: bool, lowp_tols: tuple[float, float] | None = None
                  ) -> dict[str, float]:
    """Per policy, max over elements of |out - truth| / bound: the case passes that policy iff <= 1.

    `reference-lowp` uses the (atol, rtol) of the case's verdict (`lowp_tols`: the op's overrides
    applied), else the dtype's torch defaults. `calibrated-base` is the calibrated error model with
    k = 1: calibration picks k per (op, dtype), so any k (and any safety multiplier) can be judged
    later from this one number.
    """
    chunk_elements = compare.CHUNK_ELEMENTS  # read at call time: a test sets it small
    names = list(RATIO_POLICIES)
    if nonfinite:
        return {name: float("inf") for name in names}
    n = out.numel()
    flat_o, flat_t = out.detach().reshape(-1), truth.detach().reshape(-1)
    flat_s = lowp_slack.reshape(-1) if isinstance(lowp_slack, torch.Tensor) else None
    starts = range(0, n, chunk_elements)  # one chunk but for a 2^31-element trigger

    def chunk(i: int):
        """(|out - truth|, |truth|, slack) where both are finite, or None where nothing is. A chunk
        finite everywhere (nearly every case) skips the masking: the same values, fewer passes."""
        part = slice(i, i + chunk_elements)
        o, t = flat_o[part].to(torch.float64), flat_t[part].to(torch.float64)
        slack = lowp_slack if flat_s is None else flat_s[part].to(torch.float64)  # a linear op's
        if bool(compare.all_finite(o) & compare.all_finite(t)):
            return (o - t).abs(), t.abs(), slack
        both = torch.isfinite(o) & torch.isfinite(t)
        if not bool(both.any()):
            return None
        return (o - t).abs()[both], t.abs()[both], slack if flat_s is None else slack[both]

    one = [chunk(i) for i in starts] if n <= chunk_elements else None  # computed once, used by both passes

    def chunks():
        return [c for c in (one if one is not None else map(chunk, starts)) if c is not None]

    tops = [mag.max() for _, mag, _ in chunks()]
    if not tops:
        return {name: 0.0 for name in names}
    top = torch.stack(tops).max()  # the largest |truth| where both are finite: the calibrated model's scale
    atol, rtol = lowp_tols if lowp_tols is not None else TORCH_DEFAULTS[dtype][::-1]
    eps = float(torch.finfo(torch_dtype(dtype)).eps)
    tiny = float(torch.finfo(torch_dtype(dtype)).smallest_normal)
    # The sum's rounding at the accumulation precision: with the half type's eps there, a float16
    # variance summed in float16 passed at bfloat16 (H200, var_dim_triton_fp16acc).
    scale = accumulation_eps(dtype) * top * max(1, reduction_len) ** 0.5
    # Each bound as `atol + rtol * |truth| (+ slack)`, built in one buffer in that order (the same
    # roundings as the expression), each ratio's maximum left on the device until one read: an output
    # of 8M elements took 0.69 s here in fresh temporaries, and on a GPU every read is a wait.
    fixed = [(f_rtol, f_atol, None) for f_atol, f_rtol in (table[dtype] for table in FIXED_POLICIES.values())]
    ratios = [0.0] * len(names)
    for err, mag, slack in chunks():
        bound, maxima = torch.empty_like(mag), []
        for times, plus, then in [*fixed, (rtol, atol, slack), (eps, scale, tiny)]:
            torch.mul(mag, times, out=bound).add_(plus)
            if then is not None:
                bound.add_(then)
            maxima.append(torch.div(err, bound, out=bound).max())
        ratios = [max(r, f) for r, f in zip(ratios, torch.stack(maxima).tolist())]
    return dict(zip(names, ratios))


def torch_dtype(name: str) -> torch.dtype:
    if name not in DTYPES:
        raise ValueError(f"unknown dtype {name!r}; known: {sorted(DTYPES)}")
    return getattr(torch, name)
