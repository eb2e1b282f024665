"""Which experiment to run when a case fails (issue 21's diagnoses, issue 30's races first). The
procedures are in `experiments.py`; this module runs them against the case that just ran
(`CaseTrace`) and records the first that confirms a cause, as the row's `cause` and
`cause_evidence`. The experiments that change the sizes or the dtype are in `specialised.py`, the
probe of a passing case's later calls in `stateful.py`.

The order: what the check itself saw (an input written, an access out of bounds); then, before any
experiment that confirms by passing, the same case run again several times on a GPU: outcomes that
differ, or errors further apart than the comparison allows, are a race (`unsynchronized_stream` when
dropping the stream switches makes it pass, else `race`), never a precision or reuse cause that one
lucky pass would have given. Every experiment
that confirms by passing needs REPEATED_PASSES passes in a row.

Every experiment calls candidate code again through the guard, on fresh tensors; the findings of
those calls are not the case's (they are put back), and the decoy schedule is not advanced, so the
cases after an experiment run exactly as they would have without it.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from rescore.inputs.strategies import CaseSpec
from rescore.model.outcomes import Outcome
from rescore.oracle import judge
from rescore.oracle.reference import ReferenceRejects, seed_generators
from rescore.worker import case_inputs, experiments, specialised
from rescore.worker.context import WorkerContext
from rescore.worker.exceptions import NeedsRestart, cuda_context_usable, from_harness, is_cuda_failure, verdict_of
from rescore.worker.experiments import REPEATED_PASSES, CaseTrace, Cause, Confirmed
from rescore.worker.placement import judged_where
from rescore.worker.streams import call_seen
from rescore.worker.usage import OpRecorder

# The outcomes a cause is looked for.
EXPLAINED = frozenset({Outcome.MISMATCH, Outcome.NONFINITE, Outcome.BAD_OUTPUT, Outcome.MUTATED_INPUT, Outcome.CRASH,
                       Outcome.DECLINED})
JUDGED = (Outcome.MISMATCH, Outcome.NONFINITE, Outcome.BAD_OUTPUT)  # a wrong answer the trace holds
RACE_CAP = 8  # failing cases of a dtype of a load that repeat alike before repeats stop for it

RunCase = Callable[[str, int, str, dict], dict]  # (strategy, seed, dtype, trigger) -> a case's row


@contextlib.contextmanager
def aside(ctx: WorkerContext):
    """An experiment's calls: their findings are not the case's, and they explain nothing themselves."""
    guard = ctx.guard
    saved = (guard.findings, guard.details, guard.published, ctx.explainer.trace)
    ctx.explainer.running = True
    try:
        yield
    finally:
        ctx.explainer.running = False
        guard.findings, guard.details, guard.published, ctx.explainer.trace = saved


def explain(ctx: WorkerContext, spec: CaseSpec, row: dict, override: dict | None, run_case: RunCase,
            decoy: bool = False) -> dict:
    """The failed row with the cause an experiment confirmed (`cause`, `cause_evidence`), in the
    order of the module's docstring; the row as it is when none does (`decoy`: the case began with
    the decoy call). The case's trace is let go of here, so that its tensors are not held while the
    next case allocates its own."""
    if ctx.explainer.running:
        return row
    trace, ctx.explainer.trace = ctx.explainer.trace, None
    if not wanted(ctx, row):
        return row
    with aside(ctx):
        try:
            found = _confirm(ctx, spec, row, override, run_case, trace, decoy)
        except NeedsRestart:
            ctx.guard.restart = True
            found = None
    return dict(row, **found.columns()) if found is not None else row


def wanted(ctx: WorkerContext, row: dict) -> bool:
    """Whether `explain` looks for a cause of this judged row."""
    return (ctx.explainer.enabled and not ctx.explainer.running and not row.get("cause")
            and row.get("outcome") in EXPLAINED)


def _confirm(ctx: WorkerContext, spec: CaseSpec, row: dict, override: dict | None, run_case: RunCase,
             trace: CaseTrace | None, decoy: bool) -> Confirmed | None:
    if row["outcome"] == Outcome.MUTATED_INPUT:
        return Confirmed(Cause.INPUT_MUTATION, f"{row.get('reason', '')}: the inputs' bytes after the call "
                         "differ from a copy taken before it")
    if row.get("diagnosis") == "out_of_bounds":
        return Confirmed(Cause.OUT_OF_BOUNDS, ((row.get("reason") or "").splitlines() or [""])[0])
    if trace is not None and row["outcome"] in JUDGED:
        with ctx.phases("race"):
            raced = _attempt(ctx, _race, trace, row)
        if raced is not None:
            return raced
        for experiment in (_reused_result, _held_numerics, _serialised_streams):
            found = _attempt(ctx, experiment, trace, row)
            if found is not None:
                return found
    if override:
        return None
    with ctx.phases("sizes"):
        return specialised.confirm(ctx, spec, row, run_case, decoy)


def _attempt(ctx: WorkerContext, experiment, trace: CaseTrace, row: dict) -> Confirmed | None:
    """One experiment; one that raises confirms nothing (a broken CUDA context restarts the worker)."""
    try:
        return experiment(ctx, trace, row)
    except NeedsRestart:  # a repeat's call left the CUDA context unusable (`verdict_of`)
        raise
    except ReferenceRejects:
        return None
    except Exception as exc:  # noqa: BLE001 - the candidate's code runs again: anything can happen
        if is_cuda_failure(exc) and not cuda_context_usable():
            raise NeedsRestart(str(exc)) from exc
        return None


@dataclass
class Call:
    """One call of an experiment: the output, that output as the caller's stream saw it right after
    the call (what is judged), what the experiment's context saw, `check()` read inside it, and the
    inputs it was given."""

    out: object
    seen: object
    watched: object = None
    checked: object = None
    inputs: list | None = None


def build_model(ctx: WorkerContext, init: list, tdtype: torch.dtype, wseed: int):
    """The candidate's model as a case builds it: its weights seeded as the reference's are, then
    moved to the case's device and dtype, every step through the guard."""
    assert ctx.loaded.candidate is not None
    seed_generators(ctx.device, wseed)
    new, device, module = ctx.loaded.candidate.ModelNew, ctx.device, torch.nn.Module  # read before it runs

    def built(*args):
        model = new(*args)
        return model.to(device).to(tdtype) if isinstance(model, module) else model

    return ctx.guard.call(built, *init)  # one call, one check of the harness after it


