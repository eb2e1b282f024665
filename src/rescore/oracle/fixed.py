"""The benchmark's own correctness check, reproduced exactly (KernelBench's `run_and_check_correctness`),
and the same check judging a problem's null candidates.

Weights: `torch.manual_seed(42)` before `Model(*init)` and again before `ModelNew(*init)`. Trials:
`torch.manual_seed(42)` then one `torch.randint(0, 2**32 - 1, (1,))` per trial; each trial seeds
with its trial seed before `get_inputs()`, runs both models at the same precision on the same
device, checks the shape, then `torch.allclose(ref, new, atol=tol, rtol=tol)` (equal_nan=False).
Correct only if every trial passes.

The null candidates (`model/nulls.py`) are judged in the same trials (`null_check`): no ModelNew is
built, the reference runs once per trial while a null is still passing, and each null's output is
derived from the reference's (`null_output`), so that a problem's four nulls cost one run of the
check's reference.
"""

from __future__ import annotations

import types
from collections.abc import Callable

import torch

from rescore.model.nulls import NULLS
from rescore.model.outcomes import FixedVerdict
from rescore.model.tolerances import KERNELBENCH_PROFILES
from rescore.oracle.tolerance import torch_dtype

WEIGHT_SEED = 42
TRIALS = 5
NOISE_SEED = 1234  # the `noise` null's own generator: the same noise in every trial, the global RNG untouched


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


def _built(factory: Callable, init: list):
    """A model built as the benchmark builds both of its models: the weight seed first."""
    _seed_all(WEIGHT_SEED)
    return factory(*init)


def _trials(problem: types.ModuleType, models: list, device: str, dtype: torch.dtype, trials: int,
            judge: Callable[[int, list, list], bool | None]) -> None:
    """The check's trials: each seeded with its trial seed before `get_inputs()` and again before each
    model is moved to the device and precision; `judge(seed, inputs, models)` runs the trial, and the
    trials stop where it returns False (nothing left to judge)."""
    with torch.no_grad():
        for seed in trial_seeds(WEIGHT_SEED, trials):
            _seed_all(seed)
            inputs = [_to(x, device, dtype) for x in problem.get_inputs()]
            for i, model in enumerate(models):
                _seed_all(seed)
                models[i] = model.to(device).to(dtype)
            if judge(seed, inputs, models) is False:
                return


def _compared(seed: int, out: torch.Tensor, new, tol: float) -> dict:
    """One trial's result: the shape check, then allclose and the differences."""
    if not isinstance(new, torch.Tensor) or out.shape != new.shape:
        got = tuple(new.shape) if isinstance(new, torch.Tensor) else type(new).__name__
        return {"seed": seed, "passed": False, "reason": f"output shape {got} != {tuple(out.shape)}"}
    passed = bool(torch.allclose(out, new.to(out.dtype), atol=tol, rtol=tol))
    diff = (out.double() - new.double()).abs()
    return {
        "seed": seed,
        "passed": passed,
        "max_difference": float(diff.max()) if diff.numel() else 0.0,
        "avg_difference": float(diff.mean()) if diff.numel() else 0.0,
    }


def _verdict(results: list[dict]) -> FixedVerdict:
    return FixedVerdict.PASS if all(r["passed"] for r in results) else FixedVerdict.FAIL


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
    init = problem.get_init_inputs()
    models = [_built(problem.Model, init), _built(candidate.ModelNew, init)]
    results: list[dict] = []

    def judge(seed: int, inputs: list, models: list) -> None:
        model, model_new = models
        out = model(*inputs)
        out_new = model_new(*inputs)
        if device == "cuda":
            torch.cuda.synchronize()
        results.append(_compared(seed, out, out_new, tol))

    _trials(problem, models, device, torch_dtype(dtype), trials, judge)
    return {"verdict": _verdict(results), "profile": profile, "tolerance": tol, "trials": results}


def null_output(kind: str, out, inputs: list) -> torch.Tensor | None:
    """The output of the null candidate `kind` given the reference's output `out` on `inputs`; None
    where it does not apply (no single tensor output; for `input`, no input of the output's shape)."""
    if not isinstance(out, torch.Tensor):
        return None
    if kind == "zeros":
        return torch.zeros_like(out)
    if kind == "mean":
        return torch.full_like(out, float(out.double().mean()))
    if kind == "input":
        same = [x for x in inputs if isinstance(x, torch.Tensor) and x.shape == out.shape]
        return same[0].to(out.dtype).clone() if same else None
    if kind == "noise":
        noise = torch.randn(out.shape, generator=torch.Generator().manual_seed(NOISE_SEED), dtype=torch.float64)
        scale = float(out.double().std()) if out.numel() > 1 else 1.0
        return (float(out.double().mean()) + scale * noise).to(out.dtype).to(out.device)
    raise ValueError(f"unknown null candidate {kind!r}; known: {NULLS}")


def null_check(
    problem: types.ModuleType,
    device: str,
    dtype: str = "float32",
    profile: str = "kernelbench-v0.1",
    trials: int = TRIALS,
) -> dict:
    """The fixed-shape check of each null candidate (`NULLS`): the reference built and run as in
    `kernelbench_check`, once per trial, each null's output derived from the reference's and judged as
    a candidate's is. Returns {"profile", "tolerance", "nulls": {kind: {"verdict", "trials"} or None}},
    None for a null that does not apply (`null_output`).

    A null is settled at its first failing trial (the check fails a candidate that fails any trial),
    its `trials` the ones up to that; the trials stop once every null is settled, so that a problem
    whose nulls all fail runs its reference once, not once a trial (a CUDA-L1 problem's nulls at the
    benchmark's sizes, a billion output elements, cost more than the 120 s a job has, five times over).

    Exceptions raised by the problem's code propagate: they are no null's verdict."""
    tol = KERNELBENCH_PROFILES[profile][dtype]
    init = problem.get_init_inputs()
    results: dict[str, list[dict]] = {kind: [] for kind in NULLS}
    inapplicable: set[str] = set()  # as a candidate that raises, a null that does not apply ends its check
    failed: set[str] = set()

    def judge(seed: int, inputs: list, models: list) -> bool:
        out = models[0](*inputs)
        if device == "cuda":
            torch.cuda.synchronize()
        for kind in NULLS:
            if kind in failed:
                continue
            null = None if kind in inapplicable else null_output(kind, out, inputs)
            if null is None:
                inapplicable.add(kind)
            else:
                results[kind].append(_compared(seed, out, null, tol))
                if not results[kind][-1]["passed"]:
                    failed.add(kind)
        return len(inapplicable | failed) < len(NULLS)

    _trials(problem, [_built(problem.Model, init)], device, torch_dtype(dtype), trials, judge)
    nulls = {k: None if k in inapplicable else {"verdict": _verdict(results[k]), "trials": results[k]} for k in NULLS}
    return {"profile": profile, "tolerance": tol, "nulls": nulls}
