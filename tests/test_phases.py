"""Where a submission's time goes: the worker's phases, each second counted once under its table
phase; the parent's rows adding up to a submission's elapsed time; the table a check shard writes."""

from __future__ import annotations

import json
import time

import pandas as pd
from conftest import REPO, toy_submission

from rescore.engine.phase_log import PARENT, PhaseLog
from rescore.model.records import submission_to_dict
from rescore.worker.phases import PhaseTimer


def test_each_second_counts_once_under_its_table_phase():
    timer = PhaseTimer()
    with timer("case"):
        with timer("reference"):
            with timer("reference_build"):
                time.sleep(0.02)
            time.sleep(0.01)
        with timer("call"):
            with timer("police"):
                time.sleep(0.01)
        with timer("explain"):  # everything inside an experiment is the experiments'
            with timer("call"):
                with timer("police"):
                    time.sleep(0.01)
    spent = dict(timer.spent)
    taken = timer.take()
    assert set(taken) == {"worker_other", "reference", "reference_build", "candidate", "integrity", "experiments"}
    assert abs(sum(taken.values()) - spent["case"]) < 1e-6  # nothing counted twice, nothing lost
    assert taken["reference_build"] >= 0.02 and 0.01 <= taken["reference"] < spent["reference"]
    assert taken["experiments"] >= 0.01 and taken["integrity"] < spent["police"]  # the experiment's police is its own
    assert timer.take() == {} and timer.spent == {}


def test_inside_an_experiment_each_second_is_the_innermost_experiments():
    """A failed case's experiments are split by what they are: the race repeats and the size and dtype
    triggers inside `explain` are their own table phases, the rest of `explain` the experiments'."""
    timer = PhaseTimer()
    with timer("explain"):
        time.sleep(0.01)
        with timer("race"):
            with timer("call"):
                time.sleep(0.02)
        with timer("sizes"):
            with timer("reference"):
                time.sleep(0.01)
    spent = dict(timer.spent)
    taken = timer.take()
    assert set(taken) == {"experiments", "race_repeats", "size_experiments"}
    assert abs(sum(taken.values()) - spent["explain"]) < 1e-6
    assert taken["race_repeats"] >= 0.02 and taken["size_experiments"] >= 0.01 and taken["experiments"] < 0.02


def test_a_submissions_phases_add_up_to_its_elapsed_time():
    spent = PhaseLog()
    spent.add("candidate", 2.0)
    spent.add_all({"reference": 1.0, "compare": 0.5, "forged": "not a number"})
    spent.add("candidate", 1.0)
    rows = spent.rows(elapsed_s=5.0, case_s=3.2, name="k")
    by = {r["phase"]: r for r in rows}
    assert set(by) == {"candidate", "reference", "compare", PARENT}
    assert by["candidate"]["seconds"] == 3.0 and by["candidate"]["calls"] == 2 and by[PARENT]["seconds"] == 0.5
    assert sum(r["seconds"] for r in rows) == 5.0 and all(r["elapsed_s"] == 5.0 and r["case_s"] == 3.2 for r in rows)


def test_a_check_shard_writes_where_each_submissions_time_went(tmp_path):
    from rescore.model.tables import read_parquet
    from rescore.stages import run_shard

    subs = [toy_submission("problem_scale.py", name, dtypes=("float32",)) for name in ("torch_correct.py",
                                                                                         "scale_tail_bug.py")]
    manifest = tmp_path / "ingest" / "toy" / "manifest.json"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps([submission_to_dict(s) for s in subs]))
    config = {"device": "cpu", "fixed": {"profile": "kernelbench-v0.1", "dtype": "float32"},
              "fuzz": {"dtypes": ["float32"], "strategies": {"default": 3}}, "budget": {"cpu": 4096},
              "timeout_s": 60}
    out = {k: str(tmp_path / f"{k}.parquet") for k in ("cases", "shrunk", "phases", "builds")}
    run_shard(str(manifest), 0, 1, config, out["cases"], out["shrunk"], str(tmp_path / "logs"),
              out_phases=out["phases"], out_builds=out["builds"])
    phases = read_parquet(out["phases"], "phases")
    cases = pd.read_parquet(out["cases"])
    assert set(phases["name"]) == {s.name for s in subs} and (phases["dump"] == "toy").all()
    for name, rows in phases.groupby("name"):
        assert abs(rows["seconds"].sum() - rows["elapsed_s"].iloc[0]) < 1e-3  # the phases add up
        own = cases.loc[cases["name"] == name, "wall_ms"].sum() / 1e3
        assert abs(rows["case_s"].iloc[0] - own) < 1e-3
        assert {"load", "fixed", "reference", "candidate", "compare", "inputs"} <= set(rows["phase"])
    first = phases[phases["name"] == "torch_correct"]
    assert "worker_start" in set(first["phase"])  # the shard's worker started for its first submission
    assert "shrink" in set(phases.loc[phases["name"] == "scale_tail_bug", "phase"])  # flagged: shrunk
    assert (phases["limit_use"] > 0).all() and (phases["limit_use"] < 1).all()
    assert (phases["reserved_bytes"] == 0).all()  # a CPU reserves no device memory


