"""The reference side of a case: the problem's own Model run in float64 on the case's inputs (the
truth), at the test dtype as a correct kernel computes it (the low-precision reference), and the
truth's other runs (the terms a linear op sums; the values that do not depend on non-finite inputs).

A problem whose Model computes in float64 and rounds its result to the inputs' dtype (gpuemu's
ref_fp64.py scripts) has no low-precision reference to run: at the test dtype it returns the truth
rounded, whose error is half an ulp whatever a correct kernel's roundings add up to. Such a problem
module gives `round_intermediates(u, seed)`, a context manager under which its Model rounds every
intermediate result once, by a relative u either way (Monte Carlo arithmetic); its low-precision
reference is the farthest from the truth of ROUNDING_DRAWS such runs at the accumulation precision's
unit roundoff, rounded to the test dtype: the reference's own algorithm, each step rounded as a
correct float32 kernel rounds it.

Nothing here imports the worker: the worker hands in the problem module, the devices, and a context
manager that records the reference's ops.
"""

from __future__ import annotations

import contextlib
import copy
import time
import types
from collections.abc import Callable

import torch

from rescore.model.oom import is_oom
from rescore.oracle.compare import all_finite, max_finite_error
from rescore.oracle.tolerance import accumulation_eps

ROUND_INTERMEDIATES = "round_intermediates"
"""The problem module's context manager `(u, seed)` under which its Model rounds every intermediate."""

ROUNDING_DRAWS = 3  # Monte Carlo runs per case; the farthest from the truth is the low-precision reference


def intermediate_rounding(problem: types.ModuleType):
    """The problem's `round_intermediates`, or None when its Model is run at the test dtype instead."""
    hook = getattr(problem, ROUND_INTERMEDIATES, None)
    return hook if callable(hook) else None


class ReferenceRejects(Exception):
    """The float64 reference raised on these sizes: the sizes are outside the problem's domain."""


def flatten(out) -> list | None:
    """The tensors of an output (a tensor, or a tuple/list of tensors); None when it is anything else."""
    if type(out) is torch.Tensor:
        return [out]
    if isinstance(out, (tuple, list)) and out and all(type(o) is torch.Tensor for o in out):
        return list(out)
    return None


def seed_generators(device: str, seed: int) -> None:
    """Seed the global random generators of the CPU and the device in use. (`torch.manual_seed`
    also queues a seed for every other accelerator backend and formats a stack trace for each,
    about 1 ms of every case, and a run uses none of them.)"""
    torch.default_generator.manual_seed(seed)
    if device == "cuda":
        torch.cuda.manual_seed_all(seed)


