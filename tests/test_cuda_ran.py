"""CUDA that never ran, reported as such: the worker's record of each `load_inline` call (a build that
fails into a PyTorch fallback, a library whose functions are called or not), the prebuild's record of
a failed call the submission caught, and the tables that carry it (`cuda_ran` in cases and
illusion, the `cuda_never_ran` tier, the gathered builds table). On the CPU `load_inline` of CUDA
cannot run, so torch's `load_inline` is replaced by stand-ins, as in tests/test_prebuilt.py."""

from __future__ import annotations

import functools
import importlib.util
import json
import types

import pandas as pd
import pytest
import torch
from conftest import REPO
from torch.utils import cpp_extension

from rescore.analysis.cuda_usage import gathered_builds
from rescore.analysis.rescored import rescored_table
from rescore.analysis.severity import CUDA_NEVER_RAN
from rescore.analysis.study import illusion_table
from rescore.engine import cuda_build
from rescore.model.builds import BuildStatus
from rescore.runtime.extensions import MARKER, build_key, call_fingerprint
from rescore.worker import prebuilt
from rescore.worker.usage import ExtensionUse, cuda_columns

FALLBACK = REPO / "tests" / "fixtures" / "hacks_gpu" / "build_fallback.py"


def load_inline(name, cpp_sources, cuda_sources=None, functions=None, extra_cflags=None, extra_cuda_cflags=None,
                verbose=False, build_directory=None, with_cuda=None, is_python_module=True):
    """torch's load_inline as far as these tests need it: the binding it generates for `functions`
    collides with a PYBIND11_MODULE of the source's own, as nvcc would report; else a module whose
    functions stand for the compiled ones (each computes relu(x) * 2)."""
    if functions and "PYBIND11_MODULE" in (cuda_sources or ""):
        raise RuntimeError(f"Error building extension '{name}': main.cpp:33:1: error: redefinition of "
                           f"'PyObject* PyInit_{name}()'")
    if not is_python_module:
        return f"/builds/{name}/{name}.so"
    module = types.ModuleType(name)
    for fn in functions or []:
        setattr(module, fn, lambda x: torch.relu(x) * 2.0)
    return module


@pytest.fixture
def hooked(tmp_path, monkeypatch):
    """The worker's hook around the stand-in, pointed at a fresh folder, its records empty."""
    monkeypatch.setattr(prebuilt.PrebuiltState, "active", None)
    monkeypatch.setattr(prebuilt.PrebuiltState, "built", {})
    monkeypatch.setattr(cpp_extension, "load_inline", load_inline)
    monkeypatch.setattr(cpp_extension, "load", cpp_extension.load)  # activate wraps it: restored afterwards
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "before"))
    ExtensionUse.reset()
    yield prebuilt.activate(FALLBACK.read_text(), tmp_path)
    ExtensionUse.reset()


def import_candidate(path, name: str = "rescore_candidate_cuda_test") -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def case(model, x: torch.Tensor | None = None) -> dict:
    """One case as the executor runs it: construction, the call, then the CUDA columns of its row."""
    calls = ExtensionUse.calls
    out = model()(x) if x is not None else model()
    return cuda_columns({"outcome": "pass", "out": out}, "cuda", calls)


def test_a_build_that_fails_into_a_pytorch_fallback_never_ran_its_cuda(hooked, capsys):
    """The PYBIND11_MODULE + functions= fixture (tests/fixtures/hacks_gpu/build_fallback.py): the build
    fails, the submission catches it and answers with PyTorch. Its answer is right; its row says that
    its CUDA never ran, and why."""
    candidate = import_candidate(FALLBACK)
    assert candidate.ext is None and "Failed to compile CUDA extension" in capsys.readouterr().out
    x = torch.randn(4, 16)
    row = case(candidate.ModelNew, x)
    assert torch.equal(row["out"], torch.relu(x) * 2.0)
    assert (row["cuda_ran"], row["cuda_build"]) == ("no", "compile_failed")
    [(status, error)] = ExtensionUse.failed
    assert status == "compile_failed" and "redefinition of 'PyObject* PyInit_rescore_build_fallback()'" in error
    # the case row keeps the compiler's words: the builds table has them where the prebuild saw no build
    assert "redefinition of 'PyObject* PyInit_rescore_build_fallback()'" in row["cuda_build_error"]


