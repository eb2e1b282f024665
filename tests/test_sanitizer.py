"""The sanitizer stage (engine/sanitizer.py, engine/sanitizer_log.py): compute-sanitizer's logs
parsed into diagnoses that keep its own lines, the cases it reruns, the worker run under a stand-in
`compute-sanitizer` on the CPU (tests/fixtures/sanitizer/standin/: it reports what the worker's
kernels did, in the real tool's format), runs that do not finish, the stage's budget, and the loud
`not_run` record where there is no GPU."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pandas as pd
import yaml
from conftest import REPO, toy_submission

from rescore.engine import sanitizer
from rescore.engine.sanitizer import select_cases
from rescore.engine.sanitizer_log import parse_report
from rescore.model.outcomes import Outcome
from rescore.model.tables import write_parquet
from rescore.worker.protocol import UNFILLED_MEMORY_ENV

LOGS = REPO / "tests" / "fixtures" / "sanitizer"
STANDIN = LOGS / "standin" / "compute_sanitizer.py"


def test_memcheck_reads_past_the_end_are_out_of_bounds_with_the_sanitizers_own_lines():
    got = parse_report((LOGS / "memcheck.log").read_text(), "memcheck")
    assert got.summary == "ERROR SUMMARY: 3 errors" and got.notes == []
    assert [(d.diagnosis, d.kernel, d.errors) for d in got.diagnoses] == [
        ("out_of_bounds", "scale_relu_unmasked(const float *, float *)", 3)]
    first = got.diagnoses[0].report.splitlines()
    assert first[0] == "Invalid __global__ write of size 4 bytes"
    assert "by thread (64,0,0) in block (8,0,0)" in first
    assert any("1 bytes after the nearest allocation" in line for line in first)
    assert not any("Host Frame" in line for line in first)  # the backtrace is left out
    assert not got.diagnoses[0].library_kernel


def test_one_kernels_reads_and_writes_past_its_buffers_are_one_diagnosis_naming_both():
    """As the H100 printed slack_write's unmasked kernel: each warp's reads past the input come before
    its writes past the output; the diagnosis is one, and its reason names both kinds of access."""
    def report(access: str, thread: int) -> str:
        return (f"========= Invalid __global__ {access} of size 4 bytes\n"
                "=========     at scale_relu_unmasked(const float *, float *)+0x90\n"
                f"=========     by thread ({thread},0,0) in block (0,0,0)\n"
                "=========     Access to 0x7f280aa00300 is out of bounds\n"
                "=========     and is 241 bytes after the nearest allocation at 0x7f280aa00200 of size 16 bytes\n"
                "========= \n")
    text = ("========= COMPUTE-SANITIZER\n" + "".join(report("read", t) for t in (64, 65))
            + "".join(report("write", t) for t in (64, 65)) + "========= ERROR SUMMARY: 1240 errors\n")
    got = parse_report(text, "memcheck")
    assert [(d.diagnosis, d.kernel, d.errors) for d in got.diagnoses] == [
        ("out_of_bounds", "scale_relu_unmasked(const float *, float *)", 4)]
    assert got.diagnoses[0].headlines == ["Invalid __global__ read of size 4 bytes",
                                          "Invalid __global__ write of size 4 bytes"]
    assert got.summary == "ERROR SUMMARY: 1240 errors"


def test_racecheck_hazards_are_a_race_in_the_kernel_named_in_either_format():
    got = parse_report((LOGS / "racecheck.log").read_text(), "racecheck")
    assert got.summary.startswith("RACECHECK SUMMARY: 2 hazards displayed")
    assert {d.diagnosis for d in got.diagnoses} == {"race"}
    assert {d.kernel for d in got.diagnoses} == {"row_sum_racy(const float *, float *, int)"}
    assert got.diagnoses[0].errors == 3968 + 128 + 4  # the hazards each report counts
    assert got.diagnoses[0].report.startswith("Error: Race reported between Write access at row_sum_racy")


def test_initcheck_and_synccheck():
    got = parse_report((LOGS / "initcheck.log").read_text(), "initcheck")
    assert got.summary == "ERROR SUMMARY: 1 error"
    assert [(d.diagnosis, d.kernel) for d in got.diagnoses] == [
        ("uninitialized_read", "_gather_rows(float *, const float *, int)")]
    got = parse_report((LOGS / "synccheck.log").read_text(), "synccheck")
    assert [(d.diagnosis, d.kernel, d.errors) for d in got.diagnoses] == [("sync_error", "_softmax_kernel", 2)]
    assert "Device Frame" not in got.diagnoses[0].report


def test_a_clean_run_a_cut_off_run_and_the_harness_own_kernels():
    clean = parse_report("========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n", "memcheck")
    assert (clean.diagnoses, clean.summary) == ([], "ERROR SUMMARY: 0 errors")
    cut = "\n".join((LOGS / "memcheck.log").read_text().splitlines()[:6])  # killed mid-report: no summary
    got = parse_report(cut, "memcheck")
    assert got.summary is None and got.diagnoses[0].diagnosis == "out_of_bounds"
    torch_kernel = ("========= Invalid __global__ read of size 16 bytes\n"
                    "=========     at void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>"
                    "(int, T2, T3)+0x1c0\n=========     by thread (0,0,0) in block (0,0,0)\n"
                    "=========     Address 0x7f00 is out of bounds\n========= ERROR SUMMARY: 1 error\n")
    assert parse_report(torch_kernel, "memcheck").diagnoses[0].library_kernel


def test_what_the_sanitizer_says_of_the_program_is_never_a_finding_about_a_kernel():
    """A program killed by a signal, one that exited non-zero, one that never used CUDA: the
    sanitizer's notes, not device faults."""
    killed = ("========= COMPUTE-SANITIZER\n========= Error: process didn't terminate successfully\n"
              "========= Target application returned an error\n========= ERROR SUMMARY: 0 errors\n")
    got = parse_report(killed, "memcheck")
    assert got.diagnoses == [] and got.summary == "ERROR SUMMARY: 0 errors" and got.program_killed
    assert got.notes == ["Error: process didn't terminate successfully", "Target application returned an error"]
    never = ("========= COMPUTE-SANITIZER\n========= Error: Target application terminated before first "
             "instrumented API call\n========= ERROR SUMMARY: 0 errors\n")
    got = parse_report(never, "memcheck")
    assert got.diagnoses == [] and not got.program_killed and "before first instrumented" in got.notes[0]


