"""The case protocol: one fuzz case, from its draw to its verdict.

The candidate runs before the reference's answer exists anywhere in the process, on values written
into the very tensors of the case after a decoy call, and (on a GPU) once more on fresh copies. The
order of the steps and every named sub-seed are what make a case's `inputs_hash` and outcome
reproducible: keep both as they are.
"""

from __future__ import annotations

import functools
import json
import os
import time

import torch

from rescore.inputs.seeds import sub_seed
from rescore.inputs.strategies import CaseSpec
from rescore.model.outcomes import Outcome
from rescore.oracle import judge
from rescore.oracle.reference import ReferenceRejects, flatten, scrub
from rescore.oracle.tolerance import DEFAULT_POLICY, torch_dtype
from rescore.worker import case_inputs, explain, stateful
from rescore.worker.context import WorkerContext
from rescore.worker.exceptions import NeedsRestart, cuda_context_usable, from_harness, is_cuda_failure, verdict_of
from rescore.worker.experiments import CaseTrace
from rescore.worker.integrity import broken, seal
from rescore.worker.loading import cannot_run
from rescore.worker.placement import judged_where, lowp
from rescore.worker.protocol import EXPLAIN_KEY
from rescore.worker.streams import call_seen
from rescore.worker.usage import Launches, OpRecorder, kernel_findings, output_findings

SIZE_RETRIES = 6
# After SIZE_RETRIES draws the float64 reference rejected (a real problem's sizes are tied: channels
# divisible by groups, a residual's shapes equal), this many draws that vary one size and keep the
# others at the benchmark's own, so that the relations among those hold.
HELD_RETRIES = 6


def run_case(ctx: WorkerContext, strategy: str, seed: int, dtype: str, override: dict | None, repeat: int) -> dict:
    """One fuzz case's row of the `cases` table (without the submission's columns): drawn again with
    another sub-seed while the float64 reference rejects the drawn sizes, then with all sizes but
    one at the benchmark's own, and `skipped` when every draw is rejected."""
    row = {
        "oracle": "fuzz",
        "strategy": strategy,
        "seed": seed,
        "dtype": dtype,
        "device": ctx.device,
        "versions": ctx.versions,
        "tolerance_policy": DEFAULT_POLICY.name,
    }
    if ctx.loaded.schema is not None:
        row["input_domains"] = ctx.loaded.schema.domains_json()
    skip = cannot_run(ctx.loaded, ctx.device, override.get("dtype", dtype) if override else dtype)
    if skip:
        return dict(row, outcome=skip.outcome, reason=skip.reason)
    if override and override.get("device") == "cuda" and ctx.device != "cuda":
        return dict(row, outcome=Outcome.SKIPPED,
                    reason="this trigger needs a real GPU (races, 32-bit offset overflow)")
    if override and "repeat" in override:
        repeat = int(override["repeat"])
    problem, schema = ctx.loaded.problem, ctx.loaded.schema

    def again(strategy: str, seed: int, dtype: str, trigger: dict) -> dict:  # an experiment's case
        turns = ctx.guard.turns
        reference_s = turns.reference_s
        try:
            return run_case(ctx, strategy, seed, dtype, trigger, 1)
        finally:  # the experiments after it call the candidate at this case's sizes again
            turns.measured(reference_s)

    attempt_seed, last = seed, ""
    # an explicit trigger runs without the decoy call unless it asks for one (an experiment that
    # repeats a case exactly)
    decoy = bool(override.get("decoy")) if override else ctx.decoys.due()
    for attempt in range(SIZE_RETRIES):
        with ctx.phases("draw"):
            spec = case_inputs.draw(problem, schema, ctx.budget, strategy, attempt_seed, dtype, override)
        row.update(dtype=spec.dtype, sizes=json.dumps(spec.sizes), values=spec.values, layout=spec.layout)
        try:
            judged = run_spec(ctx, spec, row, repeat, decoy=decoy)
        except ReferenceRejects as rejected:
            if override:
                return dict(row, outcome=Outcome.SKIPPED, reason=refused(ctx, spec.sizes, rejected))
            attempt_seed = sub_seed(seed, f"retry{attempt + 1}")
            last = refused(ctx, spec.sizes, rejected)
            continue
        return _explained(ctx, spec, judged, override, again, decoy)
    for attempt in range(HELD_RETRIES):
        with ctx.phases("draw"):
            spec = case_inputs.held_draw(problem, schema, ctx.budget, strategy, sub_seed(seed, f"held{attempt}"), dtype)
        row.update(dtype=spec.dtype, sizes=json.dumps(spec.sizes), values=spec.values, layout=spec.layout)
        try:
            judged = run_spec(ctx, spec, row, repeat, decoy=decoy)
        except ReferenceRejects as rejected:
            last = refused(ctx, spec.sizes, rejected)
            continue
        return _explained(ctx, spec, judged, override, again, decoy)
    return dict(row, outcome=Outcome.SKIPPED, reason=f"inconclusive: every size drawn was refused by the "
                f"problem itself, never the kernel (last: {last})"[:500])


