"""Runs cases inside a worker process: loads one problem and one candidate, makes the inputs of a
case, runs the float64 reference, the reference at the test dtype and the candidate, and judges.

Nothing here talks to the results: the worker sends plain dicts back to the parent (`sandbox.py`).
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import platform
import sys
import time
import traceback
import types
from dataclasses import dataclass

import torch

from rescore.inputs.layout import apply_layout
from rescore.inputs.seeds import sub_seed
from rescore.inputs.strategies import CaseSpec, get_strategy
from rescore.inputs.values import fill
from rescore.oracle.compare import compare, max_finite_error
from rescore.oracle.fixed import kernelbench_check
from rescore.oracle.tolerance import DEFAULT_POLICY, FIXED_POLICIES, policy_ratios, torch_dtype
from rescore.problem import load_module, module_int_names
from rescore.schema import OpSchema, bound_sizes, infer_schema, input_shapes, largest_numel, schema_from_spec

REFUSALS = (ValueError, TypeError, NotImplementedError)
SIZE_RETRIES = 6


class NeedsRestart(Exception):
    """The worker's device state is no longer trustworthy (CUDA error): restart after this case."""


@dataclass
class Verdict:
    outcome: str
    reason: str = ""


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
            h.update(f"{tuple(x.shape)}{x.dtype}".encode())
            h.update(x.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
        else:
            h.update(repr(x).encode())
    return h.hexdigest()[:16]


def _is_cuda_failure(exc: BaseException) -> bool:
    text = f"{type(exc).__name__}: {exc}"
    return any(
        s in text for s in ("CUDA error", "illegal memory access", "CUDA_ERROR", "cudaError", "device-side assert")
    )


def _is_oom(exc: BaseException) -> bool:
    return isinstance(exc, (torch.cuda.OutOfMemoryError, MemoryError)) or "out of memory" in str(exc)


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


def classify_exception(exc: BaseException, candidate_file: str | None) -> Verdict:
    """Map an exception raised while running the candidate to an outcome (DESIGN.md's taxonomy)."""
    name = type(exc).__name__
    module = type(exc).__module__ or ""
    text = f"{name}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"[:500]
    if _is_oom(exc):
        return Verdict("oom", text)
    if _is_cuda_failure(exc):
        return Verdict("crash", text + _where(exc))
    if module.startswith("triton") and ("Compilation" in name or "OutOfResources" in name):
        return Verdict("compile_error", text)
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


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point():
        return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())
    return bool(torch.equal(a, b))