def test_the_phase_log_keeps_the_most_device_memory_a_submission_reserved(tmp_path):
    """Where memory is reserved (a GPU; here a CPU given a capacity, as the tests' stand-ins are), the
    submission's rows carry the most its requests reserved: what the ledger held for it, which a
    scheduler that keeps the largest submissions apart would read."""
    from rescore.engine.runner import RunConfig, run_submission
    from rescore.engine.sandbox import Worker
    from rescore.engine.sharing import CONTEXT_BYTES, DeviceShare

    share = DeviceShare("cpu", capacity=8 << 30, folder=tmp_path)
    worker = Worker("cpu", 1 << 12, share=share)
    worker.phases = spent = PhaseLog()
    cfg = RunConfig(strategies={"default": 2}, dtypes=("float32",), timeout_s=60, load_timeout_s=300)
    try:
        run_submission(toy_submission("problem_scale.py", "scale_correct.py", dtypes=("float32",)), cfg, worker)
    finally:
        worker.stop()
    assert spent.reserved_bytes > CONTEXT_BYTES  # the context and the reference's expected peak
    rows = spent.rows(elapsed_s=1.0, case_s=0.5)
    assert {r["reserved_bytes"] for r in rows} == {spent.reserved_bytes}
    assert {r["peak_bytes"] for r in rows} == {0}  # a CPU worker reports no tensors' peak


def test_the_phase_log_keeps_the_largest_tensors_peak_a_worker_reported():
    """A GPU worker's report on each request carries its tensors' peak since the last (`footprint.report`);
    the submission's rows carry the largest, whatever came between, and a report without one changes nothing."""
    spent = PhaseLog()
    for memory in ({"peak": 3 << 30, "free": 10}, None, {"total": 80 << 30}, {"peak": 1 << 30}):
        spent.observe_memory(memory)
    assert {r["peak_bytes"] for r in spent.rows(elapsed_s=1.0, case_s=0.5)} == {3 << 30}


