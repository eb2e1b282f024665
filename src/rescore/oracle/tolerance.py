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

# torch.testing.assert_close defaults (rtol, atol) per dtype.
TORCH_DEFAULTS: dict[str, tuple[float, float]] = {
    "float64": (1e-7, 1e-7),
    "float32": (1.3e-6, 1e-5),
    "float16": (1e-3, 1e-5),
    "bfloat16": (1.6e-2, 1e-5),
}

DTYPES: dict[str, torch.dtype] = {
    "float64": torch.float64,
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}

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


DEFAULT_POLICY = ReferenceLowp()


def torch_dtype(name: str) -> torch.dtype:
    try:
        return DTYPES[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; known: {sorted(DTYPES)}") from None
