"""The worker's executor: one problem and one candidate loaded once, then run for many requests
(the fixed-shape check, fuzz cases, timing). It only orchestrates: loading (`loading.py`), the case
protocol (`case.py`), the fixed check (`fixed.py`), timing (`timing.py`), each call into candidate
code guarded (`guard.py`).

Nothing here talks to the results: the worker sends plain dicts back to the parent (`loop.py`).
"""

from __future__ import annotations

import json
import platform

import torch

from rescore.model.outcomes import Outcome
from rescore.model.records import INGEST_ERROR
from rescore.oracle.reference import Reference
from rescore.runtime import interpreter
from rescore.worker import case, confine, explain, fixed, loading, stateful, timing
from rescore.worker.context import DecoySchedule, ExplainLater
from rescore.worker.exceptions import Verdict
from rescore.worker.experiments import RACE_REPEATS, Explainer
from rescore.worker.guard import Guard
from rescore.worker.job import Loaded
from rescore.worker.phases import NO_PHASES, Phases
from rescore.worker.placement import TruthPlacement
from rescore.worker.prebuilt import PrebuiltState
from rescore.worker.turns import watch_triton
from rescore.worker.usage import ExtensionUse, cuda_columns


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


def ends(text: str, limit: int) -> str:
    """`text` within `limit` characters, its start and its end kept (a long path first must not cut off
    the error it names)."""
    if len(text) <= limit:
        return text
    half = (limit - 5) // 2
    return f"{text[:half]} ... {text[-half:]}"