class Executor:
    """One problem + one candidate, loaded once, run for many cases (a fresh process costs seconds)."""

    def __init__(self, device: str, budget: int):
        self.device = device
        self.budget = budget
        self.versions = versions(device)
        self.problem: types.ModuleType | None = None
        self.candidate: types.ModuleType | None = None
        self.load_error: Verdict | None = None
        self.schema: OpSchema | None = None
        self.job: dict = {}

    # -- loading ---------------------------------------------------------------------------------
    def load(self, job: dict) -> dict:
        """Load the job's problem and candidate; returns the schema it will fuzz (as plain data)."""
        self.job = job
        self.problem = self.candidate = None
        self.load_error = None
        problem = job["problem"]
        try:
            self.problem = load_module(problem["source"], problem["path"], "problem")
            sizes = module_int_names(problem["source"])
            inferred = infer_schema(self.problem, sizes)
            if problem.get("schema"):
                explicit = schema_from_spec(problem["schema"], sizes, self.problem)
                domains = dict(inferred.domains)
                domains.update(explicit.domains)
                self.schema = OpSchema(
                    explicit.dims, explicit.reduction, domains, explicit.max_elements, False, explicit.family
                )
            else:
                self.schema = inferred
        except BaseException as exc:  # noqa: BLE001 - a broken problem is recorded, not raised
            self.load_error = Verdict(
                "skipped", f"problem {problem['path']} could not be loaded: {type(exc).__name__}: {exc}"[:500]
            )
            return {}
        sub = job["submission"]
        if sub["language"] == "cuda" and self.device != "cuda":
            self.load_error = Verdict("skipped", "CUDA C submission (load_inline) needs a GPU; run on a CUDA device")
            return self._schema_dict()
        try:
            self.candidate = load_module(sub["source"], sub["path"], "candidate")
            if not hasattr(self.candidate, "ModelNew"):
                raise AttributeError(f"{sub['path']} defines no ModelNew")
        except BaseException as exc:  # noqa: BLE001
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                self.load_error = Verdict("crash", f"{type(exc).__name__} raised while importing the submission")
            else:
                self.load_error = Verdict("compile_error", f"{type(exc).__name__}: {exc}"[:500])
        return self._schema_dict()

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
        start = time.perf_counter()
        try:
            result = kernelbench_check(self.problem, self.candidate, self.device, dtype, profile)
        except BaseException as exc:  # noqa: BLE001
            v = self._verdict_of(exc)
            return dict(row, outcome=v.outcome, reason=v.reason, wall_ms=1e3 * (time.perf_counter() - start))
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
        v = classify_exception(exc, self.candidate_file)
        if v.outcome == "crash" and _is_cuda_failure(exc):
            raise NeedsRestart(v.reason) from exc
        return v

    def draw(self, strategy: str, seed: int, dtype: str, override: dict | None = None) -> CaseSpec:
        """The CaseSpec of a case: from its strategy and seed, or from an explicit trigger."""
        assert self.problem is not None and self.schema is not None
        budget = min(self.budget, self.schema.max_elements or self.budget)

        def numel(sizes: dict) -> int:
            return largest_numel(input_shapes(self.problem, sizes))

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
        return get_strategy(strategy).draw(self.schema, dtype, seed, numel, budget)

    def make_inputs(self, spec: CaseSpec) -> tuple[list, list]:
        """(inputs at float64 holding the dtype-rounded values, init inputs) for one case."""
        assert self.problem is not None and self.schema is not None
        tdtype = torch_dtype(spec.dtype)
        with bound_sizes(self.problem, spec.sizes):
            torch.manual_seed(sub_seed(spec.seed, "get_inputs"))
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

    def run_case(self, strategy: str, seed: int, dtype: str, override: dict | None = None, repeat: int = 1) -> dict:
        """Run one fuzz case; returns a row of the `cases` table (without the submission's columns)."""
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
        attempt_seed = seed
        for attempt in range(SIZE_RETRIES):
            spec = self.draw(strategy, attempt_seed, dtype, override)
            row.update(dtype=spec.dtype, sizes=json.dumps(spec.sizes), values=spec.values, layout=spec.layout)
            try:
                return self._run_spec(spec, row, repeat)
            except _ReferenceRejects as rejected:
                if override:
                    return dict(row, outcome="skipped", reason=f"the float64 reference rejects this input: {rejected}")
                attempt_seed = sub_seed(seed, f"retry{attempt + 1}")
        return dict(row, outcome="skipped", reason="the float64 reference rejected every sampled size")

    def _run_spec(self, spec: CaseSpec, row: dict, repeat: int) -> dict:
        assert self.problem is not None and self.candidate is not None and self.schema is not None
        device, tdtype = self.device, torch_dtype(spec.dtype)
        inputs64, init = self.make_inputs(spec)
        row["shapes"] = json.dumps([list(x.shape) if isinstance(x, torch.Tensor) else None for x in inputs64])
        row["inputs_hash"] = inputs_hash(inputs64)
        row["reduction_len"] = self.schema.reduction_length(spec.sizes)
        wseed = sub_seed(spec.seed, "weights")
        # The reference, in float64 and at the test dtype, on contiguous inputs.
        try:
            torch.manual_seed(wseed)
            ref_model = self.problem.Model(*init)
            with torch.no_grad():
                truth = ref_model_out = (
                    copy.deepcopy(ref_model)
                    .to(device)
                    .to(torch.float64)(*[x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs64])
                )
                lowp_inputs = [
                    x.to(device).to(tdtype)
                    if isinstance(x, torch.Tensor) and x.is_floating_point()
                    else (x.to(device) if isinstance(x, torch.Tensor) else x)
                    for x in inputs64
                ]
                ref_lowp = _reference_at(ref_model, lowp_inputs, device, tdtype)
        except Exception as exc:  # the reference itself rejects these sizes: draw again
            raise _ReferenceRejects(f"{type(exc).__name__}: {exc}"[:300]) from exc
        truths = _flatten(ref_model_out)
        if truths is None:
            raise _ReferenceRejects("the reference returned no tensor")
        lowps = _flatten(ref_lowp) if ref_lowp is not None else None
        del truth
        # The candidate, at the test dtype, on the case's layout.
        cand_inputs = [
            apply_layout(x, spec.layout) if isinstance(x, torch.Tensor) and x.is_floating_point() else x
            for x in lowp_inputs
        ]
        row["strides"] = json.dumps([list(x.stride()) if isinstance(x, torch.Tensor) else None for x in cand_inputs])
        before = _snapshot(cand_inputs)
        start = time.perf_counter()
        try:
            torch.manual_seed(wseed)
            model = self.candidate.ModelNew(*init)
            if isinstance(model, torch.nn.Module):
                model = model.to(device).to(tdtype)
            with torch.no_grad():
                for r in range(repeat - 1):  # earlier calls on other values of the same shape
                    decoy = CaseSpec(
                        spec.strategy,
                        sub_seed(spec.seed, f"decoy{r}"),
                        spec.dtype,
                        spec.sizes,
                        spec.values,
                        spec.layout,
                    )
                    decoy_inputs, _ = self.make_inputs(decoy)
                    model(
                        *[
                            apply_layout(x.to(device).to(tdtype), spec.layout)
                            if isinstance(x, torch.Tensor) and x.is_floating_point()
                            else (x.to(device) if isinstance(x, torch.Tensor) else x)
                            for x in decoy_inputs
                        ]
                    )
                out = model(*cand_inputs)
            if device == "cuda":
                torch.cuda.synchronize()
        except BaseException as exc:  # noqa: BLE001
            if isinstance(exc, KeyboardInterrupt) and os.environ.get("RESCORE_WORKER") != "1":
                raise
            v = self._verdict_of(exc)
            return dict(row, outcome=v.outcome, reason=v.reason, wall_ms=1e3 * (time.perf_counter() - start))
        row["wall_ms"] = 1e3 * (time.perf_counter() - start)
        verdict = self._judge(out, truths, lowps, cand_inputs, before, tdtype, spec, row["reduction_len"])
        if verdict["outcome"] == "pass":
            again = self._rerun(model, lowp_inputs, spec.layout)
            if again is not None:
                verdict = self._compare_runs(out, again, verdict)
        return dict(row, **verdict)

    def _rerun(self, model, lowp_inputs: list, layout: str):
        """The candidate once more on fresh copies of the same inputs (fresh outputs are NaN-filled)."""
        inputs = [apply_layout(x.clone(), layout) if isinstance(x, torch.Tensor) and x.is_floating_point()
                  else x for x in lowp_inputs]
        try:
            with torch.no_grad():
                again = model(*inputs)
            if self.device == "cuda":
                torch.cuda.synchronize()
        except BaseException as exc:  # noqa: BLE001
            if _is_cuda_failure(exc):
                raise NeedsRestart(str(exc)) from exc
            return None
        return again

    @staticmethod
    def _compare_runs(first, second, verdict: dict) -> dict:
        """Two runs on the same input must agree bit for bit (NaN equals NaN); else it is a failure."""
        a, b = _flatten(first), _flatten(second)
        if b is None or len(a) != len(b) or any(x.shape != y.shape for x, y in zip(a, b)):
            return dict(verdict, outcome="bad_output", reason="a second run on the same input returned another shape",
                        diagnosis="nondeterministic")
        differ = sum(int((~((x == y) | (torch.isnan(x) & torch.isnan(y)))).sum()) if x.is_floating_point()
                     else int((x != y).sum()) for x, y in zip(a, b))
        if differ:
            return dict(verdict, outcome="mismatch", diagnosis="nondeterministic", n_mismatch=differ,
                        reason=f"nondeterministic: two runs on the same input differ in {differ} elements "
                               "(a race, or memory nothing wrote)")
        return verdict

    def _judge(self, out, truths, lowps, cand_inputs, before, tdtype, spec: CaseSpec, reduction_len: int) -> dict:
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
        for i, (x, x0) in enumerate(zip(cand_inputs, before)):
            if isinstance(x, torch.Tensor) and not _same(x, x0):
                return {"outcome": "mutated_input", "reason": f"input {i} was written by the candidate"}
        verdicts = [self._judge_one(o, t, lp, tdtype, spec, reduction_len)
                    for o, t, lp in zip(outs, truths, lowps or [None] * len(truths))]
        worst = next((v for v in verdicts if v["outcome"] != "pass"), verdicts[0])
        ratios: dict[str, float] = {}
        for v in verdicts:
            for name, r in v.pop("ratios").items():
                ratios[name] = max(ratios.get(name, 0.0), r)
        worst["policy_ratios"] = json.dumps(ratios, sort_keys=True)
        return worst

    def _judge_one(self, o, t, lp, tdtype, spec: CaseSpec, reduction_len: int) -> dict:
        if not o.is_floating_point():
            wrong = int((o.cpu() != t.to(o.dtype).cpu()).sum())
            r = 0.0 if not wrong else float("inf")
            return {"outcome": "mismatch" if wrong else "pass", "n_elements": o.numel(), "n_mismatch": wrong,
                    "max_abs_err": r, "reason": f"{wrong} of {o.numel()} integer elements differ" if wrong else "",
                    "diagnosis": "scattered" if wrong else "",
                    "ratios": {n: r for n in [*FIXED_POLICIES, "reference-lowp", "calibrated-base"]}}
        lowp_err = max_finite_error(lp, t) if lp is not None else 0.0
        atol, rtol, slack = DEFAULT_POLICY.bound(spec.dtype, lowp_err, self.job["problem"].get("tolerance"))
        cmp = compare(o, t, tdtype, atol, rtol, slack, lp)
        finite_t = t[torch.isfinite(t)]
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
            "bound": slack,
            "ref_lowp_err": lowp_err,
            "ref_max_abs": float(finite_t.abs().max()) if finite_t.numel() else 0.0,
            "ratios": policy_ratios(o, t, spec.dtype, slack, reduction_len, cmp.n_nonfinite > 0),
        }