def test_a_library_whose_functions_are_called_ran_its_cuda_and_one_never_called_did_not(hooked, tmp_path):
    module = 'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n    m.def("relu2", &relu2, "relu(x) * 2");\n}\n'
    source = FALLBACK.read_text()
    assert module in source
    (tmp_path / "called.py").write_text(source.replace(module, ""))  # functions= alone: the build succeeds
    candidate = import_candidate(tmp_path / "called.py")
    assert candidate.ext is not None and getattr(candidate.ext.relu2, "_rescore_counted", False)
    x = torch.randn(4, 16)
    row = case(candidate.ModelNew, x)
    assert (row["cuda_ran"], row["cuda_build"]) == ("yes", "built") and torch.equal(row["out"], torch.relu(x) * 2)
    idle = case(candidate.ModelNew)  # constructed, never called: nothing of its library ran in this case
    assert (idle["cuda_ran"], idle["cuda_build"]) == ("no", "not_called")
    assert cuda_columns({"outcome": "pass"}, "triton", 0) == {"outcome": "pass"}  # not a CUDA submission
    assert "cuda_ran" not in cuda_columns({"outcome": "skipped"}, "cuda", 0)  # never reached the candidate


def test_a_library_of_torch_ops_cannot_be_counted(hooked):
    ExtensionUse.reset()
    assert cpp_extension.load_inline("ops", "", functions=["f"], is_python_module=False).endswith("ops.so")
    row = cuda_columns({"outcome": "pass"}, "cuda", 0)
    assert (row["cuda_ran"], row["cuda_build"]) == ("unknown", "loaded")
    ExtensionUse.reset()
    assert cuda_columns({"outcome": "compile_error"}, "cuda", 0)["cuda_build"] == "compile_failed"  # at load


def test_a_build_the_prebuild_saw_fail_is_not_compiled_again(hooked):
    """The prebuild records the failed call (its fingerprint) even when the submission caught it; the
    worker raises the same error at once instead of compiling it again."""
    kwargs = dict(cpp_sources="x", cuda_sources="PYBIND11_MODULE", functions=["f"])
    fingerprint = call_fingerprint(load_inline, ("ext",), kwargs)
    record = {"ok": True, "key": build_key(), "calls": [], "loaded": [],
              "failures": [["ext", fingerprint, "compile_failed", "main.cpp:3:1: error: redefinition"]]}
    (hooked / MARKER).parent.mkdir(parents=True, exist_ok=True)
    (hooked / MARKER).write_text(json.dumps(record))

    @functools.wraps(load_inline)  # torch's signature: the call's fingerprint is the prebuild's
    def never(*args, **kwargs):
        raise AssertionError("compiled again")

    wrapped = prebuilt._prebuilt(never)
    with pytest.raises(RuntimeError, match="not compiled again.*redefinition"):
        wrapped("ext", **kwargs)
    assert ExtensionUse.failed[-1][0] == "compile_failed"


def test_the_prebuild_records_a_failed_call_the_submission_caught(tmp_path, monkeypatch, capsys):
    """The build process imports the submission: its import succeeds (the failure was caught), and its
    record says which call failed, how, and with the compiler's error; the row's status follows."""
    monkeypatch.setattr(cpp_extension, "load_inline", load_inline)
    monkeypatch.setattr(cpp_extension, "load", cpp_extension.load)
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    (tmp_path / "submission.py").write_text(FALLBACK.read_text())
    cuda_build._import_for_build(str(tmp_path / "submission.py"))
    record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    [[name, fingerprint, status, error]] = record["failures"]
    assert (name, status, record["loaded"]) == ("rescore_build_fallback", "compile_failed", [])
    assert fingerprint and "error: redefinition" in error
    record["ok"] = True
    assert cuda_build._status(record) == BuildStatus.COMPILE_FAILED
    assert cuda_build.stages(BuildStatus.COMPILE_FAILED) == (False, False)
    assert cuda_build._status({"ok": True, "failures": [], "loaded": ["x"]}) == BuildStatus.LOADED
    assert cuda_build._status({"ok": True, "failures": [], "loaded": []}) == BuildStatus.NO_BUILD
    assert cuda_build._status({"ok": False, "failures": []}) == BuildStatus.FAILED


# ---------------------------------------------------------------- the tables


