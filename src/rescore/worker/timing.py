"""Kernel times, measured inside the sandboxed worker: how one forward is timed, and the statistics.

The method is triton.testing.do_bench's, written out here so that it reads the same on every torch
and triton version: warm-up calls (the first one compiles), then `repeats` timed calls, each after a
buffer larger than the GPU's L2 cache has been written (so that no call finds its inputs in the
cache the previous one warmed), each timed between two CUDA events on the current stream. Every
timed call is queued before the events are read, so the host never stalls the GPU between calls.
A row reports the median and the spread (min, p10, p25, p75, p90, max) of those calls.

Each call, warm-up or timed, first gets fresh values written into its inputs in place (`ValueRing`:
a few value sets drawn from get_inputs() once, before timing, copied in with `copy_` outside the
measured interval, as the flush is), so that an answer cached by pointer or `_version` is never a
hit, and one cached by content only once the sets come round again (`RING_BYTES`). The output of
the last timed call is then judged against the reference Model's on the same values
(`check_timed`): a kernel that answers differently when timed (it sniffs the harness, or returns a
stale cached answer) gets `timed_output` other than `pass`, and its times are not used.

What the events see is the current stream: work that a submission leaves on another stream without
joining it back is not counted. The harness's NaN fill of fresh memory (`loop.poison_fresh_memory`)
and deterministic algorithms are off while calls are timed: the fill adds a kernel per allocation.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

from rescore.model.outcomes import NEEDS_GPU as NEEDS_GPU  # the reason of a timing request without a GPU
from rescore.model.outcomes import Outcome, RunStatus
from rescore.model.tolerances import FIXED_POLICIES
from rescore.oracle.compare import compare
from rescore.oracle.fixed import WEIGHT_SEED, trial_seeds
from rescore.oracle.tolerance import torch_dtype
from rescore.worker.context import WorkerContext
from rescore.worker.exceptions import NeedsRestart, cuda_context_usable, is_cuda_failure, verdict_of
from rescore.worker.loading import cannot_run

# triton.testing.do_bench writes 256 MiB before each call; a GPU whose L2 is larger than a quarter
# of that (none to date) gets four times its L2.
FLUSH_MIN_BYTES = 256 << 20
# A median of fewer calls than this says little; a slow kernel's repeats are cut by the budget, never below it.
MIN_REPEATS = 5
QUANTILES = {"p10": 10, "p25": 25, "p75": 75, "p90": 90}
# The value sets of the inputs' ring take at most this much memory (at least two sets are drawn, so
# that no two consecutive calls see the same values): one set per call fits for the benchmark's usual
# inputs. A cache keyed by content with room for more entries than the ring's sets hits again after
# that many calls; keyed by pointer or `_version`, it never hits.
RING_BYTES = 1 << 30

# Taken when the harness imports this module, before any candidate loads: a candidate that patches
# them while it is timed is undone and recorded by the harness afterwards, and cannot change the
# clock it is read with meanwhile.
_EVENT = torch.cuda.Event
_RECORD = torch.cuda.Event.record
_ELAPSED = torch.cuda.Event.elapsed_time
_SYNCHRONIZE = torch.cuda.synchronize
_ZERO = torch.Tensor.zero_


class Clock(Protocol):
    """Marks taken around each call, read once every mark has been reached."""

    def mark(self) -> Any: ...

    def wait(self) -> None: ...

    def ms(self, start: Any, end: Any) -> float: ...


class EventClock:
    """CUDA events on the current stream: device time between two marks, host overhead excluded
    when the GPU is kept busy."""

    def mark(self) -> Any:
        event = _EVENT(enable_timing=True)
        _RECORD(event)
        return event

    def wait(self) -> None:
        _SYNCHRONIZE()

    def ms(self, start: Any, end: Any) -> float:
        return float(_ELAPSED(start, end))


class HostClock:
    """The host's clock, read after `sync` (nothing to wait for on the CPU): the device-agnostic clock
    that times CPU tensors (tests) and a call's wall time."""

    def __init__(self, sync: Callable[[], None] | None = None, clock: Callable[[], float] = time.perf_counter):
        self.sync, self.clock = sync or (lambda: None), clock

    def mark(self) -> float:
        self.sync()
        return self.clock()

    def wait(self) -> None:
        self.sync()

    def ms(self, start: float, end: float) -> float:
        return 1e3 * (end - start)


def flush_bytes(device: str) -> int:
    """The size of the buffer written before each timed call on `device`."""
    if torch.device(device).type != "cuda":
        return FLUSH_MIN_BYTES
    l2 = int(getattr(torch.cuda.get_device_properties(torch.device(device)), "L2_cache_size", 0) or 0)
    return max(FLUSH_MIN_BYTES, 4 * l2)