def decoy_call(ctx: WorkerContext, model, inputs: list, decoy: list, values: list) -> float:
    """The case protocol's decoy call: `decoy`'s values written into the case's very tensors (`inputs`)
    and the model called on them (what it returns or raises is not judged), then `values` written back
    for the judged call; the seconds of the call, which are not the case's own time."""
    began = time.perf_counter()
    case_inputs.refill(inputs, decoy)
    try:
        ctx.guard.call(model, *inputs)
    except Exception:  # noqa: BLE001 - the case is judged on its own values, in the call after this
        pass
    if ctx.device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - began
    case_inputs.refill(inputs, values)
    return seconds


def repeat_case(ctx: WorkerContext, trace: CaseTrace) -> dict:
    """The case once more as its candidate met it (`case.run_spec`'s calls): a fresh model, the decoy
    call on the case's own tensors when it had one, then the case's values written into them; the
    output as the caller's stream saw it, judged against the case's truth. The float64 reference is not
    run again: the values and weights are the case's, so its truth is too, and a repeat asks only
    whether the candidate answers the same way. A call that raises ends the repeat as the case would
    have ended (`verdict_of`: crash, timeout, out of memory)."""
    guard, device = ctx.guard, ctx.device
    start = time.perf_counter()
    try:
        model = build_model(ctx, trace.init, trace.tdtype, trace.wseed)
        inputs = case_inputs.candidate_inputs(trace.lowp_inputs, trace.spec.layout)
        with torch.no_grad():
            if trace.decoy is not None:
                decoy_call(ctx, model, inputs, trace.decoy, trace.lowp_inputs)
            _, seen = call_seen(guard, model, *inputs, device=device)
        if device == "cuda":
            torch.cuda.synchronize()
    except BaseException as exc:  # noqa: BLE001
        if isinstance(exc, KeyboardInterrupt) and os.environ.get("RESCORE_WORKER") != "1":
            raise
        if from_harness(exc, ctx.loaded.candidate_file):  # a refill of the case's tensors: rescore's fault,
            raise  # so the experiment confirms nothing (`_attempt`), never a repeat that differs (a race)
        return verdict_of(exc, guard.findings, ctx.loaded.candidate_file, device).row({}, start)
    return own_truth(ctx, trace, seen)


def again(ctx: WorkerContext, trace: CaseTrace, context=contextlib.nullcontext, check=None,
          values: list | None = None, first: list | None = None, model=None) -> Call:
    """The case's model (or `model`) once more on fresh copies of its inputs (or of `values`),
    inside `context()` for the length of the call only (undone before the guard checks the call).
    With `first`, the fresh tensors hold those values for a call before, and are then refilled in
    place: the decoy protocol of a case."""
    seen: dict = {}
    model = trace.model if model is None else model

    def run(*args):
        with context() as watched:
            seen["watched"] = watched
            out = model(*args)
            seen["check"] = check() if check is not None else None
            return out

    if ctx.device == "cuda":
        torch.cuda.synchronize()
    wanted = trace.lowp_inputs if values is None else values
    inputs = case_inputs.candidate_inputs(wanted if first is None else first, trace.spec.layout)
    with torch.no_grad():
        if first is not None:
            ctx.guard.call(model, *inputs)
            case_inputs.refill(inputs, wanted)
        out, copy = call_seen(ctx.guard, run, *inputs, device=ctx.device)
    if ctx.device == "cuda":
        torch.cuda.synchronize()
    return Call(out, copy, seen.get("watched"), seen.get("check"), inputs)