def refused(ctx: WorkerContext, sizes: dict, rejected: ReferenceRejects) -> str:
    """Why a case is inconclusive: the problem's own code (its reference, its Model's construction,
    a name it derives from the sizes) refused these sizes before the kernel ran."""
    return f"problem {ctx.loaded.job['problem']['path']} refuses sizes {json.dumps(sizes)}: {rejected}"


def _explained(ctx: WorkerContext, spec: CaseSpec, row: dict, override: dict | None, again, decoy: bool) -> dict:
    """The judged row with the cause an experiment confirmed (`explain.explain`); or, where the parent
    asked for the experiments as a request of their own (`Executor.run_explain`: a death, a timeout or
    the machine's limit in them then costs the case's verdict nothing, and the parent spends them only
    within the submission's budget), the row as judged, marked as waiting for them (`EXPLAIN_KEY`).
    A passing case's probe of later calls (`stateful.py`) is deferred the same way, in `run_spec`."""
    later = ctx.later
    if row.get(EXPLAIN_KEY):  # a passing case whose later calls are probed apart (`run_spec`)
        return row
    if later.defer and explain.wanted(ctx, row):
        later.pending = ("explain", spec, row, override, again, decoy, ctx.guard.turns.reference_s)
        return dict(row, **{EXPLAIN_KEY: True})
    with ctx.phases("explain"):
        return explain.explain(ctx, spec, row, override, again, decoy)


def accepted_truth(ctx: WorkerContext, inputs64: list, init: list, tdtype: torch.dtype,
                   wseed: int) -> tuple[list, OpRecorder]:
    """The truth's first run, which tells whether the reference accepts the case's sizes, and the
    recorder of its ops. Where it refuses them on the device the case's truth was placed on and the
    placement could have chosen the other (`TruthPlacement.alternative`), it runs there too, and the
    sizes are refused only when both refuse them: which sizes a seed draws must not depend on the
    placement, which depends on measured times. (On an H100, one case of 25,061 drew other sizes in
    two runs: the host's float64 ConvTranspose3d refused an output of width 0 that the device computed,
    empty.) Sizes at which every output is empty are refused too, wherever the truth ran: such a case
    judges nothing (20 of CUDA-L1's cases on an H100 passed that way). Raises ReferenceRejects when the
    sizes are refused."""
    placement = ctx.placement
    problem = ctx.loaded.problem
    record = OpRecorder()
    try:
        truths = ctx.reference.run(problem, inputs64, init, tdtype, wseed, ctx.device, placement.truth_device,
                                   record=record)[0]
    except ReferenceRejects:
        other = placement.alternative(inputs64)
        if other is None:
            raise
        placement.truth_device = other
        record = OpRecorder()
        truths = ctx.reference.run(problem, inputs64, init, tdtype, wseed, ctx.device, other, record=record)[0]
    if all(t.numel() == 0 for t in truths):
        raise ReferenceRejects("every output of the reference is empty at these sizes: nothing to judge")
    return truths, record


