"""The fixed-shape check in the worker: the benchmark's own check (`oracle/fixed.py`), run on the
loaded problem and candidate with every call into candidate code guarded and the ops of both recorded;
or, in a job of null candidates, on the problem's nulls (`run_nulls`).
"""

from __future__ import annotations

import contextlib
import json
import time
import types

import torch

from rescore.model.oom import is_oom
from rescore.model.outcomes import FixedVerdict, Outcome
from rescore.oracle.fixed import kernelbench_check, null_check
from rescore.oracle.reference import flatten
from rescore.worker import footprint
from rescore.worker.context import WorkerContext
from rescore.worker.exceptions import alone_of, verdict_of
from rescore.worker.guard import Guard
from rescore.worker.integrity import broken, seal
from rescore.worker.job import Loaded
from rescore.worker.loading import cannot_run
from rescore.worker.problem_sizes import input_shapes
from rescore.worker.protocol import ALONE_KEY, MEMORY_KEY, NULLS_KEY
from rescore.worker.turns import Turns
from rescore.worker.usage import Launches, OpRecorder, kernel_findings, output_findings


def run_fixed(ctx: WorkerContext, profile: str, dtype: str) -> dict:
    """The benchmark's own fixed-shape check (`oracle/fixed.py`) on the loaded job, every call into
    the candidate through the guard, a failure of the problem's own code never blamed on the candidate."""
    row = _row(ctx, profile, dtype)
    skip = cannot_run(ctx.loaded, ctx.device, dtype)
    if skip:
        return dict(row, outcome=skip.outcome, reason=skip.reason)
    loaded, guard = ctx.loaded, ctx.guard
    assert loaded.problem is not None and loaded.candidate is not None and loaded.schema is not None
    row.update(_sizes(loaded))
    ref_ops, cand_ops = OpRecorder(), OpRecorder()
    launches = Launches.count
    last: list = []
    peak = footprint.ReferencePeak(ctx.device)  # what the parent reserves for this submission (sharing.py)
    problem = _watched_problem(ctx, ref_ops, last, peak)
    candidate = types.SimpleNamespace(
        ModelNew=lambda *init, _new=loaded.candidate.ModelNew: Watched(
            guard.call(_new, *init), guard, cand_ops, last)
    )
    start = time.perf_counter()
    try:
        result = kernelbench_check(problem, candidate, ctx.device, dtype, profile)
    except ReferenceFailed as exc:
        return reference_failed(row, exc, loaded.job["problem"]["path"])
    except BaseException as exc:  # noqa: BLE001
        return verdict_of(exc, guard.findings, loaded.candidate_file, ctx.device).row(row, start)
    if peak.peak:
        row[MEMORY_KEY] = {"reference_peak": peak.peak}
    guard.findings |= kernel_findings(
        loaded.job["submission"]["language"], ref_ops.ops, cand_ops.ops, Launches.count - launches
    )
    judged = _judged(result["verdict"], result["trials"], result["tolerance"])
    return dict(row, **judged, wall_ms=1e3 * (time.perf_counter() - start))


def run_nulls(ctx: WorkerContext, profile: str, dtype: str) -> dict:
    """The fixed-shape check of the loaded problem's null candidates (`oracle/fixed.py`, `null_check`):
    one run of the check's reference judges them all. Each null's outcome, reason and largest
    difference are under NULLS_KEY (`declined` where it does not apply); a failure of the problem's
    own code is the row's outcome, and no null's."""
    row = _row(ctx, profile, dtype)
    skip = cannot_run(ctx.loaded, ctx.device, dtype)
    if skip:
        return dict(row, outcome=skip.outcome, reason=skip.reason)
    loaded = ctx.loaded
    assert loaded.problem is not None and loaded.schema is not None
    row.update(_sizes(loaded))
    peak = footprint.ReferencePeak(ctx.device)
    start = time.perf_counter()
    try:
        result = null_check(_watched_problem(ctx, OpRecorder(), [], peak), ctx.device, dtype, profile)
    except ReferenceFailed as exc:
        return reference_failed(row, exc, loaded.job["problem"]["path"])
    if peak.peak:
        row[MEMORY_KEY] = {"reference_peak": peak.peak}
    tol = result["tolerance"]
    nulls = {
        kind: _judged(judged["verdict"], judged["trials"], tol) if judged is not None
        else {"outcome": Outcome.DECLINED, "reason": "not applicable: no tensor output, or no input of its shape"}
        for kind, judged in result["nulls"].items()
    }
    # the row's own outcome: whether the check passes any null (the problem is degenerate)
    passed = any(n["outcome"] == Outcome.PASS for n in nulls.values())
    return dict(row, outcome=Outcome.PASS if passed else Outcome.MISMATCH, reason="", atol=tol, rtol=tol,
                wall_ms=1e3 * (time.perf_counter() - start), **{NULLS_KEY: nulls})


def _row(ctx: WorkerContext, profile: str, dtype: str) -> dict:
    """The columns of every fixed-check row, whatever its outcome."""
    return {
        "oracle": "fixed",
        "strategy": "fixed",
        "case_index": 0,
        "seed": 42,
        "dtype": dtype,
        "tolerance_policy": profile,
        "device": ctx.device,
        "versions": ctx.versions,
        "purpose": "evaluation",
        "layout": "contiguous",
        "values": "native",
    }


