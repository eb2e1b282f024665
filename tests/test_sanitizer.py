"""The sanitizer stage (engine/sanitizer.py): compute-sanitizer's reports parsed into diagnoses that
keep its own lines, the cases it reruns, the worker run under a stand-in `compute-sanitizer` on the
CPU, and the loud `not_run` record where there is no GPU."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import REPO, toy_submission

from rescore.engine import sanitizer
from rescore.engine.sanitizer import parse_report, select_cases
from rescore.model.outcomes import ALL_OUTCOMES
from rescore.model.tables import write_parquet

LOGS = REPO / "tests" / "fixtures" / "sanitizer"


def test_memcheck_reads_past_the_end_are_out_of_bounds_with_the_sanitizers_own_lines():
    found, summary = parse_report((LOGS / "memcheck.log").read_text(), "memcheck")
    assert summary == "ERROR SUMMARY: 3 errors"
    assert [(d.diagnosis, d.kernel, d.errors) for d in found] == [
        ("out_of_bounds", "scale_relu_unmasked(const float *, float *)", 3)]
    first = found[0].report.splitlines()
    assert first[0] == "Invalid __global__ write of size 4 bytes"
    assert "by thread (64,0,0) in block (8,0,0)" in first
    assert any("1 bytes after the nearest allocation" in line for line in first)
    assert not any("Host Frame" in line for line in first)  # the backtrace is left out
    assert not found[0].library_kernel


def test_racecheck_hazards_are_a_race_in_the_kernel_named_in_either_format():
    found, summary = parse_report((LOGS / "racecheck.log").read_text(), "racecheck")
    assert summary.startswith("RACECHECK SUMMARY: 2 hazards displayed")
    assert {d.diagnosis for d in found} == {"race"}
    assert {d.kernel for d in found} == {"row_sum_racy(const float *, float *, int)"}
    assert found[0].errors == 3968 + 128 + 4  # the hazards each report counts
    assert found[0].report.startswith("Error: Race reported between Write access at row_sum_racy")


def test_initcheck_and_synccheck():
    found, summary = parse_report((LOGS / "initcheck.log").read_text(), "initcheck")
    assert summary == "ERROR SUMMARY: 1 error"
    assert [(d.diagnosis, d.kernel) for d in found] == [
        ("uninitialized_read", "_gather_rows(float *, const float *, int)")]
    found, _ = parse_report((LOGS / "synccheck.log").read_text(), "synccheck")
    assert [(d.diagnosis, d.kernel, d.errors) for d in found] == [("sync_error", "_softmax_kernel", 2)]
    assert "Device Frame" not in found[0].report


def test_a_clean_run_a_cut_off_run_and_the_harness_own_kernels():
    assert parse_report("========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n", "memcheck") == (
        [], "ERROR SUMMARY: 0 errors")
    cut = "\n".join((LOGS / "memcheck.log").read_text().splitlines()[:6])  # killed mid-report: no summary
    found, summary = parse_report(cut, "memcheck")
    assert summary is None and found[0].diagnosis == "out_of_bounds"
    torch_kernel = ("========= Invalid __global__ read of size 16 bytes\n"
                    "=========     at void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>"
                    "(int, T2, T3)+0x1c0\n=========     by thread (0,0,0) in block (0,0,0)\n"
                    "=========     Address 0x7f00 is out of bounds\n========= ERROR SUMMARY: 1 error\n")
    found, _ = parse_report(torch_kernel, "memcheck")
    assert found[0].library_kernel


def _cases(rows: list[dict]) -> pd.DataFrame:
    base = {"oracle": "fuzz", "strategy": "default", "dtype": "float32", "diagnosis": None}
    return pd.DataFrame([dict(base, **r) for r in rows])


def test_the_first_failing_case_of_each_cuda_or_triton_submission_is_chosen():
    subs = pd.DataFrame({"submission_id": ["a", "b", "c", "d"], "language": ["triton", "cuda", "torch", "triton"]})
    cases = _cases([
        {"submission_id": "a", "case_index": 1, "seed": 11, "outcome": "mismatch"},
        {"submission_id": "a", "case_index": 0, "seed": 10, "outcome": "pass"},
        {"submission_id": "a", "case_index": 2, "seed": 12, "outcome": "crash"},
        {"submission_id": "b", "case_index": 0, "seed": 20, "outcome": "nonfinite", "diagnosis": "nondeterministic"},
        {"submission_id": "c", "case_index": 0, "seed": 30, "outcome": "mismatch"},  # plain torch: not a kernel
        {"submission_id": "d", "case_index": 0, "seed": 40, "outcome": "pass"},
    ])
    chosen = select_cases(cases, subs)
    assert list(zip(chosen["submission_id"], chosen["seed"], chosen["why"])) == [
        ("b", 20, "nondeterministic"), ("a", 11, "flagged")]
    with_passing = select_cases(cases, subs, passing=True, limit=2)
    assert list(with_passing["submission_id"]) == ["b", "a"]  # flagged ones first, then the limit
    assert list(select_cases(cases, subs, passing=True)["why"]) == ["nondeterministic", "flagged", "representative"]


FAKE = '''#!{python}
"""A stand-in compute-sanitizer: runs the command after its options, then writes a report in the
real format to --log-file, naming the environment it ran the worker in."""
import os
import subprocess
import sys

args = sys.argv[1:]
if args == ["--version"]:
    print("NVIDIA (R) Compute Sanitizer\\nCopyright (c) 2020-2025 NVIDIA Corporation\\nVersion 2025.1.0.0 (stand-in)")
    sys.exit(0)
opts = {{}}
while args and args[0].startswith("--"):
    opts[args[0]] = args[1]
    args = args[2:]
code = subprocess.run(args, close_fds=False).returncode
tool = opts["--tool"]
with open(opts["--log-file"], "a") as log:
    log.write("========= COMPUTE-SANITIZER\\n")
    log.write(f"caching off: {{os.environ.get('PYTORCH_NO_CUDA_MEMORY_CACHING')}}; api errors: "
              f"{{opts.get('--report-api-errors')}}\\n")
    if tool == "memcheck":
        log.write("""========= Invalid __global__ write of size 4 bytes