class Reference:
    """The float64 reference of the case in hand: its module (`model64`), the device it ran on, and
    how long its last run took (`seconds`)."""

    def __init__(self, phases=None) -> None:
        self.model64: torch.nn.Module | None = None
        self.device = "cpu"
        self.seconds = 0.0
        # `phases(name)`: a context manager timing a phase (the worker's `PhaseTimer`); none by default
        self.phases = phases or (lambda name: contextlib.nullcontext())
        # called as each run starts: the worker notes that the harness, not the candidate, holds the time
        self.on_run: Callable[[], None] = lambda: None

    def run(self, problem: types.ModuleType, inputs64: list, init: list, tdtype: torch.dtype, wseed: int,
            device: str, truth_device: str, lowp_inputs: list | None = None,
            record: contextlib.AbstractContextManager | None = None) -> tuple[list, list | None]:
        """(truths, low-precision reference outputs) of a case, keeping the float64 module (`model64`)
        for the truth's other runs and recording the reference's ops in `record` (any context
        manager: the worker passes its op recorder). The truth is computed on `truth_device`, the
        low-precision reference (when `lowp_inputs` are given: the case's inputs on the device at the
        test dtype) on `device`. Raises ReferenceRejects when the reference refuses these sizes."""
        self.device = truth_device
        record = record if record is not None else contextlib.nullcontext()
        ref_lowp = None
        self.on_run()
        try:
            with self.phases("reference_build"):
                seed_generators(device, wseed)
                ref_model = round_parameters(problem.Model(*init), tdtype)
                # a copy only where the low-precision reference runs the test-dtype model after the truth
                self.model64 = (ref_model if lowp_inputs is None else copy.deepcopy(ref_model)).to(
                    truth_device).to(torch.float64)
            with torch.no_grad():
                with record:
                    args = [x.to(truth_device) if isinstance(x, torch.Tensor) else x for x in inputs64]
                    start = time.perf_counter()
                    truth = self.model64(*args)
                    if truth_device == "cuda":
                        torch.cuda.synchronize()  # its own time, which a candidate call's limit is drawn from
                    self.seconds = time.perf_counter() - start
                rounding = intermediate_rounding(problem) if lowp_inputs is not None else None
                if rounding is not None:
                    ref_lowp = self.rounding_run(rounding, args, truth, tdtype, wseed, device)
                elif lowp_inputs is not None:
                    ref_lowp = reference_at(ref_model, lowp_inputs, device, tdtype)
        except Exception as exc:  # the reference itself rejects these sizes: draw again
            if is_oom(exc):
                raise  # no rejection: the device was short of memory (the case runs again alone)
            raise ReferenceRejects(f"{type(exc).__name__}: {exc}"[:300]) from exc
        truths = flatten(truth)
        if truths is None:
            raise ReferenceRejects("the reference returned no tensor")
        lowps = flatten(ref_lowp) if ref_lowp is not None else None
        return truths, lowps

    def rounding_run(self, rounding, args: list, truth, tdtype: torch.dtype, wseed: int, device: str):
        """The low-precision reference of a problem whose Model rounds a float64 result (the module's
        docstring): of ROUNDING_DRAWS runs of the float64 Model on `args` under `rounding(u, seed)`, the
        one farthest from `truth` (its output on `args`), rounded to `tdtype` on `device`; None when a
        run fails (the bound is then the dtype's tolerance alone, as without a low-precision reference)."""
        assert self.model64 is not None
        truth = flatten(truth)
        u = accumulation_eps(dtype_name(tdtype)) / 2
        best, farthest = None, -1.0
        for draw in range(ROUNDING_DRAWS):
            try:
                with rounding(u, (wseed + draw) % 2**63):
                    got = flatten(self.model64(*args))
            except Exception:  # noqa: BLE001 - as reference_at: no low-precision reference then
                return None
            if got is None or truth is None or len(got) != len(truth):
                return None
            spread = max((max_finite_error(g, t) for g, t in zip(got, truth) if g.is_floating_point()
                          and g.shape == t.shape), default=0.0)
            if spread > farthest:
                best, farthest = got, spread
        rounded = [o.to(device=device, dtype=tdtype) if o.is_floating_point() else o.to(device) for o in best]
        return rounded[0] if len(rounded) == 1 else rounded

    def float64_run(self, inputs64: list) -> list | None:
        """The float64 reference of the case (`run`'s module, on its truth device) on other inputs;
        None when it raises."""
        assert self.model64 is not None
        self.on_run()
        xs = [x.to(self.device) if isinstance(x, torch.Tensor) else x for x in inputs64]
        try:
            with torch.no_grad():
                return flatten(self.model64(*xs))
        except Exception:  # noqa: BLE001 - the caller falls back to the plain truth
            return None

    def term_sizes(self, linear: bool, inputs64: list, truths: list) -> list | None:
        """For an op whose schema says `linear` (each output a sum of inputs: a sum, a mean, a scan),
        the op on |inputs|: the size of the terms each output sums. A correct kernel's rounding
        error, and the float64 truth's own, scale with it, not with the result: a row holding
        +-1.8e19 loses its small terms in float64 too, and a kernel summing in another order is
        right where the truth is not. Non-finite sizes are 0 (those outputs are judged by class)."""
        if not linear:
            return None
        got = self.float64_run([x.abs() if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                                 for x in inputs64])
        if got is None or len(got) != len(truths):
            return None
        return [torch.where(torch.isfinite(a), a, torch.zeros((), dtype=a.dtype, device=a.device))
                if a.is_floating_point() and a.shape == t.shape else None for a, t in zip(got, truths)]

    def structural_truths(self, inputs64: list, truths: list) -> list | None:
        """Per output, the float64 value of each element that does not depend on the case's NaN and
        Inf inputs (NaN where it does), or None when no input is non-finite or no truth is.

        A reference written densely can be NaN only through its form: causal attention as scores
        masked to -inf, softmax, then `@ v` gives 0 * NaN = NaN for a NaN in a future value that a
        kernel skipping future blocks never reads, and is right not to. An element depends on the
        non-finite inputs when the reference changes as they are replaced by +1e300 and by -1e300."""
        if all(bool(all_finite(t)) for t in truths):
            return None  # the common case, and the cheaper test: outputs are checked first
        floats = [x for x in inputs64 if isinstance(x, torch.Tensor) and x.is_floating_point()]
        if all(bool(all_finite(x)) for x in floats):
            return None
        runs = []
        for stand_in in (1e300, -1e300):
            got = self.float64_run(
                [torch.where(torch.isfinite(x), x, torch.full_like(x, stand_in))
                 if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs64])
            if got is None or len(got) != len(truths):
                return None  # no structural values: the truth stands as it is
            runs.append(got)
        structural: list = []
        for a, b, t in zip(*runs, truths):
            if not t.is_floating_point() or a.shape != t.shape or b.shape != t.shape:
                structural.append(None)
                continue
            same = torch.isfinite(a) & (a == b)
            structural.append(torch.where(same, a, torch.full_like(a, float("nan"))))
        return structural


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def structural_truth(out: torch.Tensor, truth: torch.Tensor, structural: torch.Tensor | None) -> torch.Tensor:
    """The truth `out` is judged by: where the reference is non-finite only through its form (see
    `Reference.structural_truths`) and `out` is finite, the value that does not depend on the non-finite
    inputs; a non-finite `out` there still matches the reference's own NaN or Inf."""
    if structural is None or not out.is_floating_point() or not truth.is_floating_point():
        return truth
    free = torch.isfinite(structural) & ~torch.isfinite(truth) & torch.isfinite(out)
    return torch.where(free, structural, truth) if bool(free.any()) else truth