def test_the_command_names_the_log_by_its_absolute_path_with_its_percent_doubled(tmp_path, monkeypatch):
    """The sanitizer starts in the worker's scratch folder: a relative log path would be opened there."""
    monkeypatch.chdir(tmp_path)
    cfg = sanitizer.settings({"device": "cuda"})
    cmd = sanitizer.sanitizer_command(cfg, "memcheck", Path("logs/100%/a.log"))
    assert cmd[cmd.index("--log-file") + 1] == f"{tmp_path}/logs/100%%/a.log"
    assert cmd[cmd.index("--target-processes") + 1] == "application-only"
    assert cmd[cmd.index("--destroy-on-device-error") + 1] == "kernel"


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


def test_a_failing_case_that_ran_the_submissions_own_cuda_is_chosen_before_one_that_fell_back_to_pytorch():
    subs = pd.DataFrame({"submission_id": ["a", "b"], "language": ["cuda", "cuda"]})
    cases = _cases([
        {"submission_id": "a", "case_index": 0, "seed": 1, "outcome": "mismatch", "cuda_ran": "no",
         "cuda_build": "not_called"},
        {"submission_id": "a", "case_index": 1, "seed": 2, "outcome": "mismatch", "cuda_ran": "yes",
         "cuda_build": "built"},
        {"submission_id": "b", "case_index": 0, "seed": 3, "outcome": "crash", "cuda_ran": "no",
         "cuda_build": "compile_failed"},
    ])
    chosen = select_cases(cases, subs)
    assert list(zip(chosen["submission_id"], chosen["seed"])) == [("a", 2), ("b", 3)]
    assert [sanitizer.only_pytorch_ran(c) for c in chosen.to_dict("records")] == [False, True]


