"""Runs cases inside a worker process: loads one problem and one candidate, makes the inputs of a
case, runs the float64 reference, the reference at the test dtype and the candidate, and judges.

Nothing here talks to the results: the worker sends plain dicts back to the parent (`sandbox.py`).
"""

from __future__ import annotations

import copy
import gc
import hashlib
import json
import linecache
import os
import platform
import random
import re
import sys
import threading
import time
import traceback
import types
from dataclasses import dataclass, replace

import torch

from rescore.inputs.layout import apply_layout
from rescore.inputs.seeds import sub_seed
from rescore.inputs.shapes import fit_budget
from rescore.inputs.strategies import CaseSpec, get_strategy
from rescore.inputs.values import LARGE_DRAW, fill
from rescore.model.findings import merge
from rescore.model.records import load_module, module_int_names
from rescore.model.schema import OpSchema, bound_sizes, infer_schema, input_shapes, largest_numel, schema_from_spec
from rescore.model.sources import source_defect
from rescore.oracle.compare import compare, max_abs_finite, max_finite_error
from rescore.oracle.fixed import WEIGHT_SEED, kernelbench_check
from rescore.oracle.tolerance import DEFAULT_POLICY, FIXED_POLICIES, policy_ratios, torch_dtype
from rescore.runtime import interpreter_compat, interpreter_guard, interpreter_speed
from rescore.worker import confine, timing
from rescore.worker.integrity import Harness, digest, digests, hash_tensor, problem_snapshot
from rescore.worker.transfers import to_device, to_host
from rescore.worker.usage import (
    Launches,
    OpRecorder,
    holds_reference,
    kernel_findings,
    output_findings,
    reference_findings,
)

REFUSALS = (ValueError, TypeError, NotImplementedError)
SIZE_RETRIES = 6
# After SIZE_RETRIES draws the float64 reference rejected (a real problem's sizes are tied: channels
# divisible by groups, a residual's shapes equal), this many draws that vary one size and keep the
# others at the benchmark's own, so that the relations among those hold.
HELD_RETRIES = 6
# On a GPU a case whose tensors all hold at most this many elements is judged on the host: the
# comparison is a hundred small ops, and on a GPU shared by many worker processes every op waits for
# its process's turn (a context switch), so host copies made once cost less than the ops.
HOST_JUDGE_ELEMENTS = 1 << 17
# For the same reason a GPU case computes its float64 truth on the host when its inputs are that
# small and its estimated work (largest input x reduction length) is at most this: float64 on one
# core then takes milliseconds, against a dozen turns on the GPU (the uploads, the runs, the copies
# back). The truth is float64 either way; the two devices differ in its last bits, far below any bound.
HOST_TRUTH_WORK = 1 << 22
# The estimate does not see work that outgrows the inputs: a KernelBench level 2 convolution reads
# 12,288 elements and does 3 million multiply-adds (34 ms in float64 on one core). So the truth's
# host run is timed: one slower than this moves the rest of its case to the device, and lowers in
# proportion the estimate the problem's later cases may bring to the host (`_measured_truth`).
HOST_TRUTH_SECONDS = 0.01
DECOY_EVERY = 8  # under the interpreter, the decoy call runs on one fuzz case in this many
# (8: then every strategy's first 8 cases in a row hold exactly one decoy, and a cache-keeping
# kernel has the same chance under every strategy; at 32 the strategy study lost 3 to 7 of the
# result_caching variants for some strategies and none for others)


class NeedsRestart(Exception):
    """The worker's device state is no longer trustworthy (CUDA error): restart after this case."""


@dataclass
class Verdict:
    outcome: str
    reason: str = ""
    diagnosis: str | None = None  # set when the failure itself says why (an out-of-bounds access)

    def row(self, row: dict, start: float) -> dict:
        """`row` completed as a failed call that began at perf_counter() `start`."""
        extra = {"diagnosis": self.diagnosis} if self.diagnosis else {}
        return dict(row, outcome=self.outcome, reason=self.reason, wall_ms=1e3 * (time.perf_counter() - start), **extra)


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


def inputs_hash(inputs: list) -> str:
    """A hash of the exact input values (and shapes and dtypes) of a case."""
    h = hashlib.sha256()
    for x in inputs:
        if isinstance(x, torch.Tensor):
            hash_tensor(h, x)
        else:
            h.update(repr(x).encode())
    return h.hexdigest()[:16]


def _is_cuda_failure(exc: BaseException) -> bool:
    text = f"{type(exc).__name__}: {exc}"
    return any(
        s in text for s in ("CUDA error", "illegal memory access", "CUDA_ERROR", "cudaError", "device-side assert")
    )


def cuda_context_usable() -> bool:
    """Whether this process's CUDA context survived an error. A launch the driver refuses up front
    (a grid of 0 blocks, too many threads per block) leaves it usable; a fault inside a kernel (an
    illegal address, a device-side assert) poisons it for the life of the process. Restarting the
    worker after the first kind cost a fresh CUDA process and a reload on every case of a kernel
    whose grid is 0 at small sizes (12 minutes for one submission on the H200)."""
    try:
        torch.cuda.synchronize()
        return float(torch.ones(1, device="cuda").add_(1).item()) == 2.0
    except BaseException:  # noqa: BLE001 - any failure here means the context is gone
        return False


def _is_oom(exc: BaseException) -> bool:
    text = str(exc)
    return isinstance(exc, (torch.cuda.OutOfMemoryError, MemoryError)) or any(
        s in text for s in ("out of memory", "can't allocate memory", "Unable to allocate")
    )


def _frames(tb) -> list[str]:
    return [frame.f_code.co_filename for frame, _ in traceback.walk_tb(tb)]


def _is_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _where(exc: BaseException) -> str:
    tb = traceback.extract_tb(exc.__traceback__)
    if not tb:
        return ""
    last = tb[-1]
    return f" (at {os.path.basename(last.filename)}:{last.lineno})"


def _compile_error_text(name: str, message: str) -> str:
    """A Triton compilation error in one line: its position, the source line it points at and its
    last line (the cause), instead of the position alone that its first line holds."""
    lines = [line.rstrip() for line in message.strip().splitlines() if line.strip()]
    if len(lines) <= 1:
        return f"{name}: {lines[0] if lines else ''}"[:500]
    body = lines[1:-1]  # the kernel's source up to the line it points at, then a caret line
    carets = [i for i, line in enumerate(body) if set(line.strip()) <= {"^", "~"}]
    source = body[carets[0] - 1].strip() if carets and carets[0] > 0 else (body[-1].strip() if body else "")
    return f"{name}: {lines[0]} `{source}`: {lines[-1].strip()}"[:500]