class CacheFlush:
    """Writes a buffer of `nbytes` on `device`: called before each timed call, it leaves the L2
    cache holding the buffer, not what the previous call read or wrote."""

    def __init__(self, device: str, nbytes: int | None = None):
        self.nbytes = int(nbytes if nbytes is not None else flush_bytes(device))
        self.buffer = torch.empty(self.nbytes // 4, dtype=torch.int32, device=device)

    def __call__(self) -> None:
        _ZERO(self.buffer)


@dataclass
class Timed:
    """The times of one callable's timed calls, in milliseconds."""

    samples_ms: list[float]
    requested: int  # repeats asked for; fewer ran when the budget cut them (`capped`)

    @property
    def capped(self) -> bool:
        return len(self.samples_ms) < self.requested


@contextlib.contextmanager
def timing_mode() -> Iterator[None]:
    """No autograd, no NaN fill of fresh memory, no deterministic algorithms; the harness's settings
    are put back on the way out, so that its integrity check finds them as it left them."""
    from torch.utils import deterministic

    fill = deterministic.fill_uninitialized_memory
    det = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    try:
        deterministic.fill_uninitialized_memory = False
        torch.use_deterministic_algorithms(False)
        with torch.no_grad():
            yield
    finally:
        torch.use_deterministic_algorithms(det, warn_only=warn_only)
        deterministic.fill_uninitialized_memory = fill


def measure(run: Callable[[], object], clock: Clock, flush: Callable[[], None], warmup: int, repeats: int,
            budget_s: float, refill: Callable[[], None] = lambda: None) -> Timed:
    """Time `run`: `warmup` calls, each waited for (their median cost sizes the budget; the first is
    left out of it when there are others, as it compiles), then up to `repeats` calls, each after
    `flush`, all queued before the clock is read. Before every call (and its flush) `refill` writes
    fresh values into the inputs, outside the measured interval. When `repeats` calls would take
    longer than `budget_s`, as many as fit run (never fewer than MIN_REPEATS)."""
    warm = []
    with timing_mode():
        for _ in range(max(1, warmup)):
            refill()
            start = clock.mark()
            run()
            end = clock.mark()
            clock.wait()
            warm.append(clock.ms(start, end))
        per_call = statistics.median(warm[1:] or warm)
        n = repeats
        if per_call > 0 and per_call * repeats > budget_s * 1e3:
            n = max(min(repeats, MIN_REPEATS), int(budget_s * 1e3 / per_call))
        marks = []
        for _ in range(n):
            refill()
            flush()
            start = clock.mark()
            run()
            marks.append((start, clock.mark()))
        clock.wait()
    return Timed([clock.ms(a, b) for a, b in marks], repeats)


def spread(samples_ms: Sequence[float]) -> dict[str, float]:
    """median_ms, min_ms, p10_ms, p25_ms, p75_ms, p90_ms and max_ms of the samples (linear
    interpolation between order statistics, numpy's default)."""
    if not len(samples_ms):
        raise ValueError("spread of no samples: nothing was timed")
    a = np.asarray(samples_ms, dtype=np.float64)
    out = {"median_ms": float(np.median(a)), "min_ms": float(a.min())}
    out.update({f"{name}_ms": float(np.percentile(a, q)) for name, q in QUANTILES.items()})
    out["max_ms"] = float(a.max())
    return out


def columns(timed: Timed, prefix: str = "") -> dict[str, Any]:
    """The timing table's columns for one Timed (prefix `ref_` for the reference)."""
    cols = {f"{prefix}{k}": v for k, v in spread(timed.samples_ms).items()}
    cols[f"{prefix}repeats"] = len(timed.samples_ms)
    return cols


def seed(value: int) -> None:
    torch.manual_seed(value)
    if torch.cuda.is_available():
        torch.cuda.manual_seed(value)


def benchmark_inputs(problem: Any, device: str, dtype: str, trial_seed: int | None = None) -> list:
    """get_inputs() as the fixed check's first trial draws it (oracle/fixed.py), or the trial of
    `trial_seed`, its floating tensors at `dtype`, on `device`."""
    tdtype = torch_dtype(dtype)
    seed(trial_seeds(WEIGHT_SEED, 1)[0] if trial_seed is None else trial_seed)
    out = []
    for x in problem.get_inputs():
        if isinstance(x, torch.Tensor):
            x = x.to(device)
            x = x.to(tdtype) if x.is_floating_point() else x
        out.append(x)
    return out


def input_bytes(inputs: Sequence) -> int:
    """Bytes of the tensors among `inputs`."""
    return sum(x.numel() * x.element_size() for x in inputs if isinstance(x, torch.Tensor))


def layout(inputs: Sequence) -> list:
    """Shape and dtype of each tensor among `inputs` (None for other inputs)."""
    return [(tuple(x.shape), x.dtype) if isinstance(x, torch.Tensor) else None for x in inputs]


class ValueRing:
    """Value sets for the inputs, drawn before timing: set 0 is the benchmark's own inputs (the fixed
    check's first trial), set i its trial i's, as many as there are calls or RING_BYTES holds
    (at least two), and only while get_inputs() keeps its shapes and dtypes (a problem that draws its
    sizes gets fewer, down to one: `count`). Each call copies the next set into the inputs in place:
    the tensors keep their addresses, their `_version` moves and their content changes."""

    def __init__(self, problem: Any, device: str, dtype: str, calls: int, ring_bytes: int = RING_BYTES):
        first = benchmark_inputs(problem, device, dtype)
        size = max(1, input_bytes(first))
        self.sets = [first]
        for trial_seed in trial_seeds(WEIGHT_SEED, max(2, min(calls, ring_bytes // size)))[1:]:
            drawn = benchmark_inputs(problem, device, dtype, trial_seed)
            if layout(drawn) != layout(first):
                break
            self.sets.append(drawn)
        self.count = len(self.sets)
        self.next = 0
        self.last: list = first  # the set the inputs last received

    def fresh_inputs(self) -> list:
        """Tensors of the inputs' shapes and dtypes, to be filled (a copy of set 0's values)."""
        return [x.clone() if isinstance(x, torch.Tensor) else x for x in self.sets[0]]

    def fill(self, inputs: list) -> None:
        """Copy the next value set into `inputs`, tensor by tensor (other inputs are left as they are)."""
        values = self.sets[self.next]
        for x, v in zip(inputs, values):
            if isinstance(x, torch.Tensor) and isinstance(v, torch.Tensor):
                x.copy_(v)
        self.last, self.next = values, (self.next + 1) % self.count


def outputs_of(out: Any) -> list | None:
    """The tensors of an output (a tensor, or a tuple/list of tensors); None when it is anything else."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)) and out and all(isinstance(o, torch.Tensor) for o in out):
        return list(out)
    return None


def check_timed(out: Any, expected: Any, dtype: str) -> tuple[Outcome, str]:
    """Whether the output of a timed call is right: (pass | mismatch | nonfinite | bad_output, or
    skipped when the reference gives nothing to compare; reason),
    against the reference Model's output on the same values at the same dtype, within the loosest of
    the fixed check's bounds (a kernel the fixed check passes under any profile passes here, unless it
    answers differently when timed)."""
    got, want = outputs_of(out), outputs_of(expected)
    if want is None:
        return Outcome.SKIPPED, f"the reference returned {type(expected).__name__}, not tensors: nothing to compare"
    if got is None or len(got) != len(want):
        what = type(out).__name__ if got is None else f"{len(got)} tensors"
        return Outcome.BAD_OUTPUT, f"the last timed call returned {what}; the reference returns {len(want)} tensors"
    bounds = [policy[dtype] for policy in FIXED_POLICIES.values() if dtype in policy]
    if not bounds:
        return Outcome.SKIPPED, f"no fixed check bound at {dtype}: nothing to judge the output by"
    atol, rtol = max(bounds)
    for i, (o, w) in enumerate(zip(got, want)):
        if tuple(o.shape) != tuple(w.shape):
            return Outcome.BAD_OUTPUT, f"output {i}: shape {tuple(o.shape)} != the reference's {tuple(w.shape)}"
        if not (o.is_floating_point() and w.is_floating_point()):  # integers, booleans: exactly
            wrong = int((o.detach().cpu().to(torch.float64) != w.detach().cpu().to(torch.float64)).sum())
            if wrong:
                return Outcome.MISMATCH, f"output {i} of the last timed call: {wrong} of {w.numel()} elements differ"
            continue
        cmp = compare(o, w.detach().to(torch.float64), torch_dtype(dtype), atol, rtol)
        if cmp.outcome != Outcome.PASS:
            return Outcome(cmp.outcome), f"output {i} of the last timed call: {cmp.message()}"
    return Outcome.PASS, ""


def placed(model: Any, device: str, dtype: str) -> Any:
    """The model on `device` at `dtype`, as the fixed check places it (a plain callable as it is)."""
    return model.to(device).to(torch_dtype(dtype)) if isinstance(model, torch.nn.Module) else model


def environment(versions_json: str) -> dict[str, str | None]:
    """device, torch and triton of a worker, from its `versions` record (execute.versions)."""
    info = json.loads(versions_json)
    return {"device": info.get("device"), "torch": info.get("torch"), "triton": info.get("triton")}


def run_timing(ctx: WorkerContext, dtype: str, warmup: int, repeats: int, budget_s: float, host_clock: bool = False,
               flush_bytes: int | None = None) -> dict:
    """A row of the timing table: the candidate's forward, then the reference's, each timed on the
    benchmark's own inputs at `dtype`, fresh values copied into them before each call (`ValueRing`),
    and the candidate's last timed output judged against the reference's on the same values
    (`timed_output`). Only on a GPU (CUDA events, L2 flushed). `host_clock` (tests only) times through
    the host's clock on any device, and `flush_bytes` sets the flush buffer's size: CPU tensors then
    take the same path as a GPU's."""
    row = {"dtype": dtype, "warmup": max(1, warmup), **environment(ctx.versions)}
    if not host_clock and ctx.device != "cuda":
        return dict(row, outcome=Outcome.SKIPPED, reason=NEEDS_GPU)
    skip = cannot_run(ctx.loaded, ctx.device, dtype)
    if skip:
        return dict(row, outcome=skip.outcome, reason=skip.reason)
    loaded, guard = ctx.loaded, ctx.guard
    assert loaded.problem is not None and loaded.candidate is not None
    sync = torch.cuda.synchronize if ctx.device == "cuda" else None
    clock = HostClock(sync) if host_clock else EventClock()
    flush = CacheFlush(ctx.device, flush_bytes)
    row["flush_bytes"] = flush.nbytes
    where = loaded.job["problem"]["path"]
    try:
        init = loaded.problem.get_init_inputs()
        ring = ValueRing(loaded.problem, ctx.device, dtype, max(1, warmup) + repeats)
        inputs = ring.fresh_inputs()
    except Exception as exc:  # noqa: BLE001 - the problem's own code: not the candidate's fault
        reason = f"problem {where}: its inputs could not be made: {type(exc).__name__}: {exc}"
        return dict(row, outcome=Outcome.SKIPPED, reason=reason[:500])
    row["value_sets"] = ring.count
    last: list = []  # the output of the latest call, and the value set it was given

    def timed_call() -> None:
        last[:] = [model(*inputs), ring.last]

    try:
        seed(WEIGHT_SEED)
        model = guard.call(loaded.candidate.ModelNew, *init)
        model = guard.call(placed, model, ctx.device, dtype)
        timed = guard.call(measure, timed_call, clock, flush, warmup, repeats, budget_s, lambda: ring.fill(inputs))
    except BaseException as exc:  # noqa: BLE001
        if isinstance(exc, KeyboardInterrupt) and os.environ.get("RESCORE_WORKER") != "1":
            raise
        verdict = verdict_of(exc, guard.findings, loaded.candidate_file, ctx.device)
        return dict(row, outcome=verdict.outcome, reason=verdict.reason)
    row.update(columns(timed), capped=timed.capped, outcome=RunStatus.OK, reason="")
    out, values = last
    try:  # the problem's Model, on the values of the candidate's last timed call, then timed the same way
        seed(WEIGHT_SEED)
        reference = placed(loaded.problem.Model(*init), ctx.device, dtype)
        with timing_mode():
            expected = reference(*[x.clone() if isinstance(x, torch.Tensor) else x for x in values])
    except Exception as exc:  # noqa: BLE001 - recorded beside the candidate's times
        return reference_failed(row, exc, where)
    try:
        verdict, why = guard.call(check_timed, out, expected, dtype)
    except Exception as exc:  # noqa: BLE001 - the candidate's output could not even be compared
        verdict = Outcome.BAD_OUTPUT
        why = f"the last timed call's output could not be compared: {type(exc).__name__}: {exc}"
    row.update(timed_output=verdict, timed_reason=why[:1000])
    if verdict != Outcome.PASS and verdict != Outcome.SKIPPED:
        guard.found("wrong_when_timed", f"the output of its last timed call is wrong ({verdict})")
    del out, expected, last[:]
    try:  # on inputs of its own (the candidate may have written its)
        inputs = ring.fresh_inputs()
        ref = measure(lambda: reference(*inputs), clock, flush, warmup, repeats, budget_s, lambda: ring.fill(inputs))
        row.update(columns(ref, "ref_"), ref_outcome=RunStatus.OK, ref_reason="")
    except Exception as exc:  # noqa: BLE001 - recorded beside the candidate's times
        return reference_failed(row, exc, where)
    return row


def reference_failed(row: dict, exc: Exception, where: str) -> dict:
    """The row once the problem's Model failed: the candidate's times kept, the reference's failure
    beside them (and the timed output not judged, if it was not yet); a GPU left unusable restarts
    the worker."""
    if is_cuda_failure(exc) and not cuda_context_usable():
        raise NeedsRestart(f"the reference left the GPU unusable: {exc}"[:500]) from exc
    reason = f"problem {where}: the reference failed: {type(exc).__name__}: {exc}"
    row.update(ref_outcome=Outcome.CRASH, ref_reason=reason[:500])
    row.setdefault("timed_output", Outcome.SKIPPED)
    row.setdefault("timed_reason", f"not judged: {reason}"[:1000])
    return row
