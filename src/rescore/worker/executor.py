"""Runs cases inside a worker process: loads one problem and one candidate, makes the inputs of a
case, runs the float64 reference, the reference at the test dtype and the candidate, and judges.

Nothing here talks to the results: the worker sends plain dicts back to the parent (`sandbox.py`).
"""

from __future__ import annotations

import functools
import json
import os
import platform
import sys
import time

import torch

from rescore.inputs.seeds import sub_seed
from rescore.inputs.strategies import CaseSpec
from rescore.oracle import judge
from rescore.oracle.reference import Reference, ReferenceRejects, flatten, scrub, seed_generators
from rescore.oracle.tolerance import DEFAULT_POLICY, torch_dtype
from rescore.runtime import interpreter_compat, interpreter_guard, interpreter_speed
from rescore.worker import case_inputs, confine, fixed, loading, protocol, timing
from rescore.worker.context import DecoySchedule
from rescore.worker.exceptions import (
    NeedsRestart,
    Verdict,
    cuda_context_usable,
    is_cuda_failure,
    verdict_of,
)
from rescore.worker.guard import Guard
from rescore.worker.integrity import digest, digests
from rescore.worker.job import Loaded
from rescore.worker.placement import TruthPlacement, judged_where, lowp
from rescore.worker.usage import (
    Launches,
    OpRecorder,
    kernel_findings,
    output_findings,
)

SIZE_RETRIES = 6
# After SIZE_RETRIES draws the float64 reference rejected (a real problem's sizes are tied: channels
# divisible by groups, a residual's shapes equal), this many draws that vary one size and keep the
# others at the benchmark's own, so that the relations among those hold.
HELD_RETRIES = 6


def versions(device: str) -> str:
    """Library versions and device, recorded on every case."""
    info = {"python": platform.python_version(), "torch": torch.__version__}
    try:
        import triton

        info["triton"] = triton.__version__
    except Exception:  # pragma: no cover - triton missing
        info["triton"] = None
    info["device"] = torch.cuda.get_device_name(0) if device == "cuda" else "cpu (TRITON_INTERPRET=1)"
    return json.dumps(info, sort_keys=True)


