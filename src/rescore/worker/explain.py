"""Which experiment to run when a case fails, and the second call that a passing case gets once per
dtype of a load (issue 21's diagnoses). The experiments themselves are in `experiments.py`; this
module runs them against the case that just ran (`CaseTrace`) and records the first that confirms
a cause, as the row's `cause` and `cause_evidence`.

Every experiment calls candidate code again through the guard, on fresh tensors; the findings of
those calls are not the case's (they are put back), and the decoy schedule is not advanced, so the
cases after an experiment run exactly as they would have without it.
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Callable

import torch

from rescore.inputs.strategies import CaseSpec
from rescore.model.outcomes import Outcome
from rescore.oracle import judge
from rescore.oracle.reference import ReferenceRejects, flatten
from rescore.worker import case_inputs, experiments
from rescore.worker.context import WorkerContext
from rescore.worker.exceptions import NeedsRestart, cuda_context_usable, is_cuda_failure
from rescore.worker.experiments import CaseTrace, Cause, Confirmed
from rescore.worker.placement import judged_where
from rescore.worker.usage import OpRecorder

# The outcomes a cause is looked for, and the benchmark's own dtype (the fixed check's).
EXPLAINED = frozenset({Outcome.MISMATCH, Outcome.NONFINITE, Outcome.BAD_OUTPUT, Outcome.MUTATED_INPUT, Outcome.CRASH,
                       Outcome.DECLINED})
BENCHMARK_DTYPE = "float32"

RunCase = Callable[[str, int, str, dict], dict]  # (strategy, seed, dtype, trigger) -> a case's row


@contextlib.contextmanager
def _aside(ctx: WorkerContext):
    """An experiment's calls: their findings are not the case's, and they explain nothing themselves."""
    guard = ctx.guard
    saved = (guard.findings, guard.details, guard.changed_numerics, ctx.explainer.trace)
    ctx.explainer.running = True
    try:
        yield
    finally:
        ctx.explainer.running = False
        guard.findings, guard.details, guard.changed_numerics, ctx.explainer.trace = saved


def explain(ctx: WorkerContext, spec: CaseSpec, row: dict, override: dict | None, run_case: RunCase) -> dict:
    """The failed row with the cause an experiment confirmed (`cause`, `cause_evidence`), cheapest
    experiment first; the row as it is when none does. The case's trace is let go of here, so that
    its tensors are not held while the next case allocates its own."""
    if ctx.explainer.running:
        return row
    trace, ctx.explainer.trace = ctx.explainer.trace, None
    if not wanted(ctx, row):
        return row
    changed = set(ctx.guard.changed_numerics)
    with _aside(ctx):
        try:
            found = _confirm(ctx, spec, row, override, run_case, trace, changed)
        except NeedsRestart:
            ctx.guard.restart = True
            found = None
    return dict(row, **found.columns()) if found is not None else row


def wanted(ctx: WorkerContext, row: dict) -> bool:
    """Whether `explain` looks for a cause of this judged row."""
    return (ctx.explainer.enabled and not ctx.explainer.running and not row.get("cause")
            and row.get("outcome") in EXPLAINED)


def _confirm(ctx: WorkerContext, spec: CaseSpec, row: dict, override: dict | None, run_case: RunCase,
             trace: CaseTrace | None, changed: set[str]) -> Confirmed | None:
    if row["outcome"] == Outcome.MUTATED_INPUT:
        return Confirmed(Cause.INPUT_MUTATION, f"{row.get('reason', '')}: the inputs' bytes after the call "
                         "differ from a copy taken before it")
    if row.get("diagnosis") == "out_of_bounds":
        return Confirmed(Cause.OUT_OF_BOUNDS, ((row.get("reason") or "").splitlines() or [""])[0])
    if trace is not None and row["outcome"] in (Outcome.MISMATCH, Outcome.NONFINITE, Outcome.BAD_OUTPUT):
        for experiment in (_reused_result, functools.partial(_held_numerics, changed=changed), _serialised_streams):
            found = _attempt(ctx, experiment, trace, row)
            if found is not None:
                return found
    if override:
        return None
    return _specialised(ctx, spec, row, run_case)


def _attempt(ctx: WorkerContext, experiment, trace: CaseTrace, row: dict) -> Confirmed | None:
    """One experiment; one that raises confirms nothing (a broken CUDA context restarts the worker)."""
    try:
        return experiment(ctx, trace, row)
    except ReferenceRejects:
        return None
    except Exception as exc:  # noqa: BLE001 - the candidate's code runs again: anything can happen
        if is_cuda_failure(exc) and not cuda_context_usable():
            raise NeedsRestart(str(exc)) from exc
        return None


def _again(ctx: WorkerContext, trace: CaseTrace, context, check=None, values: list | None = None):
    """The case's model once more on fresh copies of its inputs (or of `values`), inside `context()`
    for the length of the call only (undone before the guard checks the call); (output, what the
    context saw, `check()` read inside it)."""
    seen: dict = {}

    def run(*args):
        with context() as watched:
            seen["watched"] = watched
            out = trace.model(*args)
            seen["check"] = check() if check is not None else None
            return out

    if ctx.device == "cuda":
        torch.cuda.synchronize()
    inputs = case_inputs.candidate_inputs(trace.lowp_inputs if values is None else values, trace.spec.layout)
    with torch.no_grad():
        out = ctx.guard.call(run, *inputs)
    if ctx.device == "cuda":
        torch.cuda.synchronize()
    return out, seen.get("watched"), seen.get("check")


def _judge(ctx: WorkerContext, trace: CaseTrace, out, truths: list, lowps: list | None,
           structural: list | None = None, terms: list | None = None) -> dict:
    return judge.judge(out, truths, lowps, [], [], trace.tdtype, trace.spec.dtype, trace.reduction_len,
                       structural, terms, device=ctx.device, overrides=ctx.loaded.job["problem"].get("tolerance"),
                       place=functools.partial(judged_where, ctx.device))


def _truths(ctx: WorkerContext, trace: CaseTrace, values: list) -> tuple[list, list | None, list | None, list | None]:
    """The float64 truth (and low-precision reference, structural truths, term sizes) of other
    values of the case's dtype, with the case's weights."""
    values64 = [x.to(torch.float64) if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in values]
    assert ctx.loaded.problem is not None and ctx.loaded.schema is not None
    truths, lowps = ctx.reference.run(ctx.loaded.problem, values64, trace.init, trace.tdtype, trace.wseed, ctx.device,
                                      ctx.placement.truth_device, values, record=OpRecorder())
    return (truths, lowps, ctx.reference.structural_truths(values64, truths),
            ctx.reference.term_sizes(ctx.loaded.schema.linear, values64, truths))


def _reused_result(ctx: WorkerContext, trace: CaseTrace, row: dict) -> Confirmed | None:
    """result_reuse / stale_graph: the output is right for the values of an earlier call on the same
    tensors (the decoy call), not for this call's."""
    if trace.decoy is None:
        return None
    truths, lowps, _, _ = _truths(ctx, trace, trace.decoy)
    earlier = _judge(ctx, trace, trace.out, truths, lowps)
    if earlier["outcome"] != Outcome.PASS:
        return None
    cause, graphs = Cause.RESULT_REUSE, ""
    if ctx.device == "cuda":
        _, replays, _ = _again(ctx, trace, experiments.counted_graph_replays)
        if replays.count:
            cause = Cause.STALE_GRAPH
            graphs = f"; a call on fresh tensors replayed a captured CUDA graph {replays.count} time(s)"
    return Confirmed(cause, f"the output is the answer for the values of the earlier call on the same tensors "
                            f"({experiments.summary(earlier)} against that call's reference, "
                            f"{experiments.summary(row)} against this call's){graphs}")