def test_a_failing_case_that_launched_its_kernel_is_chosen_before_one_that_did_not_compile():
    """A Triton kernel that cannot compile for float16 but fails at float32 runs its float32 failure;
    one whose every failure is a compile error runs its first passing case, which launched it."""
    subs = pd.DataFrame({"submission_id": ["a", "b", "c"], "language": ["triton"] * 3})
    cases = _cases([
        {"submission_id": "a", "case_index": 0, "seed": 1, "outcome": "compile_error", "dtype": "float16"},
        {"submission_id": "a", "case_index": 1, "seed": 2, "outcome": "mismatch"},
        {"submission_id": "b", "case_index": 0, "seed": 3, "outcome": "compile_error", "dtype": "float16"},
        {"submission_id": "b", "case_index": 1, "seed": 4, "outcome": "pass"},
        {"submission_id": "c", "case_index": 0, "seed": 5, "outcome": "compile_error", "dtype": "float16"},
    ])
    chosen = select_cases(cases, subs)
    assert list(zip(chosen["submission_id"], chosen["seed"], chosen["outcome"], chosen["why"])) == [
        ("a", 2, "mismatch", "flagged"), ("b", 4, "pass", "flagged"), ("c", 5, "compile_error", "flagged")]
    assert not {"_fell_back", "_no_launch"} & set(chosen.columns)


def test_a_case_that_ran_none_of_the_submissions_own_cuda_is_not_run_with_the_reason(tmp_path, monkeypatch, caplog):
    """Its build failed and PyTorch answered: no worker starts under any tool, and each tool's row says
    why; the other submission's runs go ahead."""
    with caplog.at_level("INFO", logger="rescore"):
        df, made = _timed_stage(tmp_path, monkeypatch, 0.0, cuda_ran={"scale_tail_bug": "no"})
    assert sorted({m[0] for m in made}) == ["rowsum_triton", "scale_unmasked"] and len(made) == 4
    idle = df[df["name"] == "scale_tail_bug"]
    assert list(idle["tool"]) == ["memcheck", "racecheck"] and (idle["status"] == "not_run").all()
    assert set(idle["reason"]) == {
        "this case ran none of the submission's own CUDA (build failed: results/cuda_builds.parquet); its "
        "kernels were all PyTorch's, which the sanitizer would watch in its place"}
    assert (df[df["name"] != "scale_tail_bug"]["status"] == "clean").all()
    assert "2 runs not_run: their case ran none of the submission's own CUDA (1 submissions)" in caplog.text
    from rescore.analysis.uncertainty import memory_safety_lines

    assert "1 CUDA submissions were not sanitized" in " ".join(memory_safety_lines(df))