class Executor:
    """One problem + one candidate, loaded once, run for many cases (a fresh process costs seconds).

    Every call into candidate code goes through `_call`, which afterwards restores what the candidate
    changed in the harness or the problem and records it as a finding (see `integrity.py`)."""

    def __init__(self, device: str, budget: int):
        self.device = device
        self.budget = budget
        if device == "cpu":
            interpreter_guard.install()  # an unmasked access fails its launch instead of corrupting the worker
            interpreter_compat.install()  # Triton 3.6: loop bounds from scalar tensors under a recent NumPy
            interpreter_speed.install()  # the interpreter's per-launch scan of triton.language, done once
        self.versions = versions(device)
        self.loaded = Loaded()
        self.guard = Guard(self.loaded)
        self.reference = Reference()  # the case's float64 reference
        self.placement = TruthPlacement(device)  # where the case's float64 truth is computed
        self.decoys = DecoySchedule(device)  # which fuzz cases start with the decoy call

    def arm(self, audit: confine.Audit | None = None) -> None:
        """Take the snapshots the candidate will be checked against (`Guard.arm`)."""
        self.guard.arm(audit)

    @property
    def candidate_file(self) -> str | None:
        return self.loaded.candidate_file

    # -- loading ---------------------------------------------------------------------------------
    def load(self, job: dict) -> dict:
        """Load the job's problem and candidate; returns the schema it will fuzz (as plain data)."""
        self.loaded.start(job)
        self.reference.model64 = None
        loading.forget_previous()
        self.decoys.reset()
        self.placement.for_problem(job["problem"].get("problem_id"))
        self.guard.forget_load_findings()
        self.guard.begin()
        problem = job["problem"]
        try:
            self.loaded.problem, self.loaded.schema = loading.load_problem(problem)
        except BaseException as exc:  # noqa: BLE001 - a broken problem is recorded, not raised
            self.loaded.problem = None
            self.loaded.load_error = Verdict(
                "skipped", f"problem {problem['path']} could not be loaded: {type(exc).__name__}: {exc}"[:500]
            )
            return {}
        sub = job["submission"]
        if sub["language"] == "cuda" and self.device != "cuda":
            self.loaded.load_error = Verdict(
                "skipped", "CUDA C submission (load_inline) needs a GPU; run on a CUDA device")
            return loading.schema_dict(self.loaded.schema)
        if sub.get("cuda_only") and self.device != "cuda":
            self.loaded.load_error = Verdict(
                "skipped", f"{sub['name']}: its dump says this kernel runs only with CUDA (gpuemu meta.json "
                "`requires_gpu`); run on a CUDA device")
            return loading.schema_dict(self.loaded.schema)
        if sub["language"] == "cuda":
            failed = loading.use_prebuild(sub["source"], self.guard)
            if failed:
                self.loaded.load_error = Verdict("compile_error", failed[:500])
                return loading.schema_dict(self.loaded.schema)
        self.loaded.candidate, self.loaded.load_error = loading.load_candidate(self.guard, sub)
        self.guard.keep_load_findings()
        self.guard.begin()
        return loading.schema_dict(self.loaded.schema)

    # -- the fixed-shape check -------------------------------------------------------------------
    def run_fixed(self, profile: str, dtype: str = "float32") -> dict:
        self.guard.begin()
        return self.guard.with_findings(fixed.run_fixed(self, profile, dtype))

    # -- timing ----------------------------------------------------------------------------------
    def run_timing(self, dtype: str, warmup: int, repeats: int, budget_s: float, host_clock: bool = False,
                   flush_bytes: int | None = None) -> dict:
        """A row of the timing table: the candidate's forward, then the reference's, each timed on the
        benchmark's own inputs at `dtype` (`timing.py`). Only on a GPU (CUDA events, L2 flushed).
        `host_clock` (tests only) times through the host's clock on any device, and `flush_bytes`
        sets the flush buffer's size: CPU tensors then take the same path as a GPU's."""
        self.guard.begin()
        row = timing.run_timing(self, dtype, warmup, repeats, budget_s, host_clock, flush_bytes)
        return self.guard.with_findings(row)


    # -- fuzz cases --------------------------------------------------------------------------------
    def _cannot_run(self, dtype: str) -> Verdict | None:
        return loading.cannot_run(self.loaded, self.device, dtype)

    def _verdict_of(self, exc: BaseException) -> Verdict:
        return verdict_of(exc, self.guard.findings, self.candidate_file, self.device)


    def run_case(self, strategy: str, seed: int, dtype: str, override: dict | None = None, repeat: int = 1) -> dict:
        """Run one fuzz case; returns a row of the `cases` table (without the submission's columns)."""
        self.guard.begin()
        return self.guard.with_findings(self._run_case(strategy, seed, dtype, override, repeat))

    def _run_case(self, strategy: str, seed: int, dtype: str, override: dict | None, repeat: int) -> dict:
        row = {
            "oracle": "fuzz",
            "strategy": strategy,
            "seed": seed,
            "dtype": dtype,
            "device": self.device,
            "versions": self.versions,
            "tolerance_policy": DEFAULT_POLICY.name,
        }
        skip = self._cannot_run(override.get("dtype", dtype) if override else dtype)
        if skip:
            return dict(row, outcome=skip.outcome, reason=skip.reason)
        if override and override.get("device") == "cuda" and self.device != "cuda":
            return dict(row, outcome="skipped", reason="this trigger needs a real GPU (races, 32-bit offset overflow)")
        if override and "repeat" in override:
            repeat = int(override["repeat"])
        attempt_seed, last = seed, ""
        decoy = not override and self.decoys.due()
        for attempt in range(SIZE_RETRIES):
            spec = case_inputs.draw(self.loaded.problem, self.loaded.schema, self.budget, strategy, attempt_seed, dtype,
                                    override)
            row.update(dtype=spec.dtype, sizes=json.dumps(spec.sizes), values=spec.values, layout=spec.layout)
            try:
                return self._run_spec(spec, row, repeat, decoy=decoy)
            except ReferenceRejects as rejected:
                if override:
                    return dict(row, outcome="skipped", reason=f"the float64 reference rejects this input: {rejected}")
                attempt_seed = sub_seed(seed, f"retry{attempt + 1}")
                last = str(rejected)
        for attempt in range(HELD_RETRIES):
            spec = case_inputs.held_draw(self.loaded.problem, self.loaded.schema, self.budget, strategy,
                                           sub_seed(seed, f"held{attempt}"), dtype)
            row.update(dtype=spec.dtype, sizes=json.dumps(spec.sizes), values=spec.values, layout=spec.layout)
            try:
                return self._run_spec(spec, row, repeat, decoy=decoy)
            except ReferenceRejects as rejected:
                last = str(rejected)
        where = self.loaded.job["problem"]["path"]
        return dict(row, outcome="skipped", reason=f"problem {where}: the float64 reference rejected every "
                    f"sampled size (last: {last})"[:500])

    def _run_spec(self, spec: CaseSpec, row: dict, repeat: int, decoy: bool = True) -> dict:
        """The candidate runs before the reference's answer exists anywhere in the process: the
        reference first only checks that it accepts these sizes (its output is dropped), then the
        candidate runs on other values written into the very tensors of the case (a cache keyed by
        pointer, id or shape then answers for the wrong values), then on the case's values; then the
        reference computes the truth, and on a GPU the candidate runs once more on fresh copies
        (determinism: a race shows as two runs that differ).
        An explicit trigger (`override`) runs exactly as written, without the decoy call."""
        assert self.loaded.problem is not None and self.loaded.candidate is not None and self.loaded.schema is not None
        device, tdtype = self.device, torch_dtype(spec.dtype)
        inputs64, init = case_inputs.make_inputs(self.loaded.problem, self.loaded.schema, self.device, spec)
        row["shapes"] = json.dumps([list(x.shape) if isinstance(x, torch.Tensor) else None for x in inputs64])
        row["inputs_hash"] = case_inputs.inputs_hash(inputs64)
        row["reduction_len"] = self.loaded.schema.reduction_length(spec.sizes)
        self.placement.truth_device = self.placement.choose(inputs64, row["reduction_len"])
        wseed = sub_seed(spec.seed, "weights")
        ref_record = OpRecorder()
        # raises when it rejects these sizes
        checked, _ = self.reference.run(self.loaded.problem, inputs64, init, tdtype, wseed, device,
                                        self.placement.truth_device, record=ref_record)
        self.placement.measured(inputs64, row["reduction_len"], self.reference.seconds)
        ref_ops = set(ref_record.ops)
        scrub(checked, inputs64)
        del checked
        lowp_inputs = lowp(inputs64, tdtype, self.device)
        cand_inputs = case_inputs.candidate_inputs(lowp_inputs, spec.layout)
        row["strides"] = json.dumps([list(x.stride()) if isinstance(x, torch.Tensor) else None for x in cand_inputs])
        decoy = case_inputs.decoy_values(self.loaded.problem, self.loaded.schema, self.device, spec, tdtype,
                                         "in-place decoy") if decoy else None
        guarded = digest(inputs64 + lowp_inputs)
        record = OpRecorder()
        start = time.perf_counter()
        try:
            seed_generators(self.device, wseed)
            model = self.guard.call(self.loaded.candidate.ModelNew, *init)
            if isinstance(model, torch.nn.Module):
                model = self.guard.call(lambda: model.to(device).to(tdtype))
            with torch.no_grad():
                for r in range(repeat - 1):  # earlier calls on other values of the same shape
                    earlier = case_inputs.decoy_values(self.loaded.problem, self.loaded.schema, self.device, spec,
                                                       tdtype, f"decoy{r}")
                    self.guard.call(model, *case_inputs.candidate_inputs(earlier, spec.layout))
                if decoy is not None:
                    decoy_start = time.perf_counter()
                    case_inputs.refill(cand_inputs, decoy)
                    try:
                        self.guard.call(model, *cand_inputs)
                    except Exception:  # noqa: BLE001 - judged on the case's own values below
                        pass
                    if device == "cuda":
                        torch.cuda.synchronize()
                    start += time.perf_counter() - decoy_start
                    case_inputs.refill(cand_inputs, lowp_inputs)
                before = case_inputs.snapshot(cand_inputs)
                guarded_before = digest(before)
                launches = Launches.count
                out = self.guard.call(model, *cand_inputs, record=record)
            if device == "cuda":
                torch.cuda.synchronize()
        except BaseException as exc:  # noqa: BLE001
            if isinstance(exc, KeyboardInterrupt) and os.environ.get("RESCORE_WORKER") != "1":
                raise
            return self._verdict_of(exc).row(row, start)
        row["wall_ms"] = 1e3 * (time.perf_counter() - start)
        launches = Launches.count - launches
        if digests(inputs64 + lowp_inputs, before) != [guarded, guarded_before]:
            self.guard.found("tampers_reference", "the harness's copies of the inputs changed while the candidate ran")
            inputs64, init = case_inputs.make_inputs(self.loaded.problem, self.loaded.schema, self.device, spec)
            lowp_inputs = lowp(inputs64, tdtype, self.device)
            before = case_inputs.snapshot(lowp_inputs)
        truths, lowps = self.reference.run(self.loaded.problem, inputs64, init, tdtype, wseed, device,
                                           self.placement.truth_device, lowp_inputs, record=OpRecorder())
        structural = self.reference.structural_truths(inputs64, truths)
        terms = self.reference.term_sizes(self.loaded.schema.linear, inputs64, truths)
        self.guard.findings |= output_findings(list(out) if isinstance(out, (tuple, list)) else [out], cand_inputs)
        self.guard.findings |= kernel_findings(self.loaded.job["submission"]["language"], ref_ops, record.ops, launches)
        overrides = self.loaded.job["problem"].get("tolerance")
        place = functools.partial(judged_where, device)
        verdict = judge.judge(out, truths, lowps, cand_inputs, before, tdtype, spec.dtype, row["reduction_len"],
                              structural, terms, device=device, overrides=overrides, place=place)
        if verdict["outcome"] == "pass" and self.device == "cuda":
            # Only a GPU can race: the interpreter runs program instances one after another, and
            # memory nothing wrote is NaN in the first run already; on the CPU a rerun finds nothing.
            again = self._rerun(model, lowp_inputs, spec.layout)
            if again is not None:
                self.guard.findings |= output_findings(flatten(again) or [], truths + (lowps or []), "reads_reference")
                verdict = judge.judge_rerun(out, again, truths, lowps, tdtype, spec.dtype, row["reduction_len"],
                                            verdict, structural, terms, device=device, overrides=overrides,
                                            place=place)
        return dict(row, **verdict)

    def _rerun(self, model, lowp_inputs: list, layout: str):
        """The candidate once more on fresh copies of the same inputs (fresh outputs are NaN-filled)."""
        inputs = case_inputs.candidate_inputs(lowp_inputs, layout)
        try:
            with torch.no_grad():
                again = self.guard.call(model, *inputs)
            if self.device == "cuda":
                torch.cuda.synchronize()
        except BaseException as exc:  # noqa: BLE001
            if is_cuda_failure(exc) and not cuda_context_usable():
                raise NeedsRestart(str(exc)) from exc
            if isinstance(exc, (SystemExit, KeyboardInterrupt)):
                self.guard.findings.add("exits")
            return None
        return again