def _held_numerics(ctx: WorkerContext, trace: CaseTrace, row: dict, changed: set[str]) -> Confirmed | None:
    """precision_downgrade: with the global numerics flags the candidate set held at the reference's,
    the same inputs pass."""
    if not changed:
        return None
    before = experiments.numerics_state()
    out, pin, after = _again(ctx, trace, experiments.pinned_numerics, experiments.numerics_state)
    if after != before:
        return None  # the flags moved all the same: the experiment isolates nothing
    again = _judge(ctx, trace, out, trace.truths, trace.lowps, trace.structural, trace.terms)
    if again["outcome"] != Outcome.PASS:
        return None
    dropped = ", ".join(dict.fromkeys(pin.dropped)) or "none during the call"
    return Confirmed(Cause.PRECISION_DOWNGRADE,
                     f"the candidate changed {', '.join(sorted(changed))}; with those flags held at the "
                     f"reference's the same inputs pass ({experiments.summary(again)}; "
                     f"was {experiments.summary(row)}; writes dropped: {dropped})")


def _serialised_streams(ctx: WorkerContext, trace: CaseTrace, row: dict) -> Confirmed | None:
    """unsynchronized_stream: with every stream switch dropped (the candidate's work in order on the
    caller's stream), the same inputs pass, twice."""
    if ctx.device != "cuda":
        return None
    results, switches = [], 0
    for _ in range(2):
        out, streams, _ = _again(ctx, trace, experiments.serialised_streams)
        if not streams.switches:
            return None
        switches = streams.switches
        results.append(_judge(ctx, trace, out, trace.truths, trace.lowps, trace.structural, trace.terms))
    if any(r["outcome"] != Outcome.PASS for r in results):
        return None
    return Confirmed(Cause.UNSYNCHRONIZED_STREAM,
                     f"the candidate switched streams {switches} time(s) in its call; with the switches dropped "
                     f"(its work in order on the caller's stream) the same inputs pass twice "
                     f"({experiments.summary(results[-1])}; was {experiments.summary(row)})")