def classify_exception(exc: BaseException, candidate_file: str | None) -> Verdict:
    """Map an exception raised while running the candidate to an outcome (docs/architecture.md, "Outcomes")."""
    name = type(exc).__name__
    module = type(exc).__module__ or ""
    text = f"{name}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"[:500]
    if _is_oom(exc):
        return Verdict("oom", text)
    if _is_cuda_failure(exc):
        return Verdict("crash", text + _where(exc))
    if isinstance(exc.__cause__, interpreter_guard.OutOfBounds):  # the interpreter wraps kernel errors
        return Verdict("crash", text + _where(exc), "out_of_bounds")
    if module.startswith("triton") and ("Compilation" in name or "OutOfResources" in name):
        return Verdict("compile_error", _compile_error_text(name, str(exc)))
    if isinstance(exc, REFUSALS) and candidate_file:
        files = _frames(exc.__traceback__)
        own = [i for i, f in enumerate(files) if _is_file(f, candidate_file)]
        if own and all(_is_file(f, candidate_file) for f in files[own[0] :]):
            return Verdict("declined", text + _where(exc))
    return Verdict("crash", text + _where(exc))


def _flatten(out) -> list | None:
    """The tensors of an output (a tensor, or a tuple/list of tensors); None when it is anything else."""
    if type(out) is torch.Tensor:
        return [out]
    if isinstance(out, (tuple, list)) and out and all(type(o) is torch.Tensor for o in out):
        return list(out)
    return None


def _snapshot(xs: list) -> list:
    return [x.detach().clone() if isinstance(x, torch.Tensor) else x for x in xs]


