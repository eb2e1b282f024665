"""Stateful paths: a kernel's model called again and again on one shape, as its users call it.

Once per dtype of a load, on its first passing case, a fresh model is called STATEFUL_CALLS times on
fresh tensors of one shape, each holding other values: at the case's sizes, then at the benchmark's
own sizes (a kernel may keep a CUDA graph or a buffer for that shape only). Every output a call
returned is held, and so is every input (no address is handed out again within the probe): a later
call that changes an output is `output_aliasing` (a caller holding a result sees it change); a call
whose answer is wrong for its own values but right for an earlier call's (or, at the case's sizes,
for the case's own, kept by a cache that outlives a model) is `result_reuse`
(`stale_graph` when that call replayed a captured CUDA graph). Only the last call, and a call whose
answer is bit for bit an earlier one's, are judged against the reference. Four calls see a graph
captured on the second call and replayed from the third, and what the fourth does to the third's
output. A call wrong on its own values and on every earlier one's is left to the fuzz cases (which
judge values); the probe reports state only.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import replace

from rescore.inputs.seeds import sub_seed
from rescore.inputs.strategies import CaseSpec
from rescore.model.outcomes import Outcome
from rescore.oracle import judge
from rescore.oracle.reference import ReferenceRejects, flatten
from rescore.worker import case_inputs, experiments
from rescore.worker.context import WorkerContext
from rescore.worker.exceptions import cuda_context_usable, is_cuda_failure
from rescore.worker.experiments import CaseTrace, Cause, Confirmed
from rescore.worker.explain import again, aside, build_model, judged, truths_of

STATEFUL_CALLS = 4


def due(ctx: WorkerContext, trace: CaseTrace) -> bool:
    """Whether this passing case is the one its dtype's probe runs on (the first of a load)."""
    return (ctx.explainer.enabled and not ctx.explainer.running
            and ("stateful", trace.spec.dtype) not in ctx.explainer.answers)


def probe(ctx: WorkerContext, trace: CaseTrace) -> dict | None:
    """The verdict columns that flag a passing case whose model's later calls give a held output
    away or answer for an earlier call (see the module's docstring); None when they do not."""
    if not due(ctx, trace):
        return None
    ctx.explainer.answers[("stateful", trace.spec.dtype)] = None
    with aside(ctx):
        try:
            for shaped, where, case in _shapes(ctx, trace):
                found = _calls(ctx, shaped, where, case)
                if found is not None:
                    return found
        except ReferenceRejects:
            return None
        except Exception as exc:  # noqa: BLE001 - a probe that fails tells nothing
            if is_cuda_failure(exc) and not cuda_context_usable():
                ctx.guard.restart = True
    return None


def _shapes(ctx: WorkerContext, trace: CaseTrace) -> Iterator[tuple[CaseTrace, str, tuple | None]]:
    """The case's own sizes (with the case's truth: an answer the calls may hand back too), then the
    benchmark's (normal values, contiguous) when they differ."""
    yield (trace, f"at the case's sizes {json.dumps(trace.spec.sizes)}",
           (trace.truths, trace.lowps, trace.structural, trace.terms))
    problem, schema = ctx.loaded.problem, ctx.loaded.schema
    assert problem is not None and schema is not None
    bench = dict(schema.defaults())
    if trace.spec.sizes == bench:
        return
    spec = CaseSpec(trace.spec.strategy, sub_seed(trace.spec.seed, "benchmark sizes"), trace.spec.dtype, bench,
                    "normal", "contiguous")
    inputs, init = case_inputs.make_inputs(problem, schema, ctx.device, spec, recorded=False)  # its values unused
    reduction_len = schema.reduction_length(bench)
    ctx.placement.truth_device = ctx.placement.choose(inputs, reduction_len)
    yield (replace(trace, spec=spec, init=init, wseed=sub_seed(spec.seed, "weights"), reduction_len=reduction_len),
           f"at the benchmark's sizes {json.dumps(bench)}", None)


def _calls(ctx: WorkerContext, trace: CaseTrace, where: str, case: tuple | None) -> dict | None:
    problem, schema = ctx.loaded.problem, ctx.loaded.schema
    model = build_model(ctx, trace.init, trace.tdtype, trace.wseed)
    counter = experiments.counted_graph_replays if ctx.device == "cuda" else contextlib.nullcontext
    values, calls, held = [], [], []  # every call's inputs stay alive too: no address is handed out again
    for i in range(STATEFUL_CALLS):
        values.append(case_inputs.decoy_values(problem, schema, ctx.device, trace.spec, trace.tdtype, f"stateful{i}",
                                                  draws=True))
        calls.append(again(ctx, trace, counter, values=values[i], model=model))
        for k, (outs, copies) in enumerate(held):
            changed = [m for m, (x, x0) in enumerate(zip(outs, copies)) if not judge.same(x, x0)]
            if changed:
                found = Confirmed(Cause.OUTPUT_ALIASING,
                                  f"call {i + 1} of {STATEFUL_CALLS} on a fresh model {where}, on fresh tensors "
                                  f"holding other values, overwrote output {changed[0]} that call {k + 1} returned "
                                  f"(the same memory handed out again): a caller holding a result sees it change")
                return {"outcome": Outcome.BAD_OUTPUT, "reason": found.evidence, **found.columns()}
        outs = flatten(calls[i].out) or []
        held.append((outs, case_inputs.snapshot(outs)))
    truths: dict[int, tuple] = {}

    def truth(i: int) -> tuple:
        if i not in truths:
            truths[i] = truths_of(ctx, trace, values[i])
        return truths[i]

    # A call to judge: one whose answer is bit for bit an earlier call's (on other values), and the
    # last call; only those need a reference run.
    suspects = [i for i in range(1, STATEFUL_CALLS) if any(_same(calls[i].seen, copies) for _, copies in held[:i])]
    for i in dict.fromkeys([*suspects, STATEFUL_CALLS - 1]):
        own = judged(ctx, trace, calls[i].seen, *truth(i))
        if own["outcome"] == Outcome.PASS:
            continue
        replays = getattr(calls[i].watched, "count", 0)
        for k in range(i):
            if judged(ctx, trace, calls[i].seen, *truth(k))["outcome"] == Outcome.PASS:
                return _reused(own, i, f"call {k + 1}'s answer", replays, where)
        if case is not None and judged(ctx, trace, calls[i].seen, *case)["outcome"] == Outcome.PASS:
            return _reused(own, i, "the answer of the case's own call, on another model", replays, where)
    return None


def _same(out, copies: list) -> bool:
    outs = flatten(out) or []
    return bool(outs) and len(outs) == len(copies) and all(judge.same(x, y) for x, y in zip(outs, copies))


def _reused(own: dict, i: int, answer: str, replays: int, where: str) -> dict:
    cause = Cause.STALE_GRAPH if replays else Cause.RESULT_REUSE
    how = f", replaying a captured CUDA graph {replays} time(s)" if replays else ""
    found = Confirmed(cause, f"call {i + 1} of {STATEFUL_CALLS} on a fresh model {where}, on fresh tensors holding "
                             f"other values, returned {answer}{how}")
    verdict = {key: v for key, v in own.items() if key != "reason"}
    verdict.update(found.columns())
    return dict(verdict, reason=f"{found.evidence}:\n{own.get('reason', '')}"[:1000])