def _tables() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Four CUDA kernels claimed correct: `fell_back` passes on PyTorch (its build failed), `wrong` fails
    and never ran its CUDA either, `ran` passes on its CUDA, `older` has cases from before `cuda_ran`."""
    kinds = {"fell_back": ("pass", "no", "compile_failed"), "wrong": ("mismatch", "no", "not_called"),
             "ran": ("pass", "yes", "built"), "older": ("pass", None, None)}
    subs, rows = [], []
    for sid, (outcome, ran, build) in kinds.items():
        subs.append({"submission_id": sid, "name": sid, "dump": "l1", "op": "op", "language": "cuda",
                     "label": "unknown", "bug_class": None, "problem_id": "p", "dtypes": "float32",
                     "declines": None, "claimed_verdict": "correct", "ingest_error": None})
        base = dict(submission_id=sid, problem_id="p", purpose="evaluation", dtype="float32", reason=None,
                    diagnosis=None, values="normal", layout="contiguous", cuda_ran=ran, cuda_build=build)
        rows.append(dict(base, oracle="fixed", strategy="fixed", outcome="pass", sizes='{"N": 8}', case_index=0))
        rows += [dict(base, oracle="fuzz", strategy="default", outcome=outcome, sizes='{"N": 9}', case_index=i,
                      seed=i) for i in range(3)]
    return pd.DataFrame(rows), pd.DataFrame(subs)


def test_a_kernel_whose_cuda_never_ran_gets_its_own_column_and_tier():
    """Right answers without its CUDA: not flagged, not an illusion, tier `cuda_never_ran`; a flagged
    kernel keeps the tier of its failures, its `cuda_ran` beside it. rescored counts both."""
    cases, subs = _tables()
    ill = illusion_table(cases, subs).set_index("submission_id")
    fell = ill.loc["fell_back"]
    assert (fell["fuzz_verdict"], fell["illusion"], fell["severity"]) == ("pass", False, CUDA_NEVER_RAN)
    assert (fell["cuda_ran"], fell["cuda_build"]) == ("no", "compile_failed")
    assert (ill.loc["wrong", "severity"], ill.loc["wrong", "cuda_ran"]) == ("other_sizes", "no")
    assert (ill.loc["ran", "cuda_ran"], ill.loc["ran", "cuda_build"]) == ("yes", "built")
    assert pd.isna(ill.loc["ran", "severity"]) and pd.isna(ill.loc["older", "cuda_ran"])
    row = rescored_table(ill.reset_index(), subs).iloc[0]
    assert (row.illusion_n, row.illusion_k, row.tier_other_sizes) == (4, 1, 1)
    assert (row.tier_cuda_never_ran, row.cuda_never_ran, row.cuda_known) == (1, 2, 3)


def test_the_gathered_builds_table_says_built_only_where_a_case_called_it():
    cases, subs = _tables()
    builds = pd.DataFrame({"submission_id": ["fell_back", "wrong", "ran", "older"],
                           "status": ["loaded", "loaded", "loaded", "loaded"],
                           "compiled": [None, True, True, True], "loaded": [None, True, True, True],
                           "called": [None] * 4})
    builds.loc[0, "status"] = "no_build"  # it builds in the worker (in __init__), not at import
    out = gathered_builds(builds, cases).set_index("submission_id")
    assert list(out["status"]) == ["compile_failed", "not_called", "built", "loaded"]
    with_error = cases.assign(cuda_build_error=[("error: expected ';'" if sid == "fell_back" else None)
                                                for sid in cases["submission_id"]])
    said = gathered_builds(builds.assign(error=None), with_error).set_index("submission_id")
    assert said.loc["fell_back", "error"] == "error: expected ';'" and pd.isna(said.loc["wrong", "error"])
    assert gathered_builds(builds.assign(error=None), cases)["error"].isna().all()  # cases without the column
    assert list(out["called"].astype(object).where(out["called"].notna(), None)) == [False, False, True, None]
    assert list(out["compiled"].astype(object).where(out["compiled"].notna(), None)) == [False, True, True, True]
    assert list(out["cuda_ran"].fillna("-")) == ["no", "no", "yes", "-"]
    older = gathered_builds(builds, cases.drop(columns=["cuda_ran", "cuda_build"]))
    assert list(older["status"]) == list(builds["status"])  # cases from before `cuda_ran` settle nothing