def standin(folder: Path, monkeypatch, teardown_s: float = 0.0) -> Path:
    """`compute-sanitizer` on PATH: the stand-in, taking `teardown_s` between its program's end and its summary."""
    folder.mkdir(parents=True, exist_ok=True)
    exe = folder / "compute-sanitizer"
    exe.write_text(f'#!/bin/sh\nexec env STANDIN_TEARDOWN_S={teardown_s} "{sys.executable}" "{STANDIN}" "$@"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return exe


def _run(sub, tool: str, logs: Path, limit_s: float | None = None, **cfg_over) -> list[dict]:
    case = {"submission_id": sub.submission_id, "oracle": "fuzz", "strategy": "default", "seed": 3,
            "dtype": "float32", "case_index": 0, "outcome": "crash", "why": "flagged"}
    cfg = dict(sanitizer.settings({"device": "cpu", "budget": {"cuda": 1 << 12}}), timeout_s=120.0, exit_wait_s=30.0)
    cfg.update(cfg_over)
    return sanitizer.sanitize_case(sub, case, tool, cfg, logs, device="cpu", version="stand-in", limit_s=limit_s)


def test_a_kernel_writing_past_its_output_is_found_and_a_correct_one_runs_clean(tmp_path, monkeypatch):
    """The stand-in reports what the kernel did under the interpreter's bounds check: the unmasked
    kernel's accesses past its tensors, the masked one's none. The log folder is relative, as the
    pipeline's is (results/logs/sanitizer.log.runs)."""
    standin(tmp_path / "bin", monkeypatch)
    monkeypatch.chdir(tmp_path)
    extra_envs, explains = [], []
    worker = sanitizer.Worker

    def recording(*args, **kw):
        extra_envs.append(kw.get("extra_env"))
        explains.append(kw.get("explain"))
        return worker(*args, **kw)

    monkeypatch.setattr(sanitizer, "Worker", recording)
    buggy = toy_submission("problem_scale.py", "scale_unmasked.py", dtypes=("float32",))
    rows = _run(buggy, "memcheck", Path("logs"))
    assert [(r["status"], r.get("diagnosis"), r.get("kernel")) for r in rows] == [
        ("found", "out_of_bounds", "relu2_kernel")]
    found = rows[0]
    lines = found["report"].splitlines()
    assert re.fullmatch(r"Invalid __global__ (read|write) of size 4 bytes", lines[0])
    assert re.fullmatch(r"at relu2_kernel in .*scale_unmasked\.py:1[01]", lines[1])
    assert re.fullmatch(r"and is \d+ bytes after the nearest allocation at 0x[0-9a-f]+ of size [\d,]+ bytes", lines[4])
    assert re.fullmatch(r"ERROR SUMMARY: \d+ errors?", found["summary"]) and found["errors"] >= 1
    assert found["outcome_under_sanitizer"] == Outcome.CRASH  # the interpreter stopped the launch
    assert found["reason"] == f"memcheck: {lines[0]}"
    log = tmp_path / "logs" / f"{buggy.submission_id[:16]}-memcheck" / "compute-sanitizer.log"
    assert log.read_text().startswith("========= COMPUTE-SANITIZER\n")

    correct = toy_submission("problem_scale.py", "scale_correct.py", dtypes=("float32",))
    (clean,) = _run(correct, "memcheck", Path("logs"))
    assert (clean["status"], clean["errors"], clean["summary"]) == ("clean", 0, "ERROR SUMMARY: 0 errors")
    assert clean["outcome_under_sanitizer"] == Outcome.PASS
    assert clean["reason"] == "memcheck: ERROR SUMMARY: 0 errors; the case ended pass"
    (race,) = _run(buggy, "racecheck", Path("logs"))  # the interpreter runs programs one after another
    assert race["status"] == "clean" and race["summary"].startswith("RACECHECK SUMMARY: 0 hazards")
    (init,) = _run(correct, "initcheck", Path("logs"))
    assert init["status"] == "clean" and init["outcome_under_sanitizer"] == Outcome.PASS
    # memcheck and initcheck see allocations: the caching allocator is off for them, and left on for
    # racecheck; initcheck's worker leaves fresh memory unfilled
    unfilled = {**sanitizer.NO_CACHING_ENV, UNFILLED_MEMORY_ENV: "1"}
    assert extra_envs == [sanitizer.NO_CACHING_ENV, sanitizer.NO_CACHING_ENV, None, unfilled]
    assert explains == [False] * 4  # the case alone: no experiment runs the kernel again under the tool


def test_a_worker_fills_fresh_memory_unless_told_to_leave_it_for_initcheck():
    """Filled, a fresh tensor is NaN (a kernel's unwritten output is caught); under initcheck it is
    left as the allocator gives it, so that a read of it is the tool's to see."""
    probe = ("from rescore.worker.loop import poison_fresh_memory; poison_fresh_memory(); import torch; "
             "from torch.utils import deterministic; "
             "print(deterministic.fill_uninitialized_memory, bool(torch.empty(1 << 16).isnan().all()))")

    def run(extra: dict) -> str:
        env = {k: v for k, v in os.environ.items() if k != UNFILLED_MEMORY_ENV}
        return subprocess.run([sys.executable, "-c", probe], env={**env, **extra}, capture_output=True, text=True,
                              check=True).stdout.split()

    assert run({}) == ["True", "True"]
    assert run({UNFILLED_MEMORY_ENV: "1"})[0] == "False"


def test_a_case_that_ends_before_its_kernel_runs_is_incomplete_not_clean(tmp_path, monkeypatch):
    """The candidate refuses a float16 input before launching anything (`declined`): the tool wrote
    its summary, but it saw none of the kernel, so the run is `incomplete` and says so."""
    standin(tmp_path / "bin", monkeypatch)
    declines = toy_submission("problem_scale.py", "declines.py", dtypes=("float16",))
    case = {"submission_id": declines.submission_id, "oracle": "fuzz", "strategy": "default", "seed": 3,
            "dtype": "float16", "case_index": 0, "outcome": "declined", "why": "flagged"}
    cfg = dict(sanitizer.settings({"device": "cpu", "budget": {"cuda": 1 << 12}}), timeout_s=120.0, exit_wait_s=30.0)
    (row,) = sanitizer.sanitize_case(declines, case, "memcheck", cfg, tmp_path / "logs", device="cpu")
    assert row["outcome_under_sanitizer"] == Outcome.DECLINED and row["summary"] == "ERROR SUMMARY: 0 errors"
    assert row["status"] == "incomplete"
    assert row["reason"].startswith("the case did not run the candidate's call to its end under memcheck, so its "
                                    "summary covers only what ran before: ERROR SUMMARY: 0 errors; the case ended "
                                    "declined: ")


def test_a_run_is_clean_only_when_its_case_ran_the_call_to_its_end_under_the_tool():
    """`run_status` over the ways a run ends without a finding (the H100 run at 42823f4 called six runs
    cut during the harness's work `clean`, their case `skipped`)."""
    summary = "ERROR SUMMARY: 0 errors"

    def status(outcome, case_ran=True, limit=900.0, summary=summary, notes=()):
        return sanitizer.run_status("memcheck", summary, list(notes), {"outcome": outcome, "reason": "why"}, case_ran,
                                    limit, 900.0, ending="memcheck's log has no summary")

    for ran in sanitizer.CALL_ENDED:
        assert status(ran) == ("clean", f"memcheck: {summary}; the case ended {ran}")
    cut = status(Outcome.SKIPPED, notes=["Error: couldn't find exit code."])
    assert cut == ("incomplete", "the case did not run the candidate's call to its end under memcheck, so its summary "
                                 "covers only what ran before: Error: couldn't find exit code.; ERROR SUMMARY: 0 "
                                 "errors; the case ended skipped: why")
    assert status(Outcome.COMPILE_ERROR)[0] == status(Outcome.DECLINED)[0] == "incomplete"
    assert status(Outcome.CRASH, case_ran=False)[0] == "incomplete"  # the load died: no case ran
    assert "the submission did not load under it" in status(Outcome.CRASH, case_ran=False)[1]
    assert status(Outcome.TIMEOUT)[0] == Outcome.TIMEOUT
    assert status(Outcome.TIMEOUT, limit=30.0)[1].startswith("cut at 30 s under memcheck, what was left of ")
    no_summary = ("incomplete", "memcheck's log has no summary; the case ended pass: why")
    assert status(Outcome.PASS, summary=None) == no_summary


def test_a_hang_is_a_timeout_and_the_sanitizer_still_reports_the_program_it_saw_killed(tmp_path, monkeypatch):
    """The worker alone is killed at the run's limit; the sanitizer then writes its notes and summary."""
    standin(tmp_path / "bin", monkeypatch)
    hang = toy_submission("problem_scale.py", "hang.py", dtypes=("float32",))
    (row,) = _run(hang, "memcheck", tmp_path / "logs", timeout_s=10.0)
    assert row["status"] == Outcome.TIMEOUT and row["outcome_under_sanitizer"] == Outcome.TIMEOUT
    assert row["summary"] == "ERROR SUMMARY: 0 errors"
    assert row["reason"].startswith("no answer within 10 s under memcheck (sanitizer.timeout_s): Error: process "
                                    "didn't terminate successfully; Target application returned an error; "
                                    "ERROR SUMMARY: 0 errors; the case ended timeout")
    # cut by what was left of the stage's budget: the stage ran out of time, not the kernel
    (cut,) = _run(hang, "memcheck", tmp_path / "logs", timeout_s=60.0, limit_s=10.0)
    assert cut["status"] == "incomplete" and cut["outcome_under_sanitizer"] == Outcome.TIMEOUT
    assert cut["reason"].startswith("cut at 10 s under memcheck, what was left of sanitizer.budget_s: ")


def test_the_sanitizer_gets_exit_wait_s_to_write_its_summary_and_a_run_it_exceeds_is_incomplete(tmp_path,
                                                                                                monkeypatch):
    """A sanitizer whose teardown outlasts the worker's stop: waited for, up to `exit_wait_s`."""
    standin(tmp_path / "bin", monkeypatch, teardown_s=8)
    correct = toy_submission("problem_scale.py", "scale_correct.py", dtypes=("float32",))
    (waited,) = _run(correct, "memcheck", tmp_path / "logs", exit_wait_s=40.0)
    assert waited["status"] == "clean" and waited["summary"] == "ERROR SUMMARY: 0 errors"
    (cut,) = _run(correct, "memcheck", tmp_path / "logs", exit_wait_s=2.0)
    assert cut["status"] == "incomplete" and cut["summary"] is None
    assert "has no summary: compute-sanitizer had not ended 2 s after the worker was stopped and was killed " \
           "(sanitizer.exit_wait_s); the case ended pass" in cut["reason"]


def _stage_inputs(tmp_path: Path, subs: list, cuda_ran: dict | None = None) -> tuple[str, str, list[str]]:
    """The stage's input files: one crashing case per submission, its `cuda_ran` from `cuda_ran` by
    name (with `cuda_build` compile_failed where it is no)."""
    from rescore.model.records import submission_to_dict

    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps([submission_to_dict(s) for s in subs]))
    write_parquet(pd.DataFrame([s.row() for s in subs]), tmp_path / "submissions.parquet", "submissions")
    ran = cuda_ran or {}
    cases = _cases([{"submission_id": s.submission_id, "name": s.name, "case_index": 0, "seed": 1, "outcome": "crash",
                     "cuda_ran": ran.get(s.name),
                     "cuda_build": "compile_failed" if ran.get(s.name) == "no" else None} for s in subs])
    write_parquet(cases, tmp_path / "cases.parquet", "cases")
    return str(tmp_path / "cases.parquet"), str(tmp_path / "submissions.parquet"), [str(manifest)]