class Executor:
    """One problem + one candidate, loaded once, run for many cases (a fresh process costs seconds).

    Every call into candidate code goes through `guard.call`, which afterwards restores what the
    candidate changed in the harness or the problem and records it as a finding (see `integrity.py`).
    The parts of a case see the executor as a `context.WorkerContext`."""

    def __init__(self, device: str, budget: int, phases: Phases = NO_PHASES, explain: bool = True):
        self.device = device
        self.budget = budget
        if device == "cpu":
            interpreter.install_all()  # bounds checks, Triton 3.6's NumPy fix, the launch scan done once
        self.versions = versions(device)
        self.loaded = Loaded()
        self.phases = phases  # where a case's time goes (bench/case_phases.py); by default untimed
        self.guard = Guard(self.loaded, phases)
        self.reference = Reference(phases)  # the case's float64 reference
        self.reference.on_run = self.guard.turns.harness
        self.placement = TruthPlacement(device)  # where the case's float64 truth is computed
        self.decoys = DecoySchedule(device)  # which fuzz cases start with the decoy call
        # the experiments that confirm a failure's cause (`explain.py`); only a GPU can race
        self.explainer = Explainer(enabled=explain, race_repeats=RACE_REPEATS if device == "cuda" else 0)
        self.later = ExplainLater()  # a failed case's experiments, when the parent asks for them apart

    def arm(self, audit: confine.Audit | None = None) -> None:
        """Take the snapshots the candidate will be checked against (`Guard.arm`), Triton's compiles
        and CUDA builds noted as the compiler's turn first (on a GPU: `turns.watch_triton`; `prebuilt`)."""
        if self.device == "cuda":
            watch_triton(self.guard.turns)
        PrebuiltState.turns = self.guard.turns  # a CUDA build inside a call: the compiler's turn too
        self.guard.arm(audit)

    @property
    def candidate_file(self) -> str | None:
        return self.loaded.candidate_file

    @property
    def language(self) -> str | None:
        return self.loaded.job.get("submission", {}).get("language")

    # -- loading ---------------------------------------------------------------------------------
    def load(self, job: dict) -> dict:
        """Load the job's problem and candidate; returns the schema it will fuzz (as plain data)."""
        self.loaded.start(job)
        self.reference.model64 = None
        loading.forget_previous()
        self.decoys.reset()
        self.explainer.reset()
        ExtensionUse.reset()
        self.later.pending = None
        self.placement.for_problem(job["problem"].get("problem_id"))
        self.guard.forget_load_findings()
        self.guard.begin()
        problem = job["problem"]
        try:
            self.loaded.problem, self.loaded.schema = loading.load_problem(problem)
        except BaseException as exc:  # noqa: BLE001 - a broken problem is recorded, not raised
            self.loaded.problem = None
            # a submission the ingest could not read: the ingest's own words, which name the file
            why = str(exc) if str(exc).startswith(INGEST_ERROR) else (
                f"problem {problem['path']} could not be loaded: {type(exc).__name__}: {exc}")
            self.loaded.load_error = Verdict(Outcome.SKIPPED, ends(why, 500))
            return {}
        sub = job["submission"]
        if self.loaded.nulls:  # no candidate to load: the fixed check derives the nulls from the reference
            return loading.schema_dict(self.loaded.schema)
        if sub["language"] == "cuda" and self.device != "cuda":
            self.loaded.load_error = Verdict(
                Outcome.SKIPPED, "CUDA C submission (load_inline) needs a GPU; run on a CUDA device")
            return loading.schema_dict(self.loaded.schema)
        if sub.get("cuda_only") and self.device != "cuda":
            self.loaded.load_error = Verdict(
                Outcome.SKIPPED, f"{sub['name']}: its dump says this kernel runs only with CUDA (gpuemu meta.json "
                "`requires_gpu`); run on a CUDA device")
            return loading.schema_dict(self.loaded.schema)
        if sub["language"] == "cuda":
            failed = loading.use_prebuild(sub["source"], self.guard)
            if failed:
                self.loaded.load_error = Verdict(Outcome.COMPILE_ERROR, failed[:500])
                return loading.schema_dict(self.loaded.schema)
        self.loaded.candidate, self.loaded.load_error = loading.load_candidate(self.guard, sub)
        self.guard.keep_load_findings()
        self.guard.begin()
        return loading.schema_dict(self.loaded.schema)

    # -- the fixed-shape check -------------------------------------------------------------------
    def run_fixed(self, profile: str, dtype: str = "float32") -> dict:
        """The benchmark's own fixed-shape check under `profile` (`fixed.py`): of the candidate, or of the
        problem's null candidates in a job that holds them."""
        self.guard.begin()
        calls = ExtensionUse.calls
        row = (fixed.run_nulls if self.loaded.nulls else fixed.run_fixed)(self, profile, dtype)
        return self.guard.with_findings(cuda_columns(row, self.language, calls))

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
    def run_case(self, strategy: str, seed: int, dtype: str, override: dict | None = None, repeat: int = 1,
                 defer_explain: bool = False) -> dict:
        """Run one fuzz case; returns a row of the `cases` table (without the submission's columns).
        `defer_explain`: a failed case's experiments wait for `run_explain`."""
        self.guard.begin()
        self.later.defer, self.later.pending = defer_explain, None
        calls = ExtensionUse.calls
        try:
            row = case.run_case(self, strategy, seed, dtype, override, repeat)
            return self.guard.with_findings(cuda_columns(row, self.language, calls))
        finally:
            self.later.defer = False

    def run_explain(self) -> dict:
        """What the experiments deferred by the last case find: for a failed case, the cause they
        confirm (`cause`, `cause_evidence`); for a passing case due its probe of later calls, the
        verdict columns that flag it (`stateful.probe`). Empty when they find nothing, or nothing waits."""
        self.guard.begin()
        pending, self.later.pending = self.later.pending, None
        if pending is None:
            return {}
        if pending[0] == "probe":
            _, trace, reference_s = pending
            self.guard.turns.measured(reference_s)
            with self.phases("second_call"):
                return stateful.probe(self, trace) or {}
        _, spec, row, override, again, decoy, reference_s = pending
        self.guard.turns.measured(reference_s)  # the candidate's calls at the case's sizes are limited by it
        explained = explain.explain(self, spec, row, override, again, decoy)
        return {k: explained[k] for k in ("cause", "cause_evidence") if explained.get(k)}