def _unequal(a: torch.Tensor, b: torch.Tensor) -> int:
    """Elements where two same-shape tensors differ (NaN equals NaN)."""
    if a.is_floating_point():
        return int((~((a == b) | (torch.isnan(a) & torch.isnan(b)))).sum())
    return int((a != b).sum())


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and _unequal(a, b) == 0


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
        self.problem: types.ModuleType | None = None
        self.candidate: types.ModuleType | None = None
        self.load_error: Verdict | None = None
        self.schema: OpSchema | None = None
        self.model64: torch.nn.Module | None = None  # the case's float64 reference (`_reference`)
        self.truth_device = device  # where the case's float64 truth is computed (`_truth_device`)
        self.host_truth_work = HOST_TRUTH_WORK  # lowered by a slow host truth of the loaded problem
        self.learned_truth_work: dict[str, int] = {}  # problem_id -> its lowered host_truth_work
        self.truth_seconds = 0.0  # how long the last float64 reference run took (`_reference`)
        self.job: dict = {}
        self.harness: Harness | None = None
        self.audit: confine.Audit | None = None
        self.threads: set[threading.Thread] = set()
        self.load_findings: set[str] = set()
        self.load_details: list[str] = []
        self.findings: set[str] = set()
        self.details: list[str] = []
        self.restart = False
        self.cases_run = 0  # fuzz cases of the loaded job run in this process (paces the CPU's decoy calls)

    # -- the harness's defences ------------------------------------------------------------------
    def arm(self, audit: confine.Audit | None = None) -> None:
        """Take the snapshots the candidate will be checked against; from now on the audit hook blocks.
        Called once in a worker, after the harness's own imports and before any candidate loads."""
        Launches.install()
        gc.collect()
        gc.freeze()  # the harness's own objects are never garbage: collections then skip them
        self.harness = Harness()
        self.threads = set(threading.enumerate())
        self.audit = audit
        if audit is not None:
            audit.armed = True

    def _call(self, fn, *args, record: OpRecorder | None = None):
        """Run candidate code, then undo and record what it did to the harness and the problem."""
        snap = problem_snapshot(self.problem) if self.problem is not None else None
        model, forward = self._watch_reference()
        try:
            if record is not None:
                with record:
                    return fn(*args)
            return fn(*args)
        finally:
            if model is not None and model.__dict__.get("forward") is not forward:
                if getattr(model.__dict__.get("forward"), "_rescore_watch", False):
                    model.forward = forward
            self._police(snap)

    def _watch_reference(self):
        """Wrap the problem's Model.forward for the length of a candidate call, so that a candidate
        that runs the reference (imported, found in sys.modules, inherited) is noticed."""
        model = getattr(self.problem, "Model", None)
        forward = model.__dict__.get("forward") if isinstance(model, type) else None
        if forward is None:
            return None, None
        executor = self

        def watched(*args, **kwargs):
            executor._found("uses_reference", "the problem's Model.forward ran inside the candidate's call")
            return forward(*args, **kwargs)

        watched._rescore_watch = True
        model.forward = watched
        return model, forward

    def _police(self, snap) -> None:
        if self.harness is not None:
            changed = self.harness.restore()
            if changed:
                self._found("patched_harness", "patched " + ", ".join(changed[:4]))
        if snap is not None:
            changed = snap.restore()
            if changed:
                self._found("rebinds_problem", "re-bound " + ", ".join(changed[:4]))
        if self.audit is not None:
            seen, details = self.audit.drain()
            self.findings |= seen
            self.details += details
            if confine.sweep_children():
                self._found("subprocess", "child processes were left running (killed)")
            alive = [t for t in threading.enumerate() if t not in self.threads and t.is_alive()]
            if alive:
                self.restart = True
                self._found("background_thread", f"{len(alive)} thread(s) left running (worker restarted)")
        if self.candidate is not None and self.problem is not None:
            self.findings |= holds_reference(self.candidate, self.problem)

    def _found(self, finding: str, detail: str) -> None:
        """Record a finding, with what was seen the first time in this call (for the row's reason)."""
        if finding not in self.findings and len(self.details) < 8:
            self.details.append(detail[:200])
        self.findings.add(finding)

    def _begin(self) -> None:
        self.findings, self.details = set(), []

    def _with_findings(self, row: dict) -> dict:
        """The row with the findings of its submission's load and of this call."""
        found = merge(self.load_findings, self.findings)
        if found:
            row["findings"] = found
            details = self.load_details + self.details
            if details:
                note = "; ".join(dict.fromkeys(details))[:400]
                row["reason"] = f"{row['reason']} [{note}]" if row.get("reason") else f"[{note}]"
        return row

    # -- loading ---------------------------------------------------------------------------------
    def _forget_previous(self) -> None:
        """Drop the previous job's modules, so a worker that serves thousands stays small."""
        self.problem = self.candidate = self.model64 = None
        for name in [n for n in sys.modules if n.startswith(("rescore_candidate_", "rescore_problem_"))]:
            del sys.modules[name]
        try:
            from triton.runtime.interpreter import InterpretedFunction

            InterpretedFunction.rewritten_fn.clear()
        except (ImportError, AttributeError):  # pragma: no cover
            pass
        linecache.clearcache()
        gc.collect()

    def load(self, job: dict) -> dict:
        """Load the job's problem and candidate; returns the schema it will fuzz (as plain data)."""
        self._forget_previous()
        self.job = job
        self.cases_run = 0
        self.host_truth_work = self.learned_truth_work.get(job["problem"].get("problem_id"), HOST_TRUTH_WORK)
        self.load_error = None
        self.load_findings, self.load_details = set(), []
        self._begin()
        problem = job["problem"]
        try:
            defect = source_defect(problem["source"], problem["path"], "problem")
            if defect:
                raise ValueError(defect)
            self.problem = load_module(problem["source"], problem["path"], "problem")
            sizes = module_int_names(problem["source"])
            inferred = infer_schema(self.problem, sizes)
            if problem.get("schema"):
                explicit = schema_from_spec(problem["schema"], sizes, self.problem)
                domains = dict(inferred.domains)
                domains.update(explicit.domains)
                self.schema = OpSchema(explicit.dims, explicit.reduction, domains, explicit.max_elements, False,
                                       explicit.family, explicit.linear)
            else:
                self.schema = inferred
            _check_problem(self.problem)
        except BaseException as exc:  # noqa: BLE001 - a broken problem is recorded, not raised
            self.problem = None
            self.load_error = Verdict(
                "skipped", f"problem {problem['path']} could not be loaded: {type(exc).__name__}: {exc}"[:500]
            )
            return {}
        sub = job["submission"]
        if sub["language"] == "cuda" and self.device != "cuda":
            self.load_error = Verdict("skipped", "CUDA C submission (load_inline) needs a GPU; run on a CUDA device")
            return self._schema_dict()
        if sub.get("cuda_only") and self.device != "cuda":
            self.load_error = Verdict(
                "skipped", f"{sub['name']}: its dump says this kernel runs only with CUDA (gpuemu meta.json "
                "`requires_gpu`); run on a CUDA device")
            return self._schema_dict()
        if sub["language"] == "cuda":
            failed = self._use_prebuild(sub["source"])
            if failed:
                self.load_error = Verdict("compile_error", failed[:500])
                return self._schema_dict()
        try:
            defect = source_defect(sub["source"], sub["path"])
            if defect:
                raise ImportError(defect)
            self.candidate = self._call(load_module, sub["source"], sub["path"], "candidate")
            new = getattr(self.candidate, "ModelNew", None)
            if new is None:
                raise AttributeError(f"{sub['path']} defines no ModelNew")
            if not callable(new):
                raise TypeError(f"{sub['path']}: ModelNew is a {type(new).__name__}, not a class")
            self.findings |= reference_findings(self.candidate, self.problem)
        except BaseException as exc:  # noqa: BLE001
            self.candidate = None
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                self.findings.add("exits")
                self.load_error = Verdict("crash", f"{type(exc).__name__} raised while importing the submission")
            elif isinstance(exc, PermissionError) and "rescore sandbox" in str(exc):
                self.load_error = Verdict("crash", f"{type(exc).__name__}: {exc}"[:500])
            else:
                self.load_error = Verdict("compile_error", f"{type(exc).__name__}: {exc}"[:500])
        self.load_findings, self.load_details = set(self.findings), list(self.details)
        self._begin()
        return self._schema_dict()

    def _use_prebuild(self, source: str) -> str | None:
        """Point torch's JIT build at the prebuilt folder of this source (`cuda_build.py`); returns the
        recorded compiler error when the prebuild already failed on it."""
        try:
            from rescore.engine.cuda_build import activate, recorded_failure
        except ImportError:  # pragma: no cover
            return None
        failed = recorded_failure(source)
        if failed:
            return failed
        folder = activate(source)
        if self.audit is not None:
            self.audit.allow(str(folder))
        return None

    def _schema_dict(self) -> dict:
        s = self.schema
        if s is None:
            return {}
        return {
            "dims": [[d.name, d.default, d.lo, d.hi] for d in s.dims],
            "reduction": list(s.reduction),
            "inferred": s.inferred,
        }

    @property
    def candidate_file(self) -> str | None:
        return getattr(self.candidate, "__file__", None)

    # -- the fixed-shape check -------------------------------------------------------------------
    def run_fixed(self, profile: str, dtype: str = "float32") -> dict:
        self._begin()
        return self._with_findings(self._run_fixed(profile, dtype))

    def _run_fixed(self, profile: str, dtype: str) -> dict:
        row = {
            "oracle": "fixed",
            "strategy": "fixed",
            "case_index": 0,
            "seed": 42,
            "dtype": dtype,
            "tolerance_policy": profile,
            "device": self.device,
            "versions": self.versions,
            "purpose": "evaluation",
            "layout": "contiguous",
            "values": "native",
        }
        skip = self._cannot_run(dtype)
        if skip:
            return dict(row, outcome=skip.outcome, reason=skip.reason)
        assert self.problem is not None and self.candidate is not None and self.schema is not None
        sizes = self.schema.defaults()
        row["sizes"] = json.dumps(sizes)
        row["shapes"] = json.dumps([list(s) if s else None for s in input_shapes(self.problem, sizes)])
        ref_ops, cand_ops = OpRecorder(), OpRecorder()
        launches = Launches.count
        last: list = []
        problem = types.SimpleNamespace(
            get_init_inputs=_blaming_reference(self.problem.get_init_inputs),
            get_inputs=_blaming_reference(self.problem.get_inputs),
            Model=_blaming_reference(lambda *init, m=self.problem.Model: _Watched(m(*init), None, ref_ops, last)),
        )
        candidate = types.SimpleNamespace(
            ModelNew=lambda *init, _new=self.candidate.ModelNew: _Watched(self._call(_new, *init), self, cand_ops, last)
        )
        start = time.perf_counter()
        try:
            result = kernelbench_check(problem, candidate, self.device, dtype, profile)
        except _ReferenceFailed as exc:
            reason = f"problem {self.job['problem']['path']}: the reference failed at its own sizes: {exc}"
            return dict(row, outcome="skipped", reason=reason[:500])
        except BaseException as exc:  # noqa: BLE001
            return self._verdict_of(exc).row(row, start)
        self.findings |= kernel_findings(
            self.job["submission"]["language"], ref_ops.ops, cand_ops.ops, Launches.count - launches
        )
        trials = result["trials"]
        diffs = [t.get("max_difference", float("nan")) for t in trials]
        failed = [t for t in trials if not t["passed"]]
        reason = (
            "" if not failed else (failed[0].get("reason") or f"allclose failed in {len(failed)}/{len(trials)} trials")
        )
        return dict(
            row,
            outcome="pass" if result["verdict"] == "pass" else "mismatch",
            reason=reason,
            max_abs_err=max(diffs) if diffs else None,
            atol=result["tolerance"],
            rtol=result["tolerance"],
            n_mismatch=len(failed),
            n_elements=len(trials),
            wall_ms=1e3 * (time.perf_counter() - start),
        )

    # -- timing ----------------------------------------------------------------------------------
    def run_timing(self, dtype: str, warmup: int, repeats: int, budget_s: float, host_clock: bool = False,
                   flush_bytes: int | None = None) -> dict:
        """A row of the timing table: the candidate's forward, then the reference's, each timed on the
        benchmark's own inputs at `dtype` (`timing.py`). Only on a GPU (CUDA events, L2 flushed).
        `host_clock` (tests only) times through the host's clock on any device, and `flush_bytes`
        sets the flush buffer's size: CPU tensors then take the same path as a GPU's."""
        self._begin()
        return self._with_findings(self._run_timing(dtype, warmup, repeats, budget_s, host_clock, flush_bytes))

    def _run_timing(self, dtype: str, warmup: int, repeats: int, budget_s: float, host_clock: bool,
                    flush_bytes: int | None) -> dict:
        row = {"dtype": dtype, "warmup": max(1, warmup), **timing.environment(self.versions)}
        if not host_clock and self.device != "cuda":
            return dict(row, outcome="skipped", reason=timing.NEEDS_GPU)
        skip = self._cannot_run(dtype)
        if skip:
            return dict(row, outcome=skip.outcome, reason=skip.reason)
        assert self.problem is not None and self.candidate is not None
        sync = torch.cuda.synchronize if self.device == "cuda" else None
        clock = timing.HostClock(sync) if host_clock else timing.EventClock()
        flush = timing.CacheFlush(self.device, flush_bytes)
        row["flush_bytes"] = flush.nbytes
        where = self.job["problem"]["path"]
        try:
            init = self.problem.get_init_inputs()
            inputs = timing.benchmark_inputs(self.problem, self.device, dtype)
        except Exception as exc:  # noqa: BLE001 - the problem's own code: not the candidate's fault
            reason = f"problem {where}: its inputs could not be made: {type(exc).__name__}: {exc}"
            return dict(row, outcome="skipped", reason=reason[:500])
        try:
            timing.seed(WEIGHT_SEED)
            model = self._call(self.candidate.ModelNew, *init)
            model = self._call(timing.placed, model, self.device, dtype)
            timed = self._call(timing.measure, lambda: model(*inputs), clock, flush, warmup, repeats, budget_s)
        except BaseException as exc:  # noqa: BLE001
            if isinstance(exc, KeyboardInterrupt) and os.environ.get("RESCORE_WORKER") != "1":
                raise
            verdict = self._verdict_of(exc)
            return dict(row, outcome=verdict.outcome, reason=verdict.reason)
        row.update(timing.columns(timed), capped=timed.capped, outcome="ok", reason="")
        try:  # the problem's Model, the same way, on inputs of its own (the candidate may have written its)
            inputs = timing.benchmark_inputs(self.problem, self.device, dtype)
            timing.seed(WEIGHT_SEED)
            reference = timing.placed(self.problem.Model(*init), self.device, dtype)
            ref = timing.measure(lambda: reference(*inputs), clock, flush, warmup, repeats, budget_s)
            row.update(timing.columns(ref, "ref_"), ref_outcome="ok", ref_reason="")
        except Exception as exc:  # noqa: BLE001 - recorded beside the candidate's times
            if _is_cuda_failure(exc) and not cuda_context_usable():
                raise NeedsRestart(f"the reference left the GPU unusable: {exc}"[:500]) from exc
            reason = f"problem {where}: the reference failed: {type(exc).__name__}: {exc}"
            row.update(ref_outcome="crash", ref_reason=reason[:500])
        return row

    # -- fuzz cases --------------------------------------------------------------------------------
    def _cannot_run(self, dtype: str) -> Verdict | None:
        if self.load_error is not None:
            return self.load_error
        sub = self.job["submission"]
        if dtype == "bfloat16" and self.device == "cpu" and sub["language"] == "triton":
            return Verdict(
                "skipped",
                "bfloat16 under the Triton interpreter is stored as raw 16-bit integers;"
                " results would be wrong: run on a GPU",
            )
        return None

    def _verdict_of(self, exc: BaseException) -> Verdict:
        if isinstance(exc, (SystemExit, KeyboardInterrupt)):
            self.findings.add("exits")
        v = classify_exception(exc, self.candidate_file)
        if v.outcome == "oom" and self._hog(exc):
            self.findings.add("memory_hog")
            return Verdict("crash", f"{v.reason}: more memory than this worker may use")
        if v.outcome == "crash" and _is_cuda_failure(exc) and not cuda_context_usable():
            raise NeedsRestart(v.reason) from exc
        return v

    def _hog(self, exc: BaseException) -> bool:
        """An allocation larger than the worker may ever have is the kernel's fault, not the machine's
        (which would be retried and then `skipped`)."""
        asked = _requested_bytes(str(exc))
        if self.device == "cuda":
            limit = torch.cuda.get_device_properties(0).total_memory
            return asked is not None and asked > limit
        limit = confine.memory_cap()
        if asked is not None:
            return asked > limit
        return confine.memory_available() > limit // 2  # nothing else is short of memory: it asked too much

    def draw(self, strategy: str, seed: int, dtype: str, override: dict | None = None) -> CaseSpec:
        """The CaseSpec of a case: from its strategy and seed, or from an explicit trigger."""
        assert self.problem is not None and self.schema is not None
        if override:
            sizes = dict(self.schema.defaults())
            sizes.update(override.get("sizes") or {})
            return CaseSpec(
                strategy,
                seed,
                override.get("dtype", dtype),
                sizes,
                override.get("values", "normal"),
                override.get("layout", "contiguous"),
            )
        return get_strategy(strategy).draw(self.schema, dtype, seed, self._numel, self._size_budget())

    def _size_budget(self) -> int:
        """Elements of the largest input a drawn case may hold: the run's budget, or the problem's."""
        assert self.schema is not None
        return min(self.budget, self.schema.max_elements or self.budget)

    def _numel(self, sizes: dict) -> int:
        """Elements of the largest input the problem's get_inputs() makes at these sizes."""
        return largest_numel(input_shapes(self.problem, sizes))

    def _held_draw(self, strategy: str, seed: int, dtype: str) -> CaseSpec:
        """A strategy's draw with every size but one (chosen by the seed) put back to the benchmark's
        own, then fitted to the element budget: what is left to try once the reference has rejected
        every free draw."""
        assert self.problem is not None and self.schema is not None
        spec = self.draw(strategy, seed, dtype)
        sizes = dict(self.schema.defaults())
        varied = random.Random(seed).choice(sorted(sizes)) if sizes else None
        if varied is not None:
            sizes[varied] = spec.sizes.get(varied, sizes[varied])
        return replace(spec, sizes=fit_budget(sizes, self.schema, self._numel, self._size_budget()))

    def _seed(self, seed: int) -> None:
        """Seed the global random generators of the CPU and the device in use. (`torch.manual_seed`
        also queues a seed for every other accelerator backend and formats a stack trace for each,
        about 1 ms of every case, and a run uses none of them.)"""
        torch.default_generator.manual_seed(seed)
        if self.device == "cuda":
            torch.cuda.manual_seed_all(seed)

    def make_inputs(self, spec: CaseSpec) -> tuple[list, list]:
        """(inputs at float64 holding the dtype-rounded values, init inputs) for one case."""
        assert self.problem is not None and self.schema is not None
        tdtype = torch_dtype(spec.dtype)
        with bound_sizes(self.problem, spec.sizes):
            self._seed(sub_seed(spec.seed, "get_inputs"))
            base = self._large_inputs_on_meta(spec)
            if base is None:
                base = self.problem.get_inputs()
            init = self.problem.get_init_inputs()
        gen = torch.Generator().manual_seed(sub_seed(spec.seed, "fill"))
        inputs = []
        for i, x in enumerate(base):
            if isinstance(x, torch.Tensor) and x.is_floating_point():
                if spec.values != "native":
                    x = fill(tuple(x.shape), spec.values, gen, tdtype, self.schema.domains.get(i, "real"))
                x = x.to(tdtype).to(torch.float64)
            inputs.append(x)
        return inputs, init

    def _large_inputs_on_meta(self, spec: CaseSpec) -> list | None:
        """`get_inputs()` on the meta device, for a case past values.LARGE_DRAW elements whose inputs
        are all floating and all refilled by the case's value class: the problem's own random
        draw is thrown away, and for a 2^31-element trigger it took about 11 s on one core. None
        (draw as usual) for every other case, so ordinary seeds keep their values. Only a trigger
        goes past the fuzz budget (2^20 elements at most), so only a trigger looks (0.1 ms a case)."""
        assert self.problem is not None
        if spec.strategy != "trigger" or spec.values == "native":
            return None
        try:
            with torch.device("meta"):
                base = self.problem.get_inputs()
        except Exception:  # noqa: BLE001 - a factory that cannot run on meta draws as usual
            return None
        tensors = [x for x in base if isinstance(x, torch.Tensor)]
        if not tensors or any(not x.is_floating_point() for x in tensors):
            return None
        return base if max(x.numel() for x in tensors) > LARGE_DRAW else None

    def run_case(self, strategy: str, seed: int, dtype: str, override: dict | None = None, repeat: int = 1) -> dict:
        """Run one fuzz case; returns a row of the `cases` table (without the submission's columns)."""
        self._begin()
        return self._with_findings(self._run_case(strategy, seed, dtype, override, repeat))

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
        decoy = not override and self._decoy_due()
        for attempt in range(SIZE_RETRIES):
            spec = self.draw(strategy, attempt_seed, dtype, override)
            row.update(dtype=spec.dtype, sizes=json.dumps(spec.sizes), values=spec.values, layout=spec.layout)
            try:
                return self._run_spec(spec, row, repeat, decoy=decoy)
            except _ReferenceRejects as rejected:
                if override:
                    return dict(row, outcome="skipped", reason=f"the float64 reference rejects this input: {rejected}")
                attempt_seed = sub_seed(seed, f"retry{attempt + 1}")
                last = str(rejected)
        for attempt in range(HELD_RETRIES):
            spec = self._held_draw(strategy, sub_seed(seed, f"held{attempt}"), dtype)
            row.update(dtype=spec.dtype, sizes=json.dumps(spec.sizes), values=spec.values, layout=spec.layout)
            try:
                return self._run_spec(spec, row, repeat, decoy=decoy)
            except _ReferenceRejects as rejected:
                last = str(rejected)
        where = self.job["problem"]["path"]
        return dict(row, outcome="skipped", reason=f"problem {where}: the float64 reference rejected every "
                    f"sampled size (last: {last})"[:500])

    def _decoy_due(self) -> bool:
        """Whether this case starts with the decoy call. On a GPU always; under the interpreter (where
        every candidate call costs milliseconds per program) on the first case after a load and every
        DECOY_EVERY-th after it: a cache keyed by pointer, id or shape is fooled on the first judged
        call it sees, and one flagged case flags the submission."""
        due = self.device == "cuda" or self.cases_run % DECOY_EVERY == 0
        self.cases_run += 1
        return due

    def _lowp(self, inputs64: list, tdtype: torch.dtype) -> list:
        """A case's inputs on the device at the test dtype (floating tensors rounded, others as they
        are). A small one is rounded on the host and uploaded without waiting (`transfers`)."""
        def one(x):
            if not isinstance(x, torch.Tensor):
                return x
            if not x.is_floating_point():
                return to_device(x, self.device)
            if x.numel() <= HOST_JUDGE_ELEMENTS:
                return to_device(x.to(tdtype), self.device)
            return x.to(self.device).to(tdtype)

        return [one(x) for x in inputs64]

    def _reference(self, inputs64: list, init: list, tdtype: torch.dtype, wseed: int,
                   lowp_inputs: list | None = None):
        """(truths, low-precision reference outputs) of a case, recording the reference's ops and
        keeping the float64 module (`model64`) for the truth's other runs. The truth is computed on
        `truth_device`, the low-precision reference (when `lowp_inputs` are given: the case's inputs
        on the device at the test dtype) on the device. Raises _ReferenceRejects when the reference
        refuses these sizes."""
        assert self.problem is not None
        device = self.truth_device
        self.ref_ops = OpRecorder()
        ref_lowp = None
        try:
            self._seed(wseed)
            ref_model = _round_parameters(self.problem.Model(*init), tdtype)
            self.model64 = copy.deepcopy(ref_model).to(device).to(torch.float64)
            with torch.no_grad():
                with self.ref_ops:
                    args = [x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs64]
                    start = time.perf_counter()
                    truth = self.model64(*args)
                    self.truth_seconds = time.perf_counter() - start  # a host run's time (a GPU run is queued)
                if lowp_inputs is not None:
                    ref_lowp = _reference_at(ref_model, lowp_inputs, self.device, tdtype)
        except Exception as exc:  # the reference itself rejects these sizes: draw again
            raise _ReferenceRejects(f"{type(exc).__name__}: {exc}"[:300]) from exc
        truths = _flatten(truth)
        if truths is None:
            raise _ReferenceRejects("the reference returned no tensor")
        lowps = _flatten(ref_lowp) if ref_lowp is not None else None
        return truths, lowps

    def _float64_run(self, inputs64: list) -> list | None:
        """The float64 reference of the case (`_reference`'s module) on other inputs; None when it
        raises."""
        assert self.model64 is not None
        xs = [x.to(self.truth_device) if isinstance(x, torch.Tensor) else x for x in inputs64]
        try:
            with torch.no_grad():
                return _flatten(self.model64(*xs))
        except Exception:  # noqa: BLE001 - the caller falls back to the plain truth
            return None

    def _term_sizes(self, inputs64: list, truths: list) -> list | None:
        """For an op whose schema says `linear` (each output a sum of inputs: a sum, a mean, a scan),
        the op on |inputs|: the size of the terms each output sums. A correct kernel's rounding
        error, and the float64 truth's own, scale with it, not with the result: a row holding
        +-1.8e19 loses its small terms in float64 too, and a kernel summing in another order is
        right where the truth is not. Non-finite sizes are 0 (those outputs are judged by class)."""
        if self.schema is None or not self.schema.linear:
            return None
        got = self._float64_run([x.abs() if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                                 for x in inputs64])
        if got is None or len(got) != len(truths):
            return None
        return [torch.where(torch.isfinite(a), a, torch.zeros((), dtype=a.dtype, device=a.device))
                if a.is_floating_point() and a.shape == t.shape else None for a, t in zip(got, truths)]

    def _structural_truths(self, inputs64: list, truths: list) -> list | None:
        """Per output, the float64 value of each element that does not depend on the case's NaN and
        Inf inputs (NaN where it does), or None when no input is non-finite or no truth is.

        A reference written densely can be NaN only through its form: causal attention as scores
        masked to -inf, softmax, then `@ v` gives 0 * NaN = NaN for a NaN in a future value that a
        kernel skipping future blocks never reads, and is right not to. An element depends on the
        non-finite inputs when the reference changes as they are replaced by +1e300 and by -1e300."""
        if all(bool(torch.isfinite(t).all()) for t in truths if t.is_floating_point()):
            return None  # the common case, and the cheaper test: outputs are checked first
        floats = [x for x in inputs64 if isinstance(x, torch.Tensor) and x.is_floating_point()]
        if all(bool(torch.isfinite(x).all()) for x in floats):
            return None
        runs = []
        for stand_in in (1e300, -1e300):
            got = self._float64_run(
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

    @staticmethod
    def _scrub(outputs: list, inputs: list) -> None:
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

    def _candidate_inputs(self, values: list, layout: str) -> list:
        """Private copies of a case's inputs for the candidate, laid out as the case says."""
        return [
            apply_layout(x.clone(), layout)
            if isinstance(x, torch.Tensor) and x.is_floating_point()
            else (x.clone() if isinstance(x, torch.Tensor) else x)
            for x in values
        ]

    def _decoy_values(self, spec: CaseSpec, tdtype: torch.dtype, name: str) -> list:
        """Inputs of the same sizes with other values (a second draw of the case's strategy)."""
        decoy = CaseSpec(spec.strategy, sub_seed(spec.seed, name), spec.dtype, spec.sizes, spec.values, spec.layout)
        return self._lowp(self.make_inputs(decoy)[0], tdtype)

    def _truth_device(self, inputs64: list, reduction_len: int) -> str:
        """Where the case's float64 truth is computed: the host for a small GPU case whose
        estimated work the host has not been measured too slow for (HOST_TRUTH_WORK), else the device."""
        sizes = [x.numel() for x in inputs64 if isinstance(x, torch.Tensor)]
        if self.device != "cuda" or not sizes or max(sizes) > HOST_JUDGE_ELEMENTS:
            return self.device
        return "cpu" if _truth_work(sizes, reduction_len) <= self.host_truth_work else self.device

    def _measured_truth(self, inputs64: list, reduction_len: int) -> None:
        """After a case's first float64 run: one on the host that took longer than
        HOST_TRUTH_SECONDS moves the rest of the case (its truth) to the device, and from then on
        the problem's cases come to the host only with the work that fits in that time at the rate
        just measured (kept for the other submissions of the problem this worker loads)."""
        if self.truth_device != "cpu" or self.device == "cpu" or self.truth_seconds <= HOST_TRUTH_SECONDS:
            return
        work = _truth_work([x.numel() for x in inputs64 if isinstance(x, torch.Tensor)], reduction_len)
        self.host_truth_work = min(self.host_truth_work, int(work * HOST_TRUTH_SECONDS / self.truth_seconds))
        self.learned_truth_work[self.job["problem"].get("problem_id")] = self.host_truth_work
        self.truth_device = self.device

    def _run_spec(self, spec: CaseSpec, row: dict, repeat: int, decoy: bool = True) -> dict:
        """The candidate runs before the reference's answer exists anywhere in the process: the
        reference first only checks that it accepts these sizes (its output is dropped), then the
        candidate runs on other values written into the very tensors of the case (a cache keyed by
        pointer, id or shape then answers for the wrong values), then on the case's values; then the
        reference computes the truth, and on a GPU the candidate runs once more on fresh copies
        (determinism: a race shows as two runs that differ).
        An explicit trigger (`override`) runs exactly as written, without the decoy call."""
        assert self.problem is not None and self.candidate is not None and self.schema is not None
        device, tdtype = self.device, torch_dtype(spec.dtype)
        inputs64, init = self.make_inputs(spec)
        row["shapes"] = json.dumps([list(x.shape) if isinstance(x, torch.Tensor) else None for x in inputs64])
        row["inputs_hash"] = inputs_hash(inputs64)
        row["reduction_len"] = self.schema.reduction_length(spec.sizes)
        self.truth_device = self._truth_device(inputs64, row["reduction_len"])
        wseed = sub_seed(spec.seed, "weights")
        checked, _ = self._reference(inputs64, init, tdtype, wseed)  # raises when it rejects these sizes
        self._measured_truth(inputs64, row["reduction_len"])
        ref_ops = set(self.ref_ops.ops)
        self._scrub(checked, inputs64)
        del checked
        lowp_inputs = self._lowp(inputs64, tdtype)
        cand_inputs = self._candidate_inputs(lowp_inputs, spec.layout)
        row["strides"] = json.dumps([list(x.stride()) if isinstance(x, torch.Tensor) else None for x in cand_inputs])
        decoy = self._decoy_values(spec, tdtype, "in-place decoy") if decoy else None
        guarded = digest(inputs64 + lowp_inputs)
        record = OpRecorder()
        start = time.perf_counter()
        try:
            self._seed(wseed)
            model = self._call(self.candidate.ModelNew, *init)
            if isinstance(model, torch.nn.Module):
                model = self._call(lambda: model.to(device).to(tdtype))
            with torch.no_grad():
                for r in range(repeat - 1):  # earlier calls on other values of the same shape
                    earlier = self._decoy_values(spec, tdtype, f"decoy{r}")
                    self._call(model, *self._candidate_inputs(earlier, spec.layout))
                if decoy is not None:
                    decoy_start = time.perf_counter()
                    _refill(cand_inputs, decoy)
                    try:
                        self._call(model, *cand_inputs)
                    except Exception:  # noqa: BLE001 - judged on the case's own values below
                        pass
                    if device == "cuda":
                        torch.cuda.synchronize()
                    start += time.perf_counter() - decoy_start
                    _refill(cand_inputs, lowp_inputs)
                before = _snapshot(cand_inputs)
                guarded_before = digest(before)
                launches = Launches.count
                out = self._call(model, *cand_inputs, record=record)
            if device == "cuda":
                torch.cuda.synchronize()
        except BaseException as exc:  # noqa: BLE001
            if isinstance(exc, KeyboardInterrupt) and os.environ.get("RESCORE_WORKER") != "1":
                raise
            return self._verdict_of(exc).row(row, start)
        row["wall_ms"] = 1e3 * (time.perf_counter() - start)
        launches = Launches.count - launches
        if digests(inputs64 + lowp_inputs, before) != [guarded, guarded_before]:
            self._found("tampers_reference", "the harness's copies of the inputs changed while the candidate ran")
            inputs64, init = self.make_inputs(spec)
            lowp_inputs = self._lowp(inputs64, tdtype)
            before = _snapshot(lowp_inputs)
        truths, lowps = self._reference(inputs64, init, tdtype, wseed, lowp_inputs)
        structural = self._structural_truths(inputs64, truths)
        terms = self._term_sizes(inputs64, truths)
        self.findings |= output_findings(list(out) if isinstance(out, (tuple, list)) else [out], cand_inputs)
        self.findings |= kernel_findings(self.job["submission"]["language"], ref_ops, record.ops, launches)
        verdict = self._judge(out, truths, lowps, cand_inputs, before, tdtype, spec, row["reduction_len"],
                              structural, terms)
        if verdict["outcome"] == "pass" and self.device == "cuda":
            # Only a GPU can race: the interpreter runs program instances one after another, and
            # memory nothing wrote is NaN in the first run already; on the CPU a rerun finds nothing.
            again = self._rerun(model, lowp_inputs, spec.layout)
            if again is not None:
                self.findings |= output_findings(_flatten(again) or [], truths + (lowps or []), "reads_reference")
                verdict = self._judge_rerun(out, again, truths, lowps, tdtype, spec, row["reduction_len"], verdict,
                                            structural, terms)
        return dict(row, **verdict)

    def _rerun(self, model, lowp_inputs: list, layout: str):
        """The candidate once more on fresh copies of the same inputs (fresh outputs are NaN-filled)."""
        inputs = self._candidate_inputs(lowp_inputs, layout)
        try:
            with torch.no_grad():
                again = self._call(model, *inputs)
            if self.device == "cuda":
                torch.cuda.synchronize()
        except BaseException as exc:  # noqa: BLE001
            if _is_cuda_failure(exc) and not cuda_context_usable():
                raise NeedsRestart(str(exc)) from exc
            if isinstance(exc, (SystemExit, KeyboardInterrupt)):
                self.findings.add("exits")
            return None
        return again

    def _judged_where(self, *groups: list | None) -> tuple:
        """The tensors of a case where they are judged: host copies on a GPU when the case is small
        (HOST_JUDGE_ELEMENTS; copied with one wait), else on the device (a truth computed on the
        host is moved there)."""
        tensors = [x for g in groups for x in g or [] if isinstance(x, torch.Tensor)]
        if self.device == "cpu":
            return groups
        if any(x.numel() > HOST_JUDGE_ELEMENTS for x in tensors):
            return tuple(None if g is None else [x.to(self.device) if isinstance(x, torch.Tensor) else x for x in g]
                         for g in groups)
        flat = iter(to_host([x for g in groups for x in g or []]))
        return tuple(None if g is None else [next(flat) for _ in g] for g in groups)

    def _judge_rerun(self, out, again, truths, lowps, tdtype, spec: CaseSpec, reduction_len: int,
                     verdict: dict, structural: list | None = None, terms: list | None = None) -> dict:
        """The second run on the same input is judged against the truth like the first. Two runs may
        differ in their last bits (a correct kernel that accumulates with atomics adds in whatever
        order the programs finish), so only a second run that fails its own judgement, or returns
        another shape, makes the case fail: `nondeterministic` (a race, or memory nothing wrote)."""
        a, b = _flatten(out), _flatten(again)
        if b is None or len(a) != len(b) or any(x.shape != y.shape for x, y in zip(a, b)):
            return dict(verdict, outcome="bad_output", reason="a second run on the same input returned another shape",
                        diagnosis="nondeterministic")
        host_a, host_b = self._judged_where(a, b)
        differ = sum(_unequal(x, y) for x, y in zip(host_a, host_b))
        if not differ:  # the same bits: the same verdict, without judging again
            return verdict
        second = self._judge(again, truths, lowps, [], [], tdtype, spec, reduction_len, structural, terms)
        if second["outcome"] == "pass":
            return verdict
        return dict(second, diagnosis="nondeterministic",
                    reason=f"nondeterministic: the first run passed, a second run on the same input differs from "
                           f"it in {differ} elements and fails: {second.get('reason', '')}"[:1000])

    def _judge(self, out, truths, lowps, cand_inputs, before, tdtype, spec: CaseSpec, reduction_len: int,
               structural: list | None = None, terms: list | None = None) -> dict:
        outs = _flatten(out)
        if outs is None or len(outs) != len(truths):
            return {
                "outcome": "bad_output",
                "reason": f"expected {len(truths)} plain tensor(s), got {type(out).__name__}",
            }
        for o, t, lp in zip(outs, truths, lowps or [None] * len(truths)):
            want_dtype = lp.dtype if lp is not None else (tdtype if t.is_floating_point() else t.dtype)
            if o.shape != t.shape:
                return {"outcome": "bad_output", "reason": f"shape {tuple(o.shape)} != {tuple(t.shape)}"}
            if o.dtype != want_dtype:
                return {"outcome": "bad_output", "reason": f"dtype {o.dtype} != {want_dtype}"}
            if o.device.type != self.device:
                return {"outcome": "bad_output", "reason": f"device {o.device} != {self.device}"}
        outs, truths, lowps, structural, terms, cand_inputs, before = self._judged_where(
            outs, truths, lowps, structural, terms, cand_inputs, before)
        truths = [_structural_truth(o, t, st) for o, t, st in zip(outs, truths, structural or [None] * len(truths))]
        for i, (x, x0) in enumerate(zip(cand_inputs, before)):
            if isinstance(x, torch.Tensor) and not _same(x, x0):
                return {"outcome": "mutated_input", "reason": f"input {i} was written by the candidate"}
        verdicts = [self._judge_one(o, t, lp, tdtype, spec, reduction_len, ts)
                    for o, t, lp, ts in zip(outs, truths, lowps or [None] * len(truths), terms or [None] * len(truths))]
        worst = next((v for v in verdicts if v["outcome"] != "pass"), verdicts[0])
        ratios: dict[str, float] = {}
        for v in verdicts:
            for name, r in v.pop("ratios").items():
                ratios[name] = max(ratios.get(name, 0.0), r)
        worst["policy_ratios"] = json.dumps(ratios, sort_keys=True)
        return worst

    def _judge_one(self, o, t, lp, tdtype, spec: CaseSpec, reduction_len: int,
                   terms: torch.Tensor | None = None) -> dict:
        if not o.is_floating_point():
            wrong = int((o.cpu() != t.to(o.dtype).cpu()).sum())
            r = 0.0 if not wrong else float("inf")
            return {"outcome": "mismatch" if wrong else "pass", "n_elements": o.numel(), "n_mismatch": wrong,
                    "max_abs_err": r, "reason": f"{wrong} of {o.numel()} integer elements differ" if wrong else "",
                    "diagnosis": "scattered" if wrong else "",
                    "ratios": {n: r for n in [*FIXED_POLICIES, "reference-lowp", "calibrated-base"]}}
        lowp_err = max_finite_error(lp, t) if lp is not None else 0.0
        atol, rtol, slack = DEFAULT_POLICY.bound(spec.dtype, lowp_err, self.job["problem"].get("tolerance"))
        if terms is not None:  # a linear op: rounding error in proportion to the terms summed
            slack = slack + DEFAULT_POLICY.terms_slack(spec.dtype, terms)
        cmp = compare(o, t, tdtype, atol, rtol, slack, lp)
        return {
            "outcome": cmp.outcome,
            "reason": "" if cmp.outcome == "pass" else cmp.message(),
            "diagnosis": cmp.diagnosis,
            "max_abs_err": cmp.max_abs_err,
            "max_rel_err": cmp.max_rel_err,
            "err_ulp": cmp.err_ulp,
            "n_elements": cmp.n_elements,
            "n_mismatch": cmp.n_mismatch + cmp.n_nonfinite,
            "first_mismatch": json.dumps(cmp.first_mismatch) if cmp.first_mismatch is not None else None,
            "atol": atol,
            "rtol": rtol,
            "bound": cmp.slack,
            "ref_lowp_err": lowp_err,
            "ref_max_abs": max_abs_finite(t),
            "ratios": policy_ratios(o, t, spec.dtype, slack, reduction_len, cmp.n_nonfinite > 0, (atol, rtol)),
        }


def _truth_work(sizes: list[int], reduction_len: int) -> int:
    """A case's estimated float64 work: its largest input's elements x its reduction length."""
    return max(sizes) * max(reduction_len, 1)


def _structural_truth(out: torch.Tensor, truth: torch.Tensor, structural: torch.Tensor | None) -> torch.Tensor:
    """The truth `out` is judged by: where the reference is non-finite only through its form (see
    `_structural_truths`) and `out` is finite, the value that does not depend on the non-finite
    inputs; a non-finite `out` there still matches the reference's own NaN or Inf."""
    if structural is None or not out.is_floating_point() or not truth.is_floating_point():
        return truth
    free = torch.isfinite(structural) & ~torch.isfinite(truth) & torch.isfinite(out)
    return torch.where(free, structural, truth) if bool(free.any()) else truth


def _round_parameters(model, dtype: torch.dtype):
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


def _reference_at(model, inputs: list, device: str, dtype: torch.dtype):
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


class _ReferenceFailed(Exception):
    """The problem's own code (reference, input factory) failed in the fixed-shape check."""


def _blaming_reference(fn):
    """`fn` (problem code), its failures re-raised as _ReferenceFailed, so that they are never
    taken for the candidate's."""

    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except _ReferenceFailed:
            raise
        except Exception as exc:
            raise _ReferenceFailed(f"{type(exc).__name__}: {exc}"[:300]) from exc

    return call


def _check_problem(problem: types.ModuleType) -> None:
    """Raise a clear error when the problem's factories do not return lists of inputs."""
    for name in ("get_init_inputs", "get_inputs"):
        fn = getattr(problem, name, None)
        if not callable(fn):
            raise TypeError(f"{name} is missing or not a function")
        torch.manual_seed(0)
        got = fn()
        if not isinstance(got, (list, tuple)):
            raise TypeError(f"{name}() returned {type(got).__name__}, not a list of inputs")


class _ReferenceRejects(Exception):
    """The float64 reference raised on these sizes: the sizes are outside the problem's domain."""


def poison_fresh_memory() -> None:
    """Make every fresh allocation NaN (integers: their max), so that output a kernel never wrote is
    caught, and caught the same way on every run (garbage would make replays disagree)."""
    import warnings

    from torch.utils import deterministic

    torch.use_deterministic_algorithms(True, warn_only=True)
    deterministic.fill_uninitialized_memory = True
    warnings.filterwarnings("ignore", message=".*deterministic.*")


def _refill(tensors: list, values: list) -> None:
    """Write `values` into `tensors` in place (same objects, same addresses), where shapes agree."""
    with torch.no_grad():
        for t, v in zip(tensors, values):
            if isinstance(t, torch.Tensor) and isinstance(v, torch.Tensor) and t.shape == v.shape:
                t.copy_(v)


_SIZE = re.compile(r"(?:tried to allocate|unable to allocate)\s+([\d.]+)\s*(bytes|[KMGTP]i?B)", re.IGNORECASE)
_UNITS = {"bytes": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "pb": 1e15,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "pib": 2**50}


def _requested_bytes(text: str) -> int | None:
    """The size of a failed allocation, from torch's (CPU or CUDA) or numpy's message."""
    m = _SIZE.search(text)
    if not m:
        return None
    return int(float(m.group(1)) * _UNITS.get(m.group(2).lower(), 1))


class _Watched:
    """A model as the fixed-shape check sees it: each call into candidate code goes through the
    executor's checks, and the ops it runs are recorded. The check's own logic is untouched.

    The reference's wrapper (no executor) keeps its last outputs in `last`, so that a candidate
    that returns the reference's own output tensor (found in memory) is noticed."""

    def __init__(self, model, executor: Executor | None, record: OpRecorder, last: list | None = None):
        self._model, self._executor, self._record = model, executor, record
        self._last = last if last is not None else []

    def to(self, *args, **kwargs) -> _Watched:
        if self._executor is None:
            self._model = self._model.to(*args, **kwargs)
        else:
            self._model = self._executor._call(lambda: self._model.to(*args, **kwargs))
        return self

    def __call__(self, *args, **kwargs):
        if self._executor is None:
            try:
                with self._record:
                    out = self._model(*args, **kwargs)
            except Exception as exc:
                raise _ReferenceFailed(f"{type(exc).__name__}: {exc}"[:300]) from exc
            self._last[:] = _flatten(out) or []
            return out
        guarded = digest(self._last)
        out = self._executor._call(lambda: self._model(*args, **kwargs), record=self._record)
        if digest(self._last) != guarded:
            self._executor._found("tampers_reference", "the reference's output changed while the candidate ran")
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        self._executor.findings |= output_findings(outs, list(args))
        self._executor.findings |= output_findings(outs, self._last, "reads_reference")
        return out


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
        token, msg = packet if len(packet) == 2 and isinstance(packet[0], bytes) else (None, packet)
        kind = msg[0]
        if kind == "stop":
            return
        confine.refresh_cpu_limit()
        status = "ok"
        try:
            if kind == "load":
                result = executor.load(msg[1])
            elif kind == "fixed":
                result = executor.run_fixed(*msg[1:])
            elif kind == "case":
                result = executor.run_case(**msg[1])
            elif kind == "time":
                result = executor.run_timing(**msg[1])
            else:
                result = {"outcome": "crash", "reason": f"unknown message {kind!r}"}
        except NeedsRestart as exc:
            status, result = "restart", {"outcome": "crash", "reason": str(exc)}
        except BaseException as exc:  # noqa: BLE001 - everything is reported, the loop goes on
            result = {"outcome": "crash", "reason": f"harness: {type(exc).__name__}: {exc}"[:500]}
        executor._police(None)  # whatever ran last, the answer is sent by an intact harness
        if executor.restart:
            status = "restart"
        result["_rss"] = _rss()
        conn.send((token, status, result) if token is not None else (status, result))
        sys.stdout.flush()
        if status == "restart":
            return


def _rss() -> int:
    """Resident memory of this process now, in bytes."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0