def _timed_stage(tmp_path: Path, monkeypatch, run_s: float, cuda_ran: dict | None = None,
                 **settings) -> tuple[pd.DataFrame, list[tuple]]:
    """The stage over three submissions and two tools, each run a stand-in taking `run_s`: its table,
    and (submission, tool, limit_s, start time) of each run started."""
    import threading
    import time

    subs = [toy_submission("problem_scale.py", name, dtypes=("float32",))
            for name in ("scale_unmasked.py", "scale_tail_bug.py", "rowsum_triton.py")]
    made: list[tuple] = []
    lock = threading.Lock()

    def one_run(sub, case, tool, cfg, log_dir, version=None, limit_s=None):
        with lock:
            made.append((sub.name, tool, limit_s, time.monotonic()))
        time.sleep(run_s)
        return [dict(sanitizer._base(sub, case), tool=tool, status="clean", reason=f"{tool}: ERROR SUMMARY: 0 errors")]

    monkeypatch.setattr(sanitizer, "sanitize_case", one_run)
    monkeypatch.setattr(sanitizer, "availability", lambda cfg: ("/bin/compute-sanitizer", "stand-in"))
    monkeypatch.setattr(sanitizer, "sanitizer_version", lambda exe: "stand-in")
    config = {"device": "cuda", "sanitizer": {"tools": ["memcheck", "racecheck"], **settings}}
    df = sanitizer.run_sanitizer(*_stage_inputs(tmp_path, subs, cuda_ran), config, str(tmp_path / "s.parquet"),
                                 str(tmp_path / "logs"))
    return df, made


