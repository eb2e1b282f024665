"""The tolerance policies as data: each named policy's (atol, rtol) per dtype and what it means.
The rules that judge a tensor with them are in `rescore.oracle.tolerance`; the study tables read
these names and numbers without torch.
"""

from __future__ import annotations

# torch.testing.assert_close defaults (rtol, atol) per dtype.
TORCH_DEFAULTS: dict[str, tuple[float, float]] = {
    "float64": (1e-7, 1e-7),
    "float32": (1.3e-6, 1e-5),
    "float16": (1e-3, 1e-5),
    "bfloat16": (1.6e-2, 1e-5),
}

# The dtypes the oracle judges.
DTYPES: tuple[str, ...] = ("float64", "float32", "float16", "bfloat16")

# KernelBench's allclose tolerance profiles (atol = rtol), per dtype.
KERNELBENCH_PROFILES: dict[str, dict[str, float]] = {
    "kernelbench-v0.1": {"float32": 1e-2, "float16": 1e-2, "bfloat16": 1e-2},
    "kernelbench-head": {"float32": 1e-4, "float16": 1e-2, "bfloat16": 1e-2},
}

# The classical bound on a sum's rounding error is n eps sum|x_i|; the low-precision reference's
# own error covers the usual n, this covers the terms' size (the cancellations it cannot see).
TERMS_FACTOR = 2.0

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

# The policies a judged case carries a ratio for (the `policy_ratios` column), in this order: a case
# passes a policy iff its ratio <= 1; `calibrated-base` is the calibrated error model with k = 1.
RATIO_POLICIES: tuple[str, ...] = (*FIXED_POLICIES, "reference-lowp", "calibrated-base")