def _specialised(ctx: WorkerContext, spec: CaseSpec, row: dict, run_case: RunCase) -> Confirmed | None:
    """dtype_specialised / shape_specialised: the same strategy and seed pass at the benchmark's dtype
    (float32) or at the benchmark's sizes. Asked once per strategy and dtype of the loaded job, on its
    first failing case: the answer is about the kernel, not the seed."""
    assert ctx.loaded.schema is not None
    answers = ctx.explainer.answers
    asks = []
    if spec.dtype != BENCHMARK_DTYPE:
        asks.append((("dtype", spec.strategy, spec.dtype), {"sizes": spec.sizes, "dtype": BENCHMARK_DTYPE},
                     Cause.DTYPE_SPECIALISED, f"at {BENCHMARK_DTYPE}, the benchmark's dtype"))
    bench = dict(ctx.loaded.schema.defaults())
    if spec.sizes != bench:
        asks.append((("sizes", spec.strategy, spec.dtype), {"sizes": bench, "dtype": spec.dtype},
                     Cause.SHAPE_SPECIALISED, f"at the benchmark's sizes {json.dumps(bench)}"))
    for key, change, cause, where in asks:
        if key not in answers:
            other = run_case(spec.strategy, spec.seed, spec.dtype, dict(change, values=spec.values, layout=spec.layout))
            answers[key] = (
                Confirmed(cause, f"the first failing {spec.strategy} case at {spec.dtype} ({row['outcome']}: "
                                 f"seed {spec.seed}, sizes {json.dumps(spec.sizes)}, {spec.values} values, "
                                 f"{spec.layout}) passes {where}")
                if other.get("outcome") == Outcome.PASS else None
            )
        if answers[key] is not None:
            return answers[key]
    return None


def second_call(ctx: WorkerContext, trace: CaseTrace) -> dict | None:
    """output_aliasing / result_reuse / stale_graph, asked once per dtype of the loaded job on its
    first passing case: the candidate is called again on fresh tensors of the same shape holding
    other values. The output the first call returned must not change, and the second call's must
    pass against its own float64 truth; a second answer that is the first call's is a reused result
    (a stale graph when the call replayed a captured CUDA graph). Returns the verdict columns that
    flag the case, or None."""
    key = ("second call", trace.spec.dtype)
    answers = ctx.explainer.answers
    if not ctx.explainer.enabled or ctx.explainer.running or key in answers:
        return None
    answers[key] = None
    outs = flatten(trace.out) or []
    held = case_inputs.snapshot(outs)
    loaded = ctx.loaded
    with _aside(ctx):
        try:
            other = case_inputs.decoy_values(loaded.problem, loaded.schema, ctx.device, trace.spec, trace.tdtype,
                                             "second call")
            counter = experiments.counted_graph_replays if ctx.device == "cuda" else contextlib.nullcontext
            out2, replays, _ = _again(ctx, trace, counter, values=other)
            changed = [i for i, (x, x0) in enumerate(zip(outs, held)) if not judge.same(x, x0)]
            if changed:
                found = Confirmed(Cause.OUTPUT_ALIASING,
                                  f"a later call on other values overwrote output {changed[0]} that this call "
                                  f"returned (the same memory handed out again): a caller holding a result sees "
                                  f"it change")
                return {"outcome": Outcome.BAD_OUTPUT, "reason": found.evidence, **found.columns()}
            truths, lowps, structural, terms = _truths(ctx, trace, other)
            second = _judge(ctx, trace, out2, truths, lowps, structural, terms)
            if second["outcome"] == Outcome.PASS:
                return None
            first = _judge(ctx, trace, out2, trace.truths, trace.lowps, trace.structural, trace.terms)
            if first["outcome"] != Outcome.PASS:
                return None  # wrong on those values, not an answer kept from the first call: fuzz cases judge that
            graphs = getattr(replays, "count", 0)
            cause = Cause.STALE_GRAPH if graphs else Cause.RESULT_REUSE
            how = f", replaying a captured CUDA graph {graphs} time(s)" if graphs else ""
            found = Confirmed(cause, f"a second call on fresh tensors of the same shape with other values "
                                     f"returned the first call's answer{how}")
            verdict = {k: v for k, v in second.items() if k != "reason"}
            verdict.update(found.columns())
            return dict(verdict, reason=f"{found.evidence}:\n{second.get('reason', '')}"[:1000])
        except ReferenceRejects:
            return None
        except Exception as exc:  # noqa: BLE001 - a probe that fails tells nothing
            if is_cuda_failure(exc) and not cuda_context_usable():
                ctx.guard.restart = True
            return None