def test_runs_the_stages_budget_leaves_no_time_for_are_not_run_with_the_reason(tmp_path, monkeypatch, caplog):
    with caplog.at_level("INFO", logger="rescore"):
        df, made = _timed_stage(tmp_path, monkeypatch, 0.6, budget_s=1.0, jobs=1)
    assert [m[1] for m in made] == ["memcheck", "memcheck"]  # memcheck over the cases first
    assert made[0][2] <= 1.0 and made[1][2] < made[0][2]  # each run gets what is left of the budget
    assert list(df["status"]) == ["clean", "clean", "not_run", "not_run", "not_run", "not_run"]
    assert list(df["tool"]) == ["memcheck"] * 3 + ["racecheck"] * 3
    assert set(df[df["status"] == "not_run"]["reason"]) == {
        "the sanitizer stage's budget (sanitizer.budget_s: 1 s) was spent after 2 of 6 runs"}
    assert "the other 4 are not_run" in caplog.text


def test_jobs_runs_at_a_time_in_their_order_within_the_budget(tmp_path, monkeypatch):
    """Two at a time: the first two start together, the next two when those end (with what is left of
    the budget), the last two never (`not_run`); the rows keep the runs' order."""
    df, made = _timed_stage(tmp_path, monkeypatch, 0.7, budget_s=1.2, jobs=2)
    assert list(df["status"]) == ["clean"] * 4 + ["not_run"] * 2
    assert list(df["tool"]) == ["memcheck"] * 3 + ["racecheck"] * 3
    assert set(df.loc[df["status"] == "not_run", "reason"]) == {
        "the sanitizer stage's budget (sanitizer.budget_s: 1.2 s) was spent after 4 of 6 runs"}
    starts = sorted(m[3] for m in made)
    assert len(starts) == 4 and starts[1] - starts[0] < 0.5 and starts[2] - starts[0] >= 0.6  # two, then two