def _reference_at(model, inputs: list, device: str, dtype: torch.dtype):
    """The reference as a correct kernel at `dtype` computes it: half types accumulate in float32,
    so the module runs in float32 on the dtype-rounded inputs and its output is rounded to `dtype`."""
    compute = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    args = [x.to(compute) if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
    try:
        out = model.to(device).to(compute)(*args)
    except Exception:
        return None
    if isinstance(out, torch.Tensor):
        return out.to(dtype) if out.dtype == compute else out
    if isinstance(out, (tuple, list)):
        return type(out)(o.to(dtype) if isinstance(o, torch.Tensor) and o.dtype == compute else o for o in out)
    return out


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


def main_loop(conn, device: str, budget: int) -> None:  # pragma: no cover - exercised through sandbox
    """The worker: receive jobs and cases over `conn`, answer each with a row."""
    os.environ["RESCORE_WORKER"] = "1"
    poison_fresh_memory()
    executor = Executor(device, budget)
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        kind = msg[0]
        if kind == "stop":
            return
        try:
            if kind == "load":
                result = executor.load(msg[1])
            elif kind == "fixed":
                result = executor.run_fixed(*msg[1:])
            elif kind == "case":
                result = executor.run_case(**msg[1])
            else:
                result = {"outcome": "crash", "reason": f"unknown message {kind!r}"}
            conn.send(("ok", result))
        except NeedsRestart as exc:
            conn.send(("restart", {"outcome": "crash", "reason": str(exc)}))
            return
        except BaseException as exc:  # noqa: BLE001 - everything is reported, the loop goes on
            conn.send(("ok", {"outcome": "crash", "reason": f"harness: {type(exc).__name__}: {exc}"[:500]}))
        sys.stdout.flush()
