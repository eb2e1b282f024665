"""Faults of the run, not of a kernel: a worker killed mid-case is retried once and then recorded;
Snakemake killed mid-run and run again finishes with the same tables as an uninterrupted run; a
corrupted intermediate table is named, never read as data, and removed so that it is rebuilt."""

from __future__ import annotations

import copy
import logging
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import REPO, toy_submission
from test_workflow import SNAKEMAKE, TINY

from rescore.engine.runner import RunConfig, run_submission
from rescore.engine.sandbox import RETRY_LINE, Worker
from rescore.model.records import Submission
from rescore.model.tables import check_tables, read_parquet, write_parquet

CFG = RunConfig(strategies={"default": 1}, dtypes=("float32",), timeout_s=60, load_timeout_s=300)
TABLES = ["results/tables/cases.parquet", "results/tables/submissions.parquet", "results/tables/illusion.parquet"]
TIMING = ("wall_ms", "seconds", "elapsed", "limit_s")  # limit_s: from a measured reference time


def slow_correct() -> Submission:
    base = toy_submission("problem_scale.py", "torch_correct.py", dtypes=("float32",))
    path = REPO / "tests" / "fixtures" / "hacks" / "_slow_correct.py"
    return Submission(name="slow", problem=base.problem, source=path.read_text(), path=str(path), language="torch",
                      dtypes=("float32",))


def test_a_worker_killed_mid_case_is_retried_and_the_case_passes(caplog):
    """A SIGKILL the harness did not send (the host's OOM killer, most likely) is retried with the
    device alone, and that retry is a line of the log as a retry for memory is."""
    worker = Worker("cpu", 1 << 15)
    killed: list[int] = []

    def kill_once() -> None:  # the first time a case is running, SIGKILL the worker from outside
        while not killed:
            proc = worker.proc
            if proc is not None and getattr(worker, "_busy", False):
                time.sleep(0.5)
                os.kill(proc.pid, signal.SIGKILL)
                killed.append(proc.pid)
            time.sleep(0.05)

    original = worker._ask

    def ask(msg, timeout):
        worker._busy = msg[0] == "case"
        try:
            return original(msg, timeout)
        finally:
            worker._busy = False

    worker._ask = ask
    killer = threading.Thread(target=kill_once, daemon=True)
    killer.start()
    try:
        with caplog.at_level(logging.INFO, logger="rescore"):
            rows = run_submission(slow_correct(), CFG, worker, fixed=False)
    finally:
        worker.stop()
    assert killed and worker.starts == 2
    assert [r["outcome"] for r in rows] == ["pass"]
    retries = [m for r in caplog.records if (m := RETRY_LINE.search(r.getMessage()))]
    assert [(m.group(1), m.group(4)) for m in retries] == [("alone", "pass")]
    assert "signal 9" in retries[0].group(3)


def test_a_hang_starts_a_standby_that_the_restart_takes_over(tmp_path):
    """A request past half its time gets a second process started beside it; when the hang is killed
    the next request runs in that process (its start paid during the hang), and a quick request
    starts none."""
    cfg = RunConfig(strategies={"default": 1}, dtypes=("float32",), timeout_s=4, load_timeout_s=300)
    worker = Worker("cpu", 1 << 15, str(tmp_path))
    try:
        run_submission(toy_submission("problem_scale.py", "torch_correct.py", dtypes=("float32",)), cfg, worker,
                       fixed=False)
        assert worker.standby is None and worker.spawned == 1  # nothing ran long
        rows = run_submission(toy_submission("problem_scale.py", "../hacks/infinite_loop.py", dtypes=("float32",)),
                              cfg, worker, fixed=False)
        assert [r["outcome"] for r in rows] == ["timeout"] and worker.proc is None
        standby = worker.standby
        assert standby is not None and standby.proc.poll() is None  # started during the hang, still up
        after = run_submission(toy_submission("problem_scale.py", "torch_correct.py", dtypes=("float32",)), cfg,
                               worker, fixed=False)
        assert [r["outcome"] for r in after] == ["pass"]
        assert worker.proc is standby.proc and worker.standbys_used == 1 and worker.standby is None
    finally:
        worker.stop()
    assert standby.proc.poll() is not None and not Path(standby.scratch).exists()