def test_without_a_gpu_every_selected_submission_is_recorded_not_run_and_the_log_says_so(tmp_path, caplog):
    sub = toy_submission("problem_scale.py", "scale_unmasked.py", dtypes=("float32",))
    ok = toy_submission("problem_scale.py", "scale_correct.py", dtypes=("float32",))
    cases_path, subs_path, manifests = _stage_inputs(tmp_path, [sub, ok])
    cases = pd.read_parquet(cases_path)
    cases.loc[cases["submission_id"] == ok.submission_id, "outcome"] = "pass"
    write_parquet(cases, cases_path, "cases")
    out = tmp_path / "sanitizer.parquet"
    config = {"device": "cpu", "sanitizer": {"tools": ["memcheck", "racecheck"]}}
    with caplog.at_level("INFO", logger="rescore"):
        df = sanitizer.run_sanitizer(cases_path, subs_path, manifests, config, str(out), str(tmp_path / "logs"))
    assert list(df["tool"]) == ["memcheck", "racecheck"] and set(df["name"]) == {sub.name}
    assert (df["status"] == "not_run").all()
    assert df["reason"].iloc[0] == "compute-sanitizer needs a CUDA GPU: the config's device is cpu"
    assert "NO SANITIZER" in caplog.text
    assert pd.read_parquet(out).columns.tolist() == sanitizer.COLUMNS


def test_the_stage_runs_after_every_other_table_and_nothing_waits_on_it(tmp_path):
    """`all` includes the sanitizer table, built from the finished tables; no rule reads it."""
    (tmp_path / "config").mkdir()
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    config["dumps"] = {"corpus": {"format": "corpus", "ops": ["softmax"]}}
    (tmp_path / "config" / "config.yaml").write_text(yaml.safe_dump(config))
    dag = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(tmp_path),
                          "--dag", "dot", "all"], capture_output=True, text=True, timeout=300)
    assert dag.returncode == 0, dag.stderr[-2000:]
    names = dict(re.findall(r'^\s*(\d+)\[label = "([^"]+)"', dag.stdout, re.M))
    edges = [(names[a], names[b]) for a, b in re.findall(r"^\s*(\d+) -> (\d+)", dag.stdout, re.M)]
    assert [b for a, b in edges if a == "sanitizer"] == ["all"]
    before = {a for a, b in edges if b == "sanitizer"}
    assert {"uncertainty", "rescored_table", "paper_p4_paired", "illusion_table", "verdicts_figure"} <= before, before
    assert {a for a, b in edges if b == "all"} - before == {"sanitizer"}  # everything else `all` needs comes first


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


def test_the_markdown_leaves_a_missing_diagnosis_and_kernel_blank():
    """An `incomplete` row read back from Parquet has NaN there, never printed as `nan`."""
    table = pd.DataFrame([
        {"name": "k", "tool": "racecheck", "status": "incomplete", "diagnosis": float("nan"), "kernel": float("nan"),
         "reason": "cut at 95 s under racecheck", "submission_id": "a", "library_kernel": None},
        {"name": "k", "tool": "memcheck", "status": "found", "diagnosis": "out_of_bounds", "kernel": "relu2_kernel",
         "reason": "memcheck: Invalid __global__ write", "submission_id": "a", "library_kernel": False},
    ])
    text = sanitizer.sanitizer_markdown(table)
    assert "| k | racecheck | incomplete |  |  | cut at 95 s under racecheck |" in text
    assert "| k | memcheck | found | out_of_bounds | relu2_kernel |" in text and "nan" not in text