def _sizes(loaded: Loaded) -> dict:
    """The benchmark's own sizes of the loaded problem and its inputs' shapes at them."""
    assert loaded.problem is not None and loaded.schema is not None
    sizes = loaded.schema.defaults()
    shapes = [list(s) if s else None for s in input_shapes(loaded.problem, sizes)]
    return {"sizes": json.dumps(sizes), "shapes": json.dumps(shapes)}


def _watched_problem(ctx: WorkerContext, ops: OpRecorder, last: list,
                     peak: footprint.ReferencePeak) -> types.SimpleNamespace:
    """The loaded problem as the check sees it: each of its calls blamed on the problem when it fails,
    its reference watched (`Watched`: its ops, its last outputs, its peak memory, its turns)."""
    assert ctx.loaded.problem is not None
    module = ctx.loaded.problem
    return types.SimpleNamespace(
        get_init_inputs=blaming_reference(module.get_init_inputs),
        get_inputs=blaming_reference(module.get_inputs),
        Model=blaming_reference(
            lambda *init, m=module.Model: Watched(m(*init), None, ops, last, peak, ctx.guard.turns)),
    )


def _judged(verdict: FixedVerdict, trials: list[dict], tol: float) -> dict:
    """A check's outcome and its columns from its verdict, per-trial results and tolerance."""
    diffs = [t.get("max_difference", float("nan")) for t in trials]
    failed = [t for t in trials if not t["passed"]]
    reason = (
        "" if not failed else (failed[0].get("reason") or f"allclose failed in {len(failed)}/{len(trials)} trials")
    )
    return {
        "outcome": Outcome.PASS if verdict == FixedVerdict.PASS else Outcome.MISMATCH,
        "reason": reason,
        "max_abs_err": max(diffs) if diffs else None,
        "atol": tol,
        "rtol": tol,
        "n_mismatch": len(failed),
        "n_elements": len(trials),
    }


def reference_failed(row: dict, exc: Exception, path: str) -> dict:
    """The row of a fixed check whose reference failed at its own sizes: never the candidate's verdict.
    It runs again with the device to itself first (`protocol.ALONE_KEY`): beside other workers the
    reference can run out of memory, in any of the forms that takes (`model/oom.py`)."""
    cause = exc.__cause__ or exc
    if is_oom(cause):
        reason = f"out of memory in the reference at its own sizes (problem {path}): {exc}"
        return dict(row, outcome=Outcome.OOM, reason=reason[:500],
                    **{ALONE_KEY: alone_of("the reference", exc, reference_ran=False)})
    reason = f"problem {path}: the reference failed at its own sizes: {exc}"
    return dict(row, outcome=Outcome.SKIPPED, reason=reason[:500], **{ALONE_KEY: {"by": "the reference"}})


class ReferenceFailed(Exception):
    """The problem's own code (reference, input factory) failed in the fixed-shape check."""


def blaming_reference(fn):
    """`fn` (problem code), its failures re-raised as ReferenceFailed, so that they are never
    taken for the candidate's."""

    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except ReferenceFailed:
            raise
        except Exception as exc:
            raise ReferenceFailed(f"{type(exc).__name__}: {exc}"[:300]) from exc

    return call


class Watched:
    """A model as the fixed-shape check sees it: each call into candidate code goes through the
    guard's checks, and the ops it runs are recorded. The check's own logic is untouched.

    The reference's wrapper (no guard) keeps its last outputs in `last`, so that a candidate
    that returns the reference's own output tensor (found in memory) is noticed."""

    def __init__(self, model, guard: Guard | None, record: OpRecorder, last: list | None = None,
                 peak: footprint.ReferencePeak | None = None, turns: Turns | None = None):
        self._model, self._guard, self._record = model, guard, record
        self._last = last if last is not None else []
        self._peak = peak
        self._turns = turns  # the reference's: its time at the benchmark's sizes limits the candidate's call

    def to(self, *args, **kwargs) -> Watched:
        if self._guard is None:
            self._model = self._model.to(*args, **kwargs)
        else:
            self._model = self._guard.call(lambda: self._model.to(*args, **kwargs))
        return self

    def __call__(self, *args, **kwargs):
        if self._guard is None:
            if self._turns is not None:
                self._turns.harness()
            start = time.perf_counter()
            try:
                around = self._peak.around(self._model, args) if self._peak is not None else contextlib.nullcontext()
                with self._record, around:
                    out = self._model(*args, **kwargs)
                if self._turns is not None and any(o.is_cuda for o in flatten(out) or []):
                    torch.cuda.synchronize()  # its own time, not the time it took to queue
            except Exception as exc:
                raise ReferenceFailed(f"{type(exc).__name__}: {exc}"[:300]) from exc
            if self._turns is not None:
                self._turns.measured(time.perf_counter() - start)
            self._last[:] = flatten(out) or []
            return out
        sealed = seal(self._last)
        out = self._guard.call(lambda: self._model(*args, **kwargs), record=self._record)
        if broken(self._last, sealed):
            self._guard.found("tampers_reference", "the reference's output changed while the candidate ran")
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        self._guard.findings |= output_findings(outs, list(args))
        self._guard.findings |= output_findings(outs, self._last, "reads_reference")
        return out