@pytest.mark.parametrize("eager", [False, True])
def test_an_eager_worker_starts_its_standby_as_early_as_its_start_needs(tmp_path, eager):
    """`rescore check`'s worker is alone on its device: its standby starts early enough that a fresh
    process's start and load (`ready_s`, measured at its first load) end with the candidate's limit,
    at once where they take longer (a GPU's 7 s against a 5 s limit); any other worker's at half."""
    cfg = RunConfig(strategies={"default": 1}, dtypes=("float32",), timeout_s=4, load_timeout_s=300)
    worker = Worker("cpu", 1 << 15, str(tmp_path))
    worker.eager_standby = eager
    sent: list[float] = []
    started: list[float] = []
    ask, start_standby = worker._ask, worker._start_standby

    def asking(wire, timeout, **kwargs):
        if wire[0] == "case":
            sent.append(time.monotonic())
        return ask(wire, timeout, **kwargs)

    def starting():
        started.append(time.monotonic())
        start_standby()

    worker._ask, worker._start_standby = asking, starting
    try:
        run_submission(toy_submission("problem_scale.py", "torch_correct.py", dtypes=("float32",)), cfg, worker,
                       fixed=False)
        assert worker.ready_s is not None and 0 < worker.ready_s < 300  # its start and first load
        worker.ready_s = 60.0  # as slow to start as no limit here allows
        rows = run_submission(toy_submission("problem_scale.py", "../hacks/infinite_loop.py", dtypes=("float32",)),
                              cfg, worker, fixed=False)
    finally:
        worker.stop()
    assert [r["outcome"] for r in rows] == ["timeout"] and started
    after = started[0] - max(t for t in sent if t <= started[0])  # from the hanging case's request
    assert after < 1.0 if eager else after >= 1.5, after


def test_a_restart_after_a_hang_reads_the_load_its_standby_was_sent_and_sends_none(tmp_path):
    """The standby is sent the job's load when it starts: the restart reads that answer instead of
    loading again (on a GPU a start and a load are about 11 s a restart). A standby that loaded an
    earlier job has that answer read and dropped before the next job's load (the test above)."""
    from rescore.engine.phase_log import RESTART, PhaseLog

    cfg = RunConfig(strategies={"default": 2}, dtypes=("float32",), timeout_s=4, load_timeout_s=300,
                    settle_after=0)
    worker = Worker("cpu", 1 << 15, str(tmp_path))
    asked: list[tuple[str, bool]] = []
    ask = worker._ask

    def recording(wire, timeout, sent=None):
        asked.append((wire[0], sent is not None))
        return ask(wire, timeout, sent=sent)

    worker._ask = recording
    worker.phases = spent = PhaseLog()
    try:
        rows = run_submission(toy_submission("problem_scale.py", "../hacks/infinite_loop.py", dtypes=("float32",)),
                              cfg, worker, fixed=False)
    finally:
        worker.stop()
    assert [r["outcome"] for r in rows] == ["timeout", "timeout"] and worker.standbys_used >= 1
    assert asked[:4] == [("load", False), ("case", False), ("load", True), ("case", False)]
    assert spent.seconds[RESTART] > 0


def test_a_segfault_is_recorded_crash_without_a_retry(worker):
    fresh, before = worker.proc is None, worker.starts
    rows = run_submission(toy_submission("problem_scale.py", "segfault.py", dtypes=("float32",)), CFG, worker,
                          fixed=False)
    assert [r["outcome"] for r in rows] == ["crash"]
    assert "signal 11" in rows[0]["reason"] and "(after a retry)" not in rows[0]["reason"]
    assert worker.starts - before == int(fresh)  # the segfault repeats: no second worker was spent on it


def test_an_unmasked_kernel_fails_its_launch_and_the_worker_lives(worker):
    """Under the interpreter an access past a tensor is stopped before it corrupts the worker's heap."""
    cfg = RunConfig(strategies={"boundary": 4}, dtypes=("float32", "float16"), timeout_s=60, load_timeout_s=300)
    run_submission(toy_submission("problem_scale.py", "scale_correct.py"), cfg, worker, fixed=False)
    before = worker.starts
    rows = run_submission(toy_submission("problem_scale.py", "scale_unmasked.py"), cfg, worker, fixed=False)
    assert {r["outcome"] for r in rows} == {"crash"}, [(r["outcome"], r.get("reason")) for r in rows]
    assert all("out-of-bounds load" in r["reason"] and "`x_ptr`" in r["reason"] for r in rows)
    assert worker.starts == before and worker.proc is not None  # no case killed the worker
    after = run_submission(toy_submission("problem_scale.py", "scale_correct.py"), cfg, worker, fixed=False)
    assert {r["outcome"] for r in after} == {"pass"}