def test_shard_costs_from_a_cut_short_runs_phase_files(tmp_path):
    """tools/shard_costs.py --from-phases: each submission's elapsed seconds less its waits for the
    device's memory and lock, from the check shards' phase files (a run cut short has no phase table),
    one cost per submission whatever its rows."""
    import subprocess
    import sys

    folder = tmp_path / "results" / "phases" / "dump"
    folder.mkdir(parents=True)
    rows = [("a", "candidate", 2.0, 5.0), ("a", "fixed", 3.0, 5.0), ("b", "build", 40.0, 51.5),
            ("b", "memory_wait", 8.0, 51.5), ("b", "device_wait", 2.0, 51.5), ("b", "candidate", 1.5, 51.5)]
    for shard, part in enumerate((rows[:2], rows[2:])):  # b waited 10 s for the others: not its cost
        pd.DataFrame(part, columns=["submission_id", "phase", "seconds", "elapsed_s"]).to_parquet(
            folder / f"shard-{shard}.parquet")
    out = tmp_path / "costs.json"
    r = subprocess.run([sys.executable, str(REPO / "tools" / "shard_costs.py"), str(tmp_path / "results"),
                        "--from-phases", "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(out.read_text()) == {"a": 5.0, "b": 41.5}


def test_shard_memory_from_the_phase_table(tmp_path):
    """tools/shard_costs.py --memory: each submission's largest reservation in GiB, from the phase table's
    `reserved_bytes` (none for a submission that reserved nothing); --merge keeps the larger of two runs'."""
    import subprocess
    import sys

    results = tmp_path / "results"
    (results / "tables").mkdir(parents=True)
    pd.DataFrame([("a", "candidate", 3 << 30), ("a", "fixed", 3 << 30), ("b", "candidate", 0), ("c", "fixed", 1 << 29)],
                 columns=["submission_id", "phase", "reserved_bytes"]).to_parquet(results / "tables" / "phases.parquet")
    out = tmp_path / "memory.json"
    tool = [sys.executable, str(REPO / "tools" / "shard_costs.py"), str(results), "--memory", "--out", str(out)]
    assert subprocess.run(tool, capture_output=True, text=True, timeout=120).returncode == 0
    assert json.loads(out.read_text()) == {"a": 3.0, "c": 0.5}
    out.write_text(json.dumps({"a": 40.0, "c": 0.25, "d": 1.0}))
    r = subprocess.run([*tool, "--merge"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(out.read_text()) == {"a": 40.0, "c": 0.5, "d": 1.0}


def test_a_worker_started_ahead_is_the_one_the_first_request_runs_in():
    """A check shard starts its worker before its CUDA builds (`Worker.prestart`): the first load runs
    in that process, and what it still waited for of the start is `worker_start`, not `ipc`."""
    from rescore.engine.runner import RunConfig, run_submission
    from rescore.engine.sandbox import Worker

    worker = Worker("cpu", 1 << 15)
    try:
        worker.prestart()
        first = worker.proc
        worker.phases = spent = PhaseLog()
        rows = run_submission(toy_submission("problem_scale.py", "torch_correct.py", dtypes=("float32",)),
                              RunConfig(strategies={"default": 1}, dtypes=("float32",), timeout_s=60), worker)
        assert worker.proc is first and worker.starts == 1
    finally:
        worker.stop()
    assert {r["outcome"] for r in rows} == {"pass"}
    assert spent.seconds["worker_start"] > 0


def test_a_hangs_kill_is_its_own_phase_and_nothing_is_counted_twice():
    """A hanging call: its limit is `timeout_wait`, the wait from SIGKILL to the worker's exit `kill`
    (on a GPU, the driver tearing the context of a spinning kernel down), once each."""
    from rescore.engine.phase_log import KILL, TIMEOUT_WAIT
    from rescore.engine.sandbox import Worker, run_with_retry
    from rescore.worker.protocol import Case, job_of

    sub = toy_submission("problem_scale.py", "hang.py", dtypes=("float32",))
    worker = Worker("cpu", 1 << 15)
    try:
        worker.load(job_of(sub), 60)
        worker.phases = spent = PhaseLog()
        began = time.monotonic()
        row = run_with_retry(worker, Case("default", 1, "float32"), 2.0)
        elapsed = time.monotonic() - began
    finally:
        worker.stop()
    assert row["outcome"] == "timeout", row
    assert spent.calls[KILL] == 1 and 0 <= spent.seconds[KILL] < 2
    assert 2.0 <= spent.seconds[TIMEOUT_WAIT] + spent.seconds[KILL] <= elapsed + 1e-6


def test_a_shards_cuda_builds_run_beside_its_other_submissions(tmp_path, monkeypatch):
    """The shard's CUDA C builds start at once, its other submissions run while they build, and a
    CUDA submission runs only once they are done, with its build's seconds its `build` phase."""
    import threading
    from dataclasses import replace

    from rescore import stages
    from rescore.engine import cuda_build
    from rescore.model.tables import read_parquet, write_parquet

    plain = toy_submission("problem_scale.py", "torch_correct.py", dtypes=("float32",))
    cuda = replace(toy_submission("problem_scale.py", "scale_tail_bug.py", dtypes=("float32",)), language="cuda")
    manifest = tmp_path / "ingest" / "toy" / "manifest.json"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps([submission_to_dict(s) for s in (cuda, plain)]))  # the CUDA one planned first
    plain_ran, events = threading.Event(), []

    def build(manifests, device, out, **kw):  # a build that is still running when the plain one has run
        assert kw["compile_jobs"] == stages.SHARD_COMPILE_JOBS  # one compile at a time: a core a shard
        assert plain_ran.wait(60), "the plain submission did not run while the build ran"
        table = cuda_build._frame([cuda_build._row(cuda, {"status": "no_build", "ok": True, "seconds": 7.5})])
        write_parquet(table, out)
        events.append("build done")
        return table

    real = stages.run_submission

    def run(sub, *args, **kw):
        events.append(f"run {sub.name}")
        try:
            return real(sub, *args, **kw)
        finally:
            if sub.name == plain.name:
                plain_ran.set()

    monkeypatch.setattr(stages, "write_builds", build)
    monkeypatch.setattr(stages, "run_submission", run)
    config = {"device": "cpu", "fixed": {"profile": "kernelbench-v0.1", "dtype": "float32"},
              "fuzz": {"dtypes": ["float32"], "strategies": {"default": 2}}, "budget": {"cpu": 4096},
              "timeout_s": 60}
    out = {k: str(tmp_path / f"{k}.parquet") for k in ("cases", "shrunk", "phases", "builds")}
    stages.run_shard(str(manifest), 0, 1, config, out["cases"], out["shrunk"], str(tmp_path / "logs"),
                     out_phases=out["phases"], out_builds=out["builds"])
    assert events == [f"run {plain.name}", "build done", f"run {cuda.name}"]
    phases = read_parquet(out["phases"], "phases")
    build = phases[phases["phase"] == "build"].groupby("name")["seconds"].sum().to_dict()
    assert build.get(cuda.name) == 7.5 and not build.get(plain.name)
    assert pd.read_parquet(out["builds"])["name"].tolist() == [cuda.name]


def test_the_phase_summary_counts_harness_faults_beside_the_outcomes(tmp_path):
    """bench/phases.py's summary gives the outcomes and the harness faults (the current form and an
    older run's `crash` with "harness: "), so two runs' ratios are not compared over a bug."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("phases_bench", REPO / "bench" / "phases.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    tables = tmp_path / "results" / "tables"
    tables.mkdir(parents=True)
    pd.DataFrame({
        "name": ["a", "a", "b", "b"],
        "outcome": ["pass", "skipped", "crash", "crash"],
        "reason": ["", "harness fault, not the kernel's (...): rescore raised, outside the candidate's calls, X",
                   "harness: RuntimeError: Y", "RuntimeError: the kernel's own"],
        "wall_ms": [1.0, 0.0, 0.0, 2.0],
        "limit_s": [None] * 4,
    }).to_parquet(tables / "cases.parquet")
    out = bench.summary(tmp_path / "results")
    assert out["harness_faults"] == 2
    assert out["outcomes"] == {"crash": 2, "pass": 1, "skipped": 1}