def round_parameters(model, dtype: torch.dtype):
    """The reference module with its floating parameters and buffers rounded to the test dtype (kept
    in their own dtype): the candidate's module is cast to that dtype, so the truth is computed from
    the same weights, as it is from the same dtype-rounded inputs. (Without this a float16 linear
    layer was judged against float32 weights: a correct kernel was off by the weights' rounding.)"""
    if isinstance(model, torch.nn.Module):
        with torch.no_grad():
            for t in [*model.parameters(), *model.buffers()]:
                if t.is_floating_point():
                    t.copy_(t.to(dtype).to(t.dtype))
    return model


def reference_at(model, inputs: list, device: str, dtype: torch.dtype):
    """The reference as a correct kernel at `dtype` computes it: half types accumulate in float32,
    so the module runs in float32 on the dtype-rounded inputs and its output is rounded to `dtype`.
    It runs on copies of `inputs` (the case's own, which a reference writing into its input would
    change), made by the cast where there is one."""
    compute = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    args = [(x.to(compute, copy=True) if x.is_floating_point() else x.clone()) if isinstance(x, torch.Tensor) else x
            for x in inputs]
    try:
        out = model.to(device).to(compute)(*args)
    except Exception:
        return None
    if isinstance(out, torch.Tensor):
        return out.to(dtype) if out.dtype == compute else out
    if isinstance(out, (tuple, list)):
        return type(out)(o.to(dtype) if isinstance(o, torch.Tensor) and o.dtype == compute else o for o in out)
    return out


def scrub(outputs: list, inputs: list) -> None:
    """Overwrite the size check's reference outputs before they are freed, so that the answer
    is nowhere in memory while the candidate runs: not in a recycled block (every fresh
    allocation is NaN-filled anyway), nor for a raw pointer that reads freed memory.
    (Handing the allocator's cache back to the driver instead cost a GPU case 2 to 10 times its
    time, and freed device memory keeps its contents.)"""
    kept = {x.untyped_storage().data_ptr() for x in inputs if isinstance(x, torch.Tensor)}
    with torch.no_grad():
        for t in outputs:  # an output that is a view of an input (a transpose, say) is the input
            if isinstance(t, torch.Tensor) and t.is_floating_point() and t.untyped_storage().data_ptr() not in kept:
                t.fill_(float("nan"))