def judged(ctx: WorkerContext, trace: CaseTrace, out, truths: list, lowps: list | None,
           structural: list | None = None, terms: list | None = None) -> dict:
    """The verdict of an experiment's output against a truth, as a case judges it."""
    return judge.judge(out, truths, lowps, [], [], trace.tdtype, trace.spec.dtype, trace.reduction_len,
                       structural, terms, device=ctx.device, overrides=ctx.loaded.job["problem"].get("tolerance"),
                       place=functools.partial(judged_where, ctx.device))


def own_truth(ctx: WorkerContext, trace: CaseTrace, out) -> dict:
    """The verdict of an output against the case's own truth."""
    return judged(ctx, trace, out, trace.truths, trace.lowps, trace.structural, trace.terms)


def truths_of(ctx: WorkerContext, trace: CaseTrace, values: list) -> tuple[list, list | None, list | None, list | None]:
    """The float64 truth (and low-precision reference, structural truths, term sizes) of other
    values of the case's dtype, with the case's weights."""
    values64 = [x.to(torch.float64) if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in values]
    assert ctx.loaded.problem is not None and ctx.loaded.schema is not None
    truths, lowps = ctx.reference.run(ctx.loaded.problem, values64, trace.init, trace.tdtype, trace.wseed, ctx.device,
                                      ctx.placement.truth_device, values, record=OpRecorder())
    return (truths, lowps, ctx.reference.structural_truths(values64, truths),
            ctx.reference.term_sizes(ctx.loaded.schema.linear, values64, truths))


def _race(ctx: WorkerContext, trace: CaseTrace, row: dict) -> Confirmed | None:
    """race / unsynchronized_stream: the same case (`repeat_case`: a fresh model, the same values, the
    same decoy call) run `race_repeats` times more does not always end as it did, or is wrong each time
    by amounts further apart than the comparison allows any element to be off (`_error_spread`: their
    outputs differ from each other by more than rounding). Then, when the candidate switched streams
    and every repeat with the switches dropped passes, the race is between its streams and the
    caller's. A repeat the machine could not run (out of memory, a call the sandbox refused) tells
    nothing: no cause. Once RACE_CAP failing cases of a dtype of a load have repeated alike, its later
    failing cases are not repeated (a deterministic failure)."""
    repeats = ctx.explainer.race_repeats
    alike = ("repeated alike", trace.spec.dtype)
    answers = ctx.explainer.answers
    if repeats <= 0 or answers.get(alike, 0) >= RACE_CAP:
        return None
    rows = [repeat_case(ctx, trace) for _ in range(repeats)]
    outcomes = [str(r.get("outcome")) for r in rows]
    if any(o in (Outcome.OOM, Outcome.SKIPPED) for o in outcomes):
        return None
    counts = ", ".join(f"{outcomes.count(o)} {o}" for o in dict.fromkeys(outcomes))
    if all(o == row["outcome"] for o in outcomes):
        spread = _error_spread([row, *rows])
        if spread is None:
            answers[alike] = answers.get(alike, 0) + 1
            return None
        seen = (f"the same case run {repeats} more times (a fresh model, the same values) ended {counts} as it "
                f"was, its greatest error ranging from {spread[0]:.6g} to {spread[1]:.6g}, further apart than the "
                f"{spread[2]:.3g} the comparison allows any element")
    else:
        seen = (f"the same case run {repeats} more times (a fresh model, the same values) ended {counts}; "
                f"it was {row['outcome']}")
    streams = _serialised_streams(ctx, trace, row, repeats=repeats)
    if streams is not None:
        return Confirmed(Cause.UNSYNCHRONIZED_STREAM, f"{seen}. {streams.evidence}")
    return Confirmed(Cause.RACE, f"{seen}: its answer depends on timing (a race between its threads or streams, "
                                 f"or memory nothing wrote)")


def _error_spread(rows: list[dict]) -> tuple[float, float, float] | None:
    """(least, greatest, allowed) when the runs' greatest errors are further apart than the most any
    element may be off (atol + rtol x the reference's largest magnitude + slack): two of their outputs
    then differ by more than that (at least by the gap between their greatest errors). None when
    they are not, or an error or bound is not a finite number (an atomic sum's order moves the
    errors by rounding only)."""
    first = rows[0]
    try:
        errors = [float(r["max_abs_err"]) for r in rows]
        allowed = float(first["atol"]) + float(first["rtol"]) * float(first["ref_max_abs"]) + float(first["bound"])
    except (KeyError, TypeError, ValueError):
        return None
    if not all(map(math.isfinite, [*errors, allowed])) or max(errors) - min(errors) <= allowed:
        return None
    return min(errors), max(errors), allowed