def test_a_corrupt_table_is_named_and_removed(tmp_path):
    good, bad = tmp_path / "shard-0.parquet", tmp_path / "shard-1.parquet"
    write_parquet(pd.DataFrame([{"submission_id": "a", "outcome": "pass"}]), good, "cases")
    write_parquet(pd.DataFrame([{"submission_id": "b", "outcome": "pass"}]), bad, "cases")
    bad.write_bytes(bad.read_bytes()[: bad.stat().st_size // 2])  # truncated, as by a full disk
    with pytest.raises(ValueError, match="shard-1.parquet"):
        read_parquet(bad, "cases")
    with pytest.raises(ValueError, match="shard-1.parquet.*\n|run the workflow again") as err:
        check_tables([str(good), str(bad)], "cases")
    assert str(bad) in str(err.value) and str(good) not in str(err.value)
    assert good.exists() and not bad.exists()
    partial = tmp_path / "partial.parquet"
    write_parquet(pd.DataFrame([{"x": 1}]), partial)
    with pytest.raises(ValueError, match="lacks columns"):
        read_parquet(partial, "cases")
    assert not list(tmp_path.glob(".*.tmp"))  # atomic writes leave no temporary behind


def _snakemake(work: Path, *args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([*SNAKEMAKE, "-d", str(work), *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True, **kw)


def _run(work: Path, *args: str) -> str:
    proc = _snakemake(work, *args)
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0, out[-3000:]
    return out


def _tables(work: Path) -> dict[str, pd.DataFrame]:
    out = {}
    for rel in TABLES:
        df = pd.read_parquet(work / rel)
        df = df.drop(columns=[c for c in df.columns if any(t in c for t in TIMING)])
        df = df.astype(str).sort_values(list(df.columns)).reset_index(drop=True)
        out[rel] = df
    return out


@pytest.fixture(scope="module")
def config() -> dict:
    cfg = copy.deepcopy(TINY)
    cfg.update(dumps={"toy": {"format": "corpus", "ops": ["relu"]}}, shards=2)
    cfg["fuzz"] = dict(cfg["fuzz"], strategies={"default": 1, "boundary": 1})
    return cfg


def _workdir(tmp_path_factory, name: str, config: dict) -> Path:
    work = tmp_path_factory.mktemp(name)
    (work / "config").mkdir()
    (work / "config" / "config.yaml").write_text(yaml.safe_dump(config))
    return work


def test_snakemake_killed_mid_run_resumes_to_the_same_tables(tmp_path_factory, config):
    whole = _workdir(tmp_path_factory, "whole", config)
    _run(whole, "--cores", "2", *TABLES)

    broken = _workdir(tmp_path_factory, "killed", config)
    proc = _snakemake(broken, "--cores", "1", *TABLES)  # one job at a time: the shards run one after the other
    shards = broken / "results" / "cases" / "toy"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None and not list(shards.glob("shard-*.parquet")):
        time.sleep(0.2)
    assert proc.poll() is None, "the run finished before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)  # the whole session, as a lost terminal or a scheduler would
    proc.wait()
    assert not (broken / TABLES[0]).exists()

    _run(broken, "--unlock")
    log = _run(broken, "--cores", "2", "--rerun-incomplete", *TABLES)
    assert "check_shard" in log
    first, second = _tables(whole), _tables(broken)
    for rel in TABLES:
        pd.testing.assert_frame_equal(first[rel], second[rel], obj=rel)

    # a corrupt shard is named by the stage that reads it, never read as data
    shard = next(shards.glob("shard-*.parquet"))
    shard.write_bytes(b"PAR1 this is not a parquet file")
    os.utime(shard, (time.time() + 5, time.time() + 5))
    proc = _snakemake(broken, "--cores", "1", TABLES[0])
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode != 0 and shard.name in out
