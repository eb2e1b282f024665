"""The benchmark's own correctness check, reproduced exactly (KernelBench's `run_and_check_correctness`).

Weights: `torch.manual_seed(42)` before `Model(*init)` and again before `ModelNew(*init)`. Trials:
`torch.manual_seed(42)` then one `torch.randint(0, 2**32 - 1, (1,))` per trial; each trial seeds
with its trial seed before `get_inputs()`, runs both models at the same precision on the same
device, checks the shape, then `torch.allclose(ref, new, atol=tol, rtol=tol)` (equal_nan=False).
Correct only if every trial passes.
"""

from __future__ import annotations

import types

import torch

from rescore.model.outcomes import FixedVerdict
from rescore.model.tolerances import KERNELBENCH_PROFILES
from rescore.oracle.tolerance import torch_dtype

WEIGHT_SEED = 42
TRIALS = 5


def trial_seeds(seed: int = WEIGHT_SEED, trials: int = TRIALS) -> list[int]:
    torch.manual_seed(seed)
    return [int(torch.randint(0, 2**32 - 1, (1,)).item()) for _ in range(trials)]


def _seed_all(seed: int) -> None:
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed(seed)


def _to(x, device: str, dtype: torch.dtype):
    if isinstance(x, torch.Tensor):
        x = x.to(device)
        return x.to(dtype) if x.is_floating_point() else x
    return x


def kernelbench_check(
    problem: types.ModuleType,
    candidate: types.ModuleType,
    device: str,
    dtype: str = "float32",
    profile: str = "kernelbench-v0.1",
    trials: int = TRIALS,
) -> dict:
    """Run the fixed-shape check; returns verdict, per-trial results and the benchmark's metadata.

    Exceptions raised by the candidate propagate: the caller classifies them (compile_error, crash,
    declined) exactly as it does for fuzz cases.
    """
    tol = KERNELBENCH_PROFILES[profile][dtype]
    tdtype = torch_dtype(dtype)
    init = problem.get_init_inputs()
    _seed_all(WEIGHT_SEED)
    model = problem.Model(*init)
    _seed_all(WEIGHT_SEED)
    model_new = candidate.ModelNew(*init)
    results = []
    with torch.no_grad():
        for seed in trial_seeds(WEIGHT_SEED, trials):
            _seed_all(seed)
            inputs = [_to(x, device, tdtype) for x in problem.get_inputs()]
            _seed_all(seed)
            model = model.to(device).to(tdtype)
            _seed_all(seed)
            model_new = model_new.to(device).to(tdtype)
            out = model(*inputs)
            out_new = model_new(*inputs)
            if device == "cuda":
                torch.cuda.synchronize()
            if not isinstance(out_new, torch.Tensor) or out.shape != out_new.shape:
                got = tuple(out_new.shape) if isinstance(out_new, torch.Tensor) else type(out_new).__name__
                results.append({"seed": seed, "passed": False, "reason": f"output shape {got} != {tuple(out.shape)}"})
                continue
            passed = bool(torch.allclose(out, out_new.to(out.dtype), atol=tol, rtol=tol))
            diff = (out.double() - out_new.double()).abs()
            results.append(
                {
                    "seed": seed,
                    "passed": passed,
                    "max_difference": float(diff.max()) if diff.numel() else 0.0,
                    "avg_difference": float(diff.mean()) if diff.numel() else 0.0,
                }
            )
    verdict = FixedVerdict.PASS if all(r["passed"] for r in results) else FixedVerdict.FAIL
    return {"verdict": verdict, "profile": profile, "tolerance": tol, "trials": results}