=========     at relu2_kernel+0x1b0 in scale_unmasked.py:11
=========     by thread (127,0,0) in block (63,0,0)
=========     Address 0x7f3a5c202000 is out of bounds
=========     and is 4 bytes after the nearest allocation at 0x7f3a5c200000 of size 8,188 bytes
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: [0x2f3a51] in libcuda.so.1
=========
========= ERROR SUMMARY: 1 error
""")
    else:
        log.write("========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\\n")
sys.exit(code)
'''


@pytest.fixture
def fake_sanitizer(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "bin"
    folder.mkdir()
    exe = folder / "compute-sanitizer"
    exe.write_text(FAKE.format(python=sys.executable))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return exe


def test_the_case_runs_in_the_worker_under_the_sanitizer_and_its_report_becomes_a_diagnosis(tmp_path,
                                                                                               fake_sanitizer):
    sub = toy_submission("problem_scale.py", "scale_unmasked.py", dtypes=("float32",))
    case = {"submission_id": sub.submission_id, "oracle": "fuzz", "strategy": "default", "seed": 3,
            "dtype": "float32", "case_index": 0, "outcome": "crash", "why": "flagged"}
    cfg = dict(sanitizer.settings({"device": "cpu", "budget": {"cuda": 1 << 12}}), timeout_s=120.0)
    version = sanitizer.sanitizer_version("compute-sanitizer")
    assert version == "Version 2025.1.0.0 (stand-in)"
    logs = tmp_path / "logs"
    (found,) = sanitizer.sanitize_case(sub, case, "memcheck", cfg, logs, device="cpu", version=version)
    assert found["status"] == "found" and found["diagnosis"] == "out_of_bounds"
    assert found["kernel"] == "relu2_kernel" and found["errors"] == 1 and not found["library_kernel"]
    assert found["report"].splitlines()[:3] == ["Invalid __global__ write of size 4 bytes",
                                                "at relu2_kernel+0x1b0 in scale_unmasked.py:11",
                                                "by thread (127,0,0) in block (63,0,0)"]
    assert found["reason"] == "memcheck: Invalid __global__ write of size 4 bytes"
    # the worker answered through the wrapper: the case ran and was judged
    assert found["outcome_under_sanitizer"] in set(ALL_OUTCOMES) - {"timeout"}, found
    log_text = next(logs.glob("*-memcheck.log")).read_text()
    assert "caching off: 1; api errors: no" in log_text
    (clean,) = sanitizer.sanitize_case(sub, case, "racecheck", cfg, logs, device="cpu", version=version)
    assert clean["status"] == "clean" and clean["errors"] == 0 and "diagnosis" not in clean
    assert clean["reason"] == "racecheck: RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"
    assert "caching off: None" in next(logs.glob("*-racecheck.log")).read_text()  # shared memory: caching stays


def test_without_a_gpu_every_selected_submission_is_recorded_not_run_and_the_log_says_so(tmp_path, caplog):
    sub = toy_submission("problem_scale.py", "scale_unmasked.py", dtypes=("float32",))
    ok = toy_submission("problem_scale.py", "scale_correct.py", dtypes=("float32",))
    manifest = tmp_path / "manifest.json"
    from rescore.model.records import submission_to_dict

    manifest.write_text(json.dumps([submission_to_dict(s) for s in (sub, ok)]))
    write_parquet(pd.DataFrame([sub.row(), ok.row()]), tmp_path / "submissions.parquet", "submissions")
    cases = _cases([{"submission_id": sub.submission_id, "name": sub.name, "case_index": 0, "seed": 1,
                     "outcome": "crash"},
                    {"submission_id": ok.submission_id, "name": ok.name, "case_index": 0, "seed": 1,
                     "outcome": "pass"}])
    write_parquet(cases, tmp_path / "cases.parquet", "cases")
    out = tmp_path / "sanitizer.parquet"
    config = {"device": "cpu", "sanitizer": {"tools": ["memcheck", "racecheck"]}}
    with caplog.at_level("INFO", logger="rescore"):
        df = sanitizer.run_sanitizer(str(tmp_path / "cases.parquet"), str(tmp_path / "submissions.parquet"),
                                     [str(manifest)], config, str(out), str(tmp_path / "logs"))
    assert list(df["tool"]) == ["memcheck", "racecheck"] and set(df["name"]) == {sub.name}
    assert (df["status"] == "not_run").all()
    assert df["reason"].iloc[0] == "compute-sanitizer needs a CUDA GPU: the config's device is cpu"
    assert "NO SANITIZER" in caplog.text
    assert pd.read_parquet(out).columns.tolist() == sanitizer.COLUMNS


def test_uncertainty_says_whether_memory_past_a_kernels_buffers_was_seen():
    from rescore.analysis.uncertainty import memory_safety_lines

    unseen = " ".join(memory_safety_lines(None))
    assert "is seen only when that is an input" in unseen
    not_run = pd.DataFrame([{"submission_id": "a", "name": "k", "tool": "memcheck", "status": "not_run",
                             "reason": "compute-sanitizer needs a CUDA GPU: the config's device is cpu",
                             "diagnosis": None}])
    text = " ".join(memory_safety_lines(not_run))
    assert "did not run" in text and "needs a CUDA GPU" in text and "is seen only when" in text
    ran = pd.DataFrame([
        {"submission_id": "a", "name": "k1", "tool": "memcheck", "status": "found", "diagnosis": "out_of_bounds",
         "reason": "memcheck: Invalid __global__ write of size 4 bytes", "library_kernel": False},
        {"submission_id": "b", "name": "k2", "tool": "memcheck", "status": "clean", "diagnosis": None,
         "reason": "memcheck: ERROR SUMMARY: 0 errors", "library_kernel": None},
        {"submission_id": "b", "name": "k2", "tool": "racecheck", "status": "found", "diagnosis": "race",
         "reason": "racecheck: Error: Race reported", "library_kernel": False},
        {"submission_id": "c", "name": "k3", "tool": "memcheck", "status": "found", "diagnosis": "out_of_bounds",
         "reason": "memcheck: Invalid __global__ read of size 16 bytes", "library_kernel": True},
    ])
    text = " ".join(memory_safety_lines(ran))
    assert "memcheck ran on 3 submissions" in text and "out_of_bounds in 1 (k1)" in text  # k3's is torch's kernel
    assert "1 reports name kernels of the harness's own libraries" in text
    assert "race in 1 (k2)" in text and "is seen only when" not in text.split("not among them")[0]
