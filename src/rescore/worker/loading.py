"""Loading a job into the worker: the problem module and the schema it fuzzes, the candidate module
(imported through the guard, as any call into candidate code), the prebuilt CUDA extension, and
dropping the previous job's modules. Each failure becomes a verdict that every case of the job carries.
"""

from __future__ import annotations

import gc
import linecache
import sys
import types

import torch

from rescore.model.outcomes import Outcome
from rescore.model.schema import OpSchema
from rescore.model.sources import source_defect
from rescore.runtime.modules import load_module
from rescore.worker.exceptions import Verdict, classify_exception, refused_by_the_hook
from rescore.worker.guard import Guard
from rescore.worker.job import Loaded
from rescore.worker.prebuilt import activate, recorded_failure
from rescore.worker.problem_schema import build_schema
from rescore.worker.protocol import ALONE_KEY
from rescore.worker.usage import reference_findings


def forget_previous() -> None:
    """Drop the previous job's modules, so a worker that serves thousands stays small (the caller
    has dropped its own references to them first)."""
    for name in [n for n in sys.modules if n.startswith(("rescore_candidate_", "rescore_problem_"))]:
        del sys.modules[name]
    try:
        from triton.runtime.interpreter import InterpretedFunction

        InterpretedFunction.rewritten_fn.clear()
    except (ImportError, AttributeError):  # pragma: no cover
        pass
    linecache.clearcache()
    gc.collect()


def load_problem(problem: dict) -> tuple[types.ModuleType, OpSchema]:
    """The job's problem module and the schema it fuzzes: the explicit one where the job has one,
    else the one inferred from the module; with the relations among its sizes and each input's
    domain (`problem_schema.build_schema`)."""
    defect = source_defect(problem["source"], problem["path"], "problem")
    if defect:
        raise ValueError(defect)
    module = load_module(problem["source"], problem["path"], "problem")
    check_problem(module)
    return module, build_schema(module, problem["source"], problem.get("schema"))


def check_problem(problem: types.ModuleType) -> None:
    """Raise a clear error when the problem's factories do not return lists of inputs."""
    for name in ("get_init_inputs", "get_inputs"):
        fn = getattr(problem, name, None)
        if not callable(fn):
            raise TypeError(f"{name} is missing or not a function")
        torch.manual_seed(0)
        got = fn()
        if not isinstance(got, (list, tuple)):
            raise TypeError(f"{name}() returned {type(got).__name__}, not a list of inputs")


def load_candidate(guard: Guard, sub: dict) -> tuple[types.ModuleType | None, Verdict | None]:
    """The candidate module, imported through the guard; or None and why it could not be loaded."""
    try:
        defect = source_defect(sub["source"], sub["path"])
        if defect:
            raise ImportError(defect)
        candidate = guard.call(load_module, sub["source"], sub["path"], "candidate")
        new = getattr(candidate, "ModelNew", None)
        if new is None:
            raise AttributeError(f"{sub['path']} defines no ModelNew")
        if not callable(new):
            raise TypeError(f"{sub['path']}: ModelNew is a {type(new).__name__}, not a class")
        guard.findings |= reference_findings(candidate, guard.loaded.problem)
        return candidate, None
    except BaseException as exc:  # noqa: BLE001
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            guard.findings.add("exits")
            return None, Verdict(Outcome.CRASH, f"{type(exc).__name__} raised while importing the submission")
        verdict = classify_exception(exc, sub["path"], reference_ran=False)
        if verdict.outcome == Outcome.OOM or refused_by_the_hook(verdict, guard.findings):
            return None, verdict  # out of memory: loaded again alone (`settle_load`); a refused call: `skipped`
        return None, Verdict(Outcome.COMPILE_ERROR, f"{type(exc).__name__}: {exc}"[:500])


def settle_load(loaded: Loaded, answer: dict) -> dict:
    """A load that ran out of memory answers `oom`, so that the parent loads it again with the device
    to itself; the job keeps a `skipped` verdict for its cases in case that fails too."""
    error = loaded.load_error
    if error is None or error.outcome != Outcome.OOM:
        return answer
    loaded.load_error = Verdict(Outcome.SKIPPED, f"loading the submission ran out of memory, also with the device "
                                f"to itself: {error.reason}"[:500])
    return dict(answer, outcome=Outcome.OOM, reason=error.reason, **{ALONE_KEY: error.alone})


def use_prebuild(source: str, guard: Guard) -> str | None:
    """Point torch's JIT build at the prebuilt folder of this source (`prebuilt.py`); returns the
    recorded compiler error when the prebuild already failed on it."""
    failed = recorded_failure(source)
    if failed:
        return failed
    folder = activate(source)
    guard.allow(str(folder))
    return None


def schema_dict(schema: OpSchema | None) -> dict:
    """The schema a job fuzzes, as plain data (the answer to a load)."""
    if schema is None:
        return {}
    return {
        "dims": [[d.name, d.default, d.lo, d.hi] for d in schema.dims],
        "reduction": list(schema.reduction),
        "inferred": schema.inferred,
        "derived": dict(schema.derived),
        "relations": [r.as_list() for r in schema.relations],
        "input_domains": [d.as_dict() for d in schema.input_domains],
    }


def cannot_run(loaded: Loaded, device: str, dtype: str) -> Verdict | None:
    """Why no case of the loaded job runs at `dtype` on `device`, or None when it can."""
    if loaded.load_error is not None:
        return loaded.load_error
    sub = loaded.job["submission"]
    if dtype == "bfloat16" and device == "cpu" and sub["language"] == "triton":
        return Verdict(
            Outcome.SKIPPED,
            "bfloat16 under the Triton interpreter is stored as raw 16-bit integers;"
            " results would be wrong: run on a GPU",
        )
    return None