def _reused_result(ctx: WorkerContext, trace: CaseTrace, row: dict) -> Confirmed | None:
    """result_reuse / stale_graph: the output is right for the values of an earlier call on the same
    tensors (the decoy call), not for this call's; and so is it, REPEATED_PASSES times, when the
    decoy protocol is run again on fresh tensors."""
    if trace.decoy is None:
        return None
    truths, lowps, _, _ = truths_of(ctx, trace, trace.decoy)
    earlier = judged(ctx, trace, trace.out, truths, lowps)
    if earlier["outcome"] != Outcome.PASS:
        return None
    replays = 0
    for _ in range(REPEATED_PASSES):
        counter = experiments.counted_graph_replays if ctx.device == "cuda" else contextlib.nullcontext
        call = again(ctx, trace, counter, first=trace.decoy)
        if judged(ctx, trace, call.seen, truths, lowps)["outcome"] != Outcome.PASS:
            return None
        replays += getattr(call.watched, "count", 0)
    cause = Cause.STALE_GRAPH if replays else Cause.RESULT_REUSE
    graphs = f"; those calls replayed a captured CUDA graph {replays} time(s)" if replays else ""
    return Confirmed(cause, f"the output is the answer for the values of the earlier call on the same tensors "
                            f"({experiments.summary(earlier)} against that call's reference, "
                            f"{experiments.summary(row)} against this call's), and so it is again in "
                            f"{REPEATED_PASSES} repeats of those two calls on fresh tensors{graphs}")


def _held_numerics(ctx: WorkerContext, trace: CaseTrace, row: dict) -> Confirmed | None:
    """precision_downgrade: the submission set a flag that lowers float32 precision (TF32,
    reduced-precision reductions, matmul precision; `experiments.precision_flags`), in force for
    its calls as in the benchmark; run with the harness's flags instead, and its writes to them
    dropped, the same inputs pass REPEATED_PASSES times."""
    guard = ctx.guard
    if guard.harness is None:
        return None
    flags = experiments.precision_flags(guard.published, guard.harness.state)
    if not flags:
        return None
    results, dropped = [], []
    with guard.harness_numerics():
        before = experiments.numerics_state()
        for _ in range(REPEATED_PASSES):
            call = again(ctx, trace, experiments.pinned_numerics, experiments.numerics_state)
            if call.checked != before:
                return None  # the flags moved all the same: the experiment isolates nothing
            results.append(own_truth(ctx, trace, call.seen))
            dropped += call.watched.dropped
    if any(r["outcome"] != Outcome.PASS for r in results):
        return None
    writes = ", ".join(dict.fromkeys(dropped)) or "none during the calls"
    return Confirmed(Cause.PRECISION_DOWNGRADE,
                     f"the submission sets {', '.join(flags)} (in force for its own calls, as in the benchmark); "
                     f"with the harness's flags the same inputs pass {REPEATED_PASSES} times "
                     f"({experiments.summary(results[-1])}; was {experiments.summary(row)}; its writes dropped: "
                     f"{writes})")


def _serialised_streams(ctx: WorkerContext, trace: CaseTrace, row: dict,
                        repeats: int = REPEATED_PASSES) -> Confirmed | None:
    """unsynchronized_stream: with every stream switch dropped (the candidate's work in order on the
    caller's stream), the same inputs pass `repeats` times. The evidence says too whether the
    case's output, read after a device-wide synchronize instead of on the caller's stream, passes:
    then the caller's stream was never made to wait for the work that writes it."""
    if ctx.device != "cuda":
        return None
    results, switches = [], 0
    for _ in range(max(repeats, REPEATED_PASSES)):
        call = again(ctx, trace, experiments.serialised_streams)
        if not call.watched.switches:
            return None
        switches = call.watched.switches
        results.append(own_truth(ctx, trace, call.seen))
    if any(r["outcome"] != Outcome.PASS for r in results):
        return None
    synced = own_truth(ctx, trace, trace.out)
    late = ("read after a device-wide synchronize instead, the same output passes: the caller's stream "
            "does not wait for the work that writes it" if synced["outcome"] == Outcome.PASS else
            f"read after a device-wide synchronize it fails too ({experiments.summary(synced)}): the work "
            "reads what the caller's stream had not yet written")
    return Confirmed(Cause.UNSYNCHRONIZED_STREAM,
                     f"the candidate switched streams {switches} time(s) in its call; as the caller's stream "
                     f"sees it the output fails ({experiments.summary(row)}), and with the switches dropped (its "
                     f"work in order on the caller's stream) the same inputs pass {len(results)} times; {late}")