def poison_fresh_memory() -> None:
    """Make every fresh allocation NaN (integers: their max), so that output a kernel never wrote is
    caught, and caught the same way on every run (garbage would make replays disagree)."""
    import warnings

    from torch.utils import deterministic

    torch.use_deterministic_algorithms(True, warn_only=True)
    deterministic.fill_uninitialized_memory = True
    warnings.filterwarnings("ignore", message=".*deterministic.*")


def main_loop(conn, device: str, budget: int, audit: confine.Audit | None = None) -> None:  # pragma: no cover
    """The worker: receive jobs and cases over `conn`, answer each with a row.

    Requests arrive as (token, message); each answer carries its request's token, so a message that
    the candidate writes into the result channel itself is recognised by the parent as forged."""
    os.environ["RESCORE_WORKER"] = "1"
    poison_fresh_memory()
    executor = Executor(device, budget)
    executor.arm(audit)
    while True:
        try:
            packet = conn.recv()
        except EOFError:
            return
        token, wire = packet if len(packet) == 2 and isinstance(packet[0], bytes) else (None, packet)
        if wire[0] == protocol.Kind.STOP:
            return
        confine.refresh_cpu_limit()
        status = protocol.Status.OK
        try:
            match protocol.decode(wire):
                case protocol.Load(job):
                    result = executor.load(job)
                case protocol.Fixed(profile, dtype):
                    result = executor.run_fixed(profile, dtype)
                case protocol.Case(strategy, seed, dtype, override):
                    result = executor.run_case(strategy, seed, dtype, override)
                case protocol.Time(dtype, warmup, repeats, budget_s, host_clock, flush_bytes):
                    result = executor.run_timing(dtype, warmup, repeats, budget_s, host_clock, flush_bytes)
        except protocol.UnknownMessage as exc:
            result = {"outcome": "crash", "reason": str(exc)}
        except NeedsRestart as exc:
            status, result = protocol.Status.RESTART, {"outcome": "crash", "reason": str(exc)}
        except BaseException as exc:  # noqa: BLE001 - everything is reported, the loop goes on
            result = {"outcome": "crash", "reason": f"harness: {type(exc).__name__}: {exc}"[:500]}
        executor.guard.police(None)  # whatever ran last, the answer is sent by an intact harness
        if executor.guard.restart:
            status = protocol.Status.RESTART
        result = protocol.plain(result)
        result[protocol.RSS_KEY] = _rss()
        conn.send((token, status.value, result) if token is not None else (status.value, result))
        sys.stdout.flush()
        if status == protocol.Status.RESTART:
            return


def _rss() -> int:
    """Resident memory of this process now, in bytes."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0