def run_spec(ctx: WorkerContext, spec: CaseSpec, row: dict, repeat: int, decoy: bool = True) -> dict:
    """The candidate runs before the reference's answer exists anywhere in the process: the
    reference first only checks that it accepts these sizes (its output is dropped), then the
    candidate runs on other values written into the very tensors of the case (a cache keyed by
    pointer, id or shape then answers for the wrong values), then on the case's values; then the
    reference computes the truth, and on a GPU the candidate runs once more on fresh copies
    (determinism: a race shows as two runs that differ). On a GPU every output is judged as the
    caller's stream sees it right after the call (`streams.py`), before the device is synchronized."""
    loaded, guard, phases, placement = ctx.loaded, ctx.guard, ctx.phases, ctx.placement
    problem, schema = loaded.problem, loaded.schema
    assert problem is not None and loaded.candidate is not None and schema is not None
    device, tdtype = ctx.device, torch_dtype(spec.dtype)
    ctx.explainer.trace = None
    with phases("make_inputs"):
        inputs64, init = case_inputs.make_inputs(problem, schema, device, spec)
    row["shapes"] = json.dumps([list(x.shape) if isinstance(x, torch.Tensor) else None for x in inputs64])
    with phases("inputs_hash"):
        row["inputs_hash"] = case_inputs.inputs_hash(inputs64)
    row["reduction_len"] = schema.reduction_length(spec.sizes)
    placement.truth_device = placement.choose(inputs64, row["reduction_len"])
    wseed = sub_seed(spec.seed, "weights")
    with phases("reference"):  # raises when it rejects these sizes
        checked, ref_record = accepted_truth(ctx, inputs64, init, tdtype, wseed)
    placement.measured(inputs64, row["reduction_len"], ctx.reference.seconds)
    guard.turns.measured(ctx.reference.seconds)  # the candidate's calls at these sizes are limited by it
    ref_ops = set(ref_record.ops)
    with phases("scrub"):
        scrub(checked, inputs64)
    del checked
    with phases("lowp"):
        lowp_inputs = lowp(inputs64, tdtype, device)
    with phases("candidate_inputs"):
        cand_inputs = case_inputs.candidate_inputs(lowp_inputs, spec.layout)
    row["strides"] = json.dumps([list(x.stride()) if isinstance(x, torch.Tensor) else None for x in cand_inputs])
    with phases("decoy_values"):
        decoy = case_inputs.decoy_values(problem, schema, device, spec, tdtype, "in-place decoy") if decoy else None
    with phases("digest"):
        sealed = seal(inputs64 + lowp_inputs)
    record = OpRecorder()
    start = time.perf_counter()
    try:
        model = explain.build_model(ctx, init, tdtype, wseed)
        with torch.no_grad():
            for r in range(repeat - 1):  # earlier calls on other values of the same shape
                with phases("decoy_values"):
                    earlier = case_inputs.decoy_values(problem, schema, device, spec, tdtype, f"decoy{r}",
                                                       draws=True)
                guard.call(model, *case_inputs.candidate_inputs(earlier, spec.layout))
            if decoy is not None:
                start += explain.decoy_call(ctx, model, cand_inputs, decoy, lowp_inputs)
            with phases("snapshot"):
                before = case_inputs.snapshot(cand_inputs)
            with phases("digest"):
                sealed_before = seal(before)
            launches = Launches.count
            out, seen = call_seen(guard, model, *cand_inputs, device=device, record=record)
        if device == "cuda":
            torch.cuda.synchronize()
    except BaseException as exc:  # noqa: BLE001
        if isinstance(exc, KeyboardInterrupt) and os.environ.get("RESCORE_WORKER") != "1":
            raise
        if from_harness(exc, loaded.candidate_file):  # an earlier call's decoy draw, a seal: a harness fault
            raise
        return verdict_of(exc, guard.findings, loaded.candidate_file, device).row(row, start)
    row["wall_ms"] = 1e3 * (time.perf_counter() - start)
    launches = Launches.count - launches
    with phases("digest"):
        tampered = broken(inputs64 + lowp_inputs, sealed) or broken(before, sealed_before)
    if tampered:
        guard.found("tampers_reference", "the harness's copies of the inputs changed while the candidate ran")
        with phases("make_inputs"):
            inputs64, init = case_inputs.make_inputs(problem, schema, device, spec)
        with phases("lowp"):
            lowp_inputs = lowp(inputs64, tdtype, device)
        with phases("snapshot"):
            before = case_inputs.snapshot(lowp_inputs)
    with phases("reference"):
        truths, lowps = ctx.reference.run(problem, inputs64, init, tdtype, wseed, device, placement.truth_device,
                                          lowp_inputs, record=OpRecorder())
        structural = ctx.reference.structural_truths(inputs64, truths)
        terms = ctx.reference.term_sizes(schema.linear, inputs64, truths)
    with phases("output_findings"):
        guard.findings |= output_findings(list(out) if isinstance(out, (tuple, list)) else [out], cand_inputs)
    with phases("kernel_findings"):
        guard.findings |= kernel_findings(loaded.job["submission"]["language"], ref_ops, record.ops, launches)
    overrides = loaded.job["problem"].get("tolerance")
    place = functools.partial(judged_where, device)
    with phases("judge"):
        verdict = judge.judge(seen, truths, lowps, cand_inputs, before, tdtype, spec.dtype, row["reduction_len"],
                              structural, terms, device=device, overrides=overrides, place=place)
    if verdict["outcome"] == Outcome.PASS and device == "cuda":
        # Only a GPU can race: the interpreter runs program instances one after another, and
        # memory nothing wrote is NaN in the first run already; on the CPU a rerun finds nothing.
        with phases("rerun"):
            again = rerun(ctx, model, lowp_inputs, spec.layout)
        if again is not None:
            again, again_seen = again
            with phases("output_findings"):
                guard.findings |= output_findings(flatten(again) or [], truths + (lowps or []), "reads_reference")
            with phases("judge_rerun"):
                verdict = judge.judge_rerun(seen, again_seen, truths, lowps, tdtype, spec.dtype, row["reduction_len"],
                                            verdict, structural, terms, device=device, overrides=overrides,
                                            place=place)
    if ctx.explainer.enabled:  # what the experiments need; `explain.explain` lets it go
        ctx.explainer.trace = CaseTrace(spec, model, out, lowp_inputs, decoy, init, tdtype, wseed, truths, lowps,
                                        structural, terms, row["reduction_len"])
        if verdict["outcome"] == Outcome.PASS and stateful.due(ctx, ctx.explainer.trace):
            if ctx.later.defer:  # asked for apart, as a failed case's experiments are (`_explained`)
                ctx.later.pending = ("probe", ctx.explainer.trace, ctx.guard.turns.reference_s)
                return dict(row, **verdict, **{EXPLAIN_KEY: True})
            with phases("second_call"):
                verdict = stateful.probe(ctx, ctx.explainer.trace) or verdict
    return dict(row, **verdict)


def rerun(ctx: WorkerContext, model, lowp_inputs: list, layout: str) -> tuple | None:
    """The candidate once more on fresh copies of the same inputs (fresh outputs are NaN-filled): its
    output, and that output as the caller's stream saw it right after the call; None when it raised."""
    inputs = case_inputs.candidate_inputs(lowp_inputs, layout)
    try:
        with torch.no_grad():
            again, seen = call_seen(ctx.guard, model, *inputs, device=ctx.device)
        if ctx.device == "cuda":
            torch.cuda.synchronize()
    except BaseException as exc:  # noqa: BLE001
        if is_cuda_failure(exc) and not cuda_context_usable():
            raise NeedsRestart(str(exc)) from exc
        if isinstance(exc, (SystemExit, KeyboardInterrupt)):
            ctx.guard.findings.add("exits")
        return None
    return again, seen
