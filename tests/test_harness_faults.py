"""The harness's own faults are never a kernel's verdict (issue 28, item 3), on the CPU with stand-ins
(tests/fixtures/harness/): running out of memory beside other workers is retried with the device to
itself, and `skipped` with the bytes asked when it persists; the fixed check gets the same; the
caches libraries write have a place in the worker; a call the sandbox refuses is `skipped` with what
was refused and counted apart, never an illusion; `--device cuda` without CUDA is a usage error."""

from __future__ import annotations

import dataclasses
import logging
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml
from conftest import REPO, TOY

from rescore import stages
from rescore.analysis.study import illusion_table
from rescore.engine.runner import RunConfig, run_submission
from rescore.engine.sandbox import RETRY_LINE, Worker
from rescore.engine.sharing import CONTEXT_BYTES, FACTOR, DeviceShare
from rescore.engine.worker_env import worker_env
from rescore.model.findings import split
from rescore.model.language import detect_language
from rescore.model.outcomes import REFUSED_PREFIX, Outcome
from rescore.model.records import Problem, Submission
from rescore.runtime.device import DeviceUnavailable
from rescore.runtime.device_share import DeviceLock, Ledger, retry_waiting

FIX = REPO / "tests" / "fixtures" / "harness"
CFG = RunConfig(strategies={"default": 2}, dtypes=("float32",), timeout_s=60, load_timeout_s=300)


def stand_in(candidate: str, problem: Path = TOY / "problem_scale.py") -> Submission:
    p = Problem(problem_id=f"harness/{problem.stem}", source=problem.read_text(), path=str(problem), op=problem.stem)
    path = FIX / candidate if (FIX / candidate).exists() else TOY / candidate
    src = path.read_text()
    return Submission(name=path.stem, problem=p, source=src, path=str(path), language=detect_language(src),
                      dtypes=("float32",))


@pytest.fixture(scope="module")
def share_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("device-share")


@pytest.fixture(scope="module")
def shared_worker(share_dir):
    """A CPU worker whose device lock lives where the test's other "worker" takes it too."""
    w = Worker("cpu", 1 << 15, share=DeviceShare("cpu", folder=share_dir))
    yield w
    w.stop()


def other_worker_holds(share_dir: Path, seconds: float) -> tuple[threading.Thread, list[float]]:
    """Another worker's request on the same device: the lock held shared for `seconds`; the list gets
    the time it let go."""
    taken, released = threading.Event(), []

    def hold() -> None:
        lock = DeviceLock(share_dir, "host")
        with lock.shared():
            taken.set()
            time.sleep(seconds)
            released.append(time.monotonic())
        lock.close()

    t = threading.Thread(target=hold)
    t.start()
    taken.wait(10)
    return t, released


# -- out of memory beside other workers: again with the device to itself --------------------------


@pytest.mark.parametrize("candidate", ["oom_while_shared.py", "cublas_while_shared.py"])
def test_out_of_memory_beside_another_worker_passes_when_retried_alone(candidate, shared_worker, share_dir):
    """torch's OutOfMemoryError and cuBLAS's CUBLAS_STATUS_ALLOC_FAILED while another worker holds the
    device: each case (the fixed check too) runs again once the other has let go, alone, and passes."""
    other, released = other_worker_holds(share_dir, 1.5)
    rows = run_submission(stand_in(candidate), CFG, shared_worker)
    done = time.monotonic()
    other.join()
    assert [r["outcome"] for r in rows] == [Outcome.PASS] * 3, [r.get("reason") for r in rows]
    assert released and done >= released[0]  # the retry alone waited for the other worker's request
    assert not any(r.get("findings") for r in rows)


def test_out_of_memory_that_the_handed_back_caches_cure_does_not_wait_for_the_device_alone(
        shared_worker, share_dir, caplog):
    """A request out of memory runs again first with every worker's cache handed back, the device
    still shared: the other worker's running request goes on, and nothing waits for it to end (a retry
    alone stopped every shard of an H100 for 20 to 60 s). Its log line says which way it ran."""
    done, gave_up = threading.Event(), []

    def hold() -> None:  # another worker's request, running until the submission is done (or 30 s)
        lock = DeviceLock(share_dir, "host")
        with lock.shared():
            taken.set()
            gave_up.append(not done.wait(30))
        lock.close()

    taken = threading.Event()
    other = threading.Thread(target=hold)
    other.start()
    taken.wait(10)
    with caplog.at_level(logging.INFO, logger="rescore"):
        rows = run_submission(stand_in("oom_until_reclaimed.py"), CFG, shared_worker)
    done.set()
    other.join()
    assert gave_up == [False]  # the submission was done while the other request still ran
    assert [r["outcome"] for r in rows] == [Outcome.PASS] * 3, [r.get("reason") for r in rows]
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("retried")]
    assert len(lines) == 3 and all(line.startswith("retried with the caches handed back on host (") for line in lines)
    assert all(RETRY_LINE.search(line).group(4) == "pass" for line in lines), lines


def test_a_retry_alone_says_how_long_it_waited_for_the_running_requests(shared_worker, share_dir, caplog):
    """Still out of memory with the caches handed back, a request runs alone; its line says how long
    that retry took and how much of it was the wait for the other worker's running request."""
    other, released = other_worker_holds(share_dir, 4.0)
    with caplog.at_level(logging.INFO, logger="rescore"):
        rows = run_submission(stand_in("oom_while_shared.py"), CFG, shared_worker)
    other.join()
    assert [r["outcome"] for r in rows] == [Outcome.PASS] * 3
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("retried")]
    found = [RETRY_LINE.search(line) for line in lines]
    assert [m.group(1) for m in found] == ["alone"] * 3, lines
    assert float(found[0].group(6)) >= 0.5  # the first waited for the other worker's request to end
    assert all(float(m.group(5)) >= float(m.group(6)) for m in found)


def test_a_retry_alone_gives_up_on_a_long_request_before_waiting_as_long_as_it_runs(shared_worker, share_dir,
                                                                                     caplog, monkeypatch):
    """A retry alone holds the other workers back for ALONE_HOLD_S at most, then lets them in again;
    only its last try waits as long as the running request takes. The case is judged all the same, and
    the shard's log says how long each try that gave up held the others back."""
    import rescore.engine.sandbox as sandbox

    monkeypatch.setattr(sandbox, "ALONE_HOLD_S", 0.4)
    monkeypatch.setattr(sandbox, "LET_IN_S", 0.1)
    # The worker up first (alone, or first of its process, this test would start it): the other's
    # request must outlast the tries that give up, not the worker's start.
    run_submission(stand_in("scale_correct.py"), CFG, shared_worker)
    other, released = other_worker_holds(share_dir, 3.0)
    with caplog.at_level(logging.INFO, logger="rescore"):
        rows = run_submission(stand_in("oom_while_shared.py"), CFG, shared_worker)
    other.join()
    assert [r["outcome"] for r in rows] == [Outcome.PASS] * 3, [r.get("reason") for r in rows]
    messages = [r.getMessage() for r in caplog.records]
    gave_up = [m for m in messages if m.startswith(sandbox.NOT_ALONE)]
    assert len(gave_up) == sandbox.ALONE_TRIES - 1, messages  # the first case's tries while the other ran
    assert all("after 0.4 s: the running requests went on" in m for m in gave_up), gave_up
    found = [m for line in messages if (m := RETRY_LINE.search(line))]
    assert [m.group(1) for m in found] == ["alone"] * 3
    assert float(found[0].group(6)) >= 0.8  # held back over its tries: the two that gave up, then the last


def test_out_of_memory_that_room_cures_waits_for_a_report_of_it_not_for_the_device_alone(tmp_path, caplog):
    """Still out of memory with the caches handed back, a request waits for the device to report room
    for it (the other workers' answers write their measured free memory to the ledger) and runs again
    with the device still shared: the other worker's running request goes on, and nothing waits for
    it to end. Its line says how long it waited for room."""
    share = DeviceShare("cpu", capacity=8 << 30, folder=tmp_path)
    worker = Worker("cpu", 1 << 15, share=share)
    others = Ledger(tmp_path, "host", poll_s=0.01)
    others.reserve("other", 1 << 30, 8 << 30)  # a live holder, whose request runs meanwhile
    done, taken, gave_up = threading.Event(), threading.Event(), []

    def hold() -> None:  # the other worker's request, running until the submission is done (or 30 s)
        lock = DeviceLock(tmp_path, "host")
        with lock.shared():
            taken.set()
            gave_up.append(not done.wait(30))
        lock.close()

    def report() -> None:  # the others' answers: 6 GiB free, from 2.5 s after the first retry flagged
        while not done.is_set() and not retry_waiting(str(share.lock.paths["waiting"])):
            time.sleep(0.05)
        time.sleep(2.5)
        while not done.is_set():
            others.note_free(6 << 30)
            time.sleep(0.2)

    threads = [threading.Thread(target=hold), threading.Thread(target=report)]
    threads[0].start()
    taken.wait(10)
    threads[1].start()
    try:
        with caplog.at_level(logging.INFO, logger="rescore"):
            rows = run_submission(stand_in("oom_until_room.py"), CFG, worker)
    finally:
        done.set()
        for t in threads:
            t.join()
        worker.stop()
    assert gave_up == [False]  # the submission was done while the other request still ran
    assert [r["outcome"] for r in rows] == [Outcome.PASS] * 3, [r.get("reason") for r in rows]
    found = [m for r in caplog.records if (m := RETRY_LINE.search(r.getMessage()))]
    assert [m.group(1) for m in found] == ["once the device had room"], [r.getMessage() for r in caplog.records]
    assert float(found[0].group(6)) >= 1.0 and found[0].group(4) == "pass"


def test_out_of_memory_alone_too_is_skipped_with_the_bytes_asked(shared_worker):
    rows = run_submission(stand_in("always_oom.py"), CFG, shared_worker)
    assert [r["outcome"] for r in rows] == [Outcome.SKIPPED] * 3, [r.get("reason") for r in rows]
    for r in rows:
        assert r["reason"].startswith("out of memory with the host to itself: the candidate asked for 3.00 GiB")
        assert "oom_where_reference_fits" in split(r.get("findings"))  # the reference ran at those sizes
    subs = pd.DataFrame([stand_in("always_oom.py").row()])
    ill = illusion_table(pd.DataFrame(rows), subs).iloc[0]
    assert ill["fixed_verdict"] == "skipped" and ill["fuzz_verdict"] == "skipped" and not ill["illusion"]


def test_the_reference_out_of_memory_beside_others_still_gives_a_fixed_verdict(shared_worker):
    """The reference itself fails beside other workers (the fixed check: `the reference failed at its
    own sizes`; a fuzz case: every draw `rejected`): with the device to itself every case is judged."""
    sub = stand_in("torch_correct.py", FIX / "problem_oom_shared.py")
    rows = run_submission(sub, CFG, shared_worker)
    assert [r["outcome"] for r in rows] == [Outcome.PASS] * 3, [r.get("reason") for r in rows]


# -- the ledger: shards on one device share its memory by estimate ---------------------------------


def test_a_worker_waits_for_the_memory_its_submission_needs(tmp_path):
    """With the device's capacity taken by another holder, the worker's reservation (the context plus
    FACTOR x the reference's traced peak) waits after the load, runs nothing, until the other lets go."""
    capacity = CONTEXT_BYTES + (64 << 20)
    other = Ledger(tmp_path, "host", poll_s=0.05)
    other.reserve("other-shard", capacity - (1 << 20), capacity)
    share = DeviceShare("cpu", capacity=capacity, folder=tmp_path)
    worker = Worker("cpu", 1 << 15, share=share)
    seen_waiting: list[dict] = []

    def release_once_the_worker_waits() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            waiting = [e for k, e in other.entries().items() if k != "other-shard" and e["want"] is not None]
            if waiting:
                seen_waiting.extend(waiting)
                time.sleep(0.5)  # it stays waiting while the capacity is taken
                other.release("other-shard")
                return
            time.sleep(0.05)

    releaser = threading.Thread(target=release_once_the_worker_waits)
    releaser.start()
    try:
        rows = run_submission(stand_in("torch_correct.py"), CFG, worker)
        assert seen_waiting and share.waited_s >= 0.5
        assert [r["outcome"] for r in rows] == [Outcome.PASS] * 3
        inputs = 8 * 1024 * 4  # problem_scale's one float32 input; its reference holds about two of them
        assert inputs <= share.reference_bytes <= 4 * inputs
        assert seen_waiting[0]["want"] == CONTEXT_BYTES + FACTOR * share.reference_bytes
        assert other.entries()[share.owner]["held"] == CONTEXT_BYTES + FACTOR * share.reference_bytes
    finally:
        releaser.join()
        worker.stop()
    assert share.owner not in other.entries()  # released with the worker


# -- caches libraries write, and calls the sandbox refuses ----------------------------------------


def test_caches_libraries_write_land_in_the_worker_and_are_no_finding(worker):
    rows = run_submission(stand_in("caches_everywhere.py"), CFG, worker)
    assert [r["outcome"] for r in rows] == [Outcome.PASS] * 3, [r.get("reason") for r in rows]
    assert not any(r.get("findings") for r in rows), [r.get("findings") for r in rows]


def test_the_triton_cache_folder_exists_before_a_worker_starts(tmp_path, monkeypatch):
    """Triton makes its cache folder, parents included, at its first compile; on a fresh machine
    (no ~/.triton yet) that was a refused `os.mkdir('/root/.triton')` in every Triton kernel's case
    (the gpuemu corpus on the H100, 2026-12-05). The parent makes it before a worker starts."""
    cache = tmp_path / "home" / ".triton" / "cache"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache))
    env = worker_env(str(tmp_path / "scratch"), None, {})
    assert cache.is_dir() and env["TRITON_CACHE_DIR"] == str(cache)
    assert str(cache) in env["RESCORE_WRITABLE"].split(":")


def test_the_cuda_build_root_exists_before_a_worker_starts(tmp_path, monkeypatch):
    """torch's build of a submission's extension inside a worker makes its folder under the root with
    os.makedirs; the audit hook allows that folder only, so a root that did not exist yet was a
    refused `os.mkdir` of the root (the GPU fixtures shared_race and slack_write on the H100)."""
    root = tmp_path / "rescore-cuda"
    monkeypatch.setenv("RESCORE_CUDA_CACHE", str(root))
    env = worker_env(str(tmp_path / "scratch"), None, {})
    assert root.is_dir() and env["RESCORE_CUDA_CACHE"] == str(root)
    build = ("import os, sys\nfrom rescore.worker.confine import Audit\n"
             "audit = Audit([]); audit.allow(os.path.join(sys.argv[1], 'abc')); audit.install(); audit.armed = True\n"
             "os.makedirs(os.path.join(sys.argv[1], 'abc', 'build'), exist_ok=True)\n")
    made = subprocess.run([sys.executable, "-c", build, str(root)], capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    missing = subprocess.run([sys.executable, "-c", build, str(tmp_path / "missing")], capture_output=True,
                             text=True, timeout=60)
    assert missing.returncode != 0 and "rescore sandbox: os.mkdir" in missing.stderr


def test_rescores_own_exception_is_skipped_saying_so_never_a_kernels_crash():
    """Harness code that raises outside the candidate's calls answers `skipped` with a reason that
    names rescore's fault (a decoy draw's dtype bug once made 2,385 cases of an H100 run `crash`, every
    control flagged); a CUDA error raised there is still the kernel's (its launch faulted)."""
    from rescore.model.outcomes import FLAGGING, HARNESS_FAULT
    from rescore.worker.exceptions import harness_failure

    own = harness_failure(RuntimeError("Index put requires the source and destination dtypes match"), None)
    assert own["outcome"] == Outcome.SKIPPED and own["outcome"] not in FLAGGING
    assert own["reason"].startswith(HARNESS_FAULT) and "Index put" in own["reason"]
    cuda = harness_failure(RuntimeError("CUDA error: an illegal memory access was encountered"), None)
    assert cuda["outcome"] == Outcome.CRASH and "illegal memory access" in cuda["reason"]


def test_the_harness_raising_between_the_candidates_calls_is_its_fault_and_the_candidates_raise_its_own(
        monkeypatch, tmp_path):
    """Inside a case's candidate block, harness code (a snapshot of the inputs, a seal, an earlier
    call's decoy draw) that raises is rescore's fault: the request's answer is a harness fault, not the
    kernel's `crash`. An exception the candidate's own call raises stays its `crash`."""
    from conftest import toy_submission

    import rescore.worker.executor as ex
    from rescore.model.outcomes import HARNESS_FAULT
    from rescore.worker import case_inputs
    from rescore.worker.exceptions import harness_failure
    from rescore.worker.protocol import job_of

    executor = ex.Executor("cpu", 1 << 12)
    executor.load(job_of(toy_submission("problem_scale.py", "scale_correct.py", dtypes=("float32",))))
    assert executor.run_case("default", 1, "float32", None)["outcome"] == Outcome.PASS

    def broken_snapshot(xs):
        raise RuntimeError("the harness's own snapshot broke")

    monkeypatch.setattr(case_inputs, "snapshot", broken_snapshot)
    with pytest.raises(RuntimeError, match="own snapshot broke") as raised:
        executor.run_case("default", 2, "float32", None)
    answer = harness_failure(raised.value, executor.candidate_file)
    assert answer["outcome"] == Outcome.SKIPPED and answer["reason"].startswith(HARNESS_FAULT)
    monkeypatch.undo()

    raising = tmp_path / "scale_raises.py"
    raising.write_text((TOY / "scale_correct.py").read_text().replace(
        "def forward(self", "def forward(self, *a, **k):\n        raise RuntimeError('the kernel gave up')\n\n"
                            "    def _unused(self", 1))
    executor.load(job_of(toy_submission("problem_scale.py", str(raising), dtypes=("float32",))))
    row = executor.run_case("default", 3, "float32", None)
    assert row["outcome"] == Outcome.CRASH and "the kernel gave up" in row["reason"]


def test_the_harness_raising_in_a_repeat_of_a_case_fails_the_experiments_not_the_kernel(monkeypatch):
    """A repeat of a case (the race experiment's) in which rescore's own code raises (the refill of
    the case's tensors after its decoy call) raises, so the experiment confirms nothing and the case
    keeps its verdict: never a repeat that differs, which reads as a race."""
    from conftest import toy_submission

    import rescore.worker.executor as ex
    from rescore.worker import case_inputs, explain
    from rescore.worker.protocol import job_of

    executor = ex.Executor("cpu", 1 << 12)
    executor.load(job_of(toy_submission("problem_scale.py", "scale_correct.py", dtypes=("float32",))))
    traces = []
    with monkeypatch.context() as m:  # the case's trace, as its experiments get it
        m.setattr(explain, "wanted", lambda ctx, row: True)
        m.setattr(explain, "_confirm", lambda ctx, spec, row, override, run_case, trace, decoy: traces.append(trace))
        assert executor.run_case("default", 1, "float32", None)["outcome"] == Outcome.PASS
    trace = traces[0]
    assert trace is not None and trace.decoy is not None
    assert explain.repeat_case(executor, trace)["outcome"] == Outcome.PASS  # as the case ended

    def broken_refill(tensors, values):
        raise RuntimeError("the harness's own refill broke")

    monkeypatch.setattr(case_inputs, "refill", broken_refill)
    with pytest.raises(RuntimeError, match="own refill broke"):
        explain.repeat_case(executor, trace)


def test_every_strategy_at_every_claimed_dtype_runs_without_a_harness_fault(shared_worker):
    """A correct kernel through the strategies whose value classes sprinkle special values (NaN, Inf,
    subnormals) and their decoys, at float32 and float16: every case passes, none is a harness fault."""
    cfg = RunConfig(strategies={s: 2 for s in ("nan_injected", "adversarial", "boundary", "op_domain")},
                    dtypes=("float32", "float16"), timeout_s=60, load_timeout_s=300)
    rows = run_submission(dataclasses.replace(stand_in("scale_correct.py"), dtypes=("float32", "float16")), cfg,
                          shared_worker)
    assert len(rows) == 1 + 4 * 2 * 2
    assert all(r["outcome"] == Outcome.PASS for r in rows), [(r.get("strategy"), r.get("dtype"), r.get("reason"))
                                                             for r in rows if r["outcome"] != Outcome.PASS]


def test_a_refused_write_is_skipped_and_counted_apart_never_an_illusion(worker):
    """Right at the benchmark's sizes (the fixed check passes), a refused write at every other size:
    those cases are `skipped` saying what was refused, with the finding, and the submission is no
    illusion (it was one when a refusal was the kernel's `crash`)."""
    escape = Path("/tmp/rescore-refused-off-benchmark.txt")
    escape.unlink(missing_ok=True)
    sub = stand_in("refused_off_benchmark.py")
    rows = run_submission(sub, CFG, worker)
    fixed, fuzz = rows[0], rows[1:]
    assert fixed["outcome"] == Outcome.PASS
    assert [r["outcome"] for r in fuzz] == [Outcome.SKIPPED] * 2, [r.get("reason") for r in fuzz]
    for r in fuzz:
        assert r["reason"].startswith(REFUSED_PREFIX + "writing /tmp/rescore-refused-off-benchmark.txt")
        assert "(at refused_off_benchmark.py:" in r["reason"] and split(r["findings"]) == {"fs_escape"}
    assert not escape.exists()
    ill = illusion_table(pd.DataFrame(rows), pd.DataFrame([sub.row()])).iloc[0]
    assert ill["refused_cases"] == 2 and ill["skipped_cases"] == 2
    assert ill["fixed_verdict"] == "pass" and ill["fuzz_verdict"] == "skipped" and not ill["illusion"]


# -- a device that cannot run is a usage error ----------------------------------------------------

NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine runs CUDA: nothing to refuse")


def rescore(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rescore.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=300)


@NO_CUDA
@pytest.mark.parametrize("command", [
    ["check", str(TOY / "problem_scale.py"), str(TOY / "torch_correct.py"), "--device", "cuda", "--cases", "2"],
    ["replay", str(TOY / "problem_scale.py"), str(TOY / "torch_correct.py"), "--device", "cuda", "--seed", "1"],
])
def test_cuda_without_cuda_exits_2_with_one_line_and_no_verdict(command):
    r = rescore(*command)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stdout == ""  # no verdict, no summary
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"rescore {command[0]}: device cuda cannot run here: ")
    assert "--device cpu" in lines[0]


@NO_CUDA
def test_a_pipeline_stage_on_cuda_without_cuda_stops_with_that_line_not_per_case_crashes():
    """The check shard's first load meets a worker that cannot start on CUDA: the stage fails with the
    line (DeviceUnavailable), and no case row says `crash`."""
    worker = Worker("cuda", 1 << 20)
    try:
        with pytest.raises(DeviceUnavailable, match="^device cuda cannot run here: torch .* use --device cpu"):
            run_submission(stand_in("torch_correct.py"), RunConfig(device="cuda", strategies={"default": 1},
                                                                   dtypes=("float32",)), worker)
    finally:
        worker.stop()
    with pytest.raises(DeviceUnavailable, match="^device cuda cannot run here"):
        config = dict(yaml.safe_load((REPO / "config" / "config.yaml").read_text()), device="cuda")
        stages.run_shard("unused/manifest.json", 0, 1, config, "unused.parquet", "unused.parquet", "unused")


LIMITED = RunConfig(strategies={"default": 2}, dtypes=("float32",), timeout_s=60, call_floor_s=1.0,
                    load_timeout_s=300)  # a call's limit of about 1 s


def _beside_another_worker(tmp_path: Path, others: bool) -> Worker:
    """A CPU worker whose ledger has a capacity (as a GPU's), with another live worker holding 1 GiB
    of it when `others`."""
    share = DeviceShare("cpu", capacity=8 << 30, folder=tmp_path)
    if others:
        Ledger(tmp_path, "host").reserve("other", 1 << 30, 8 << 30)
    return Worker("cpu", 1 << 15, share=share)


def test_a_timeout_at_its_calls_limit_beside_other_workers_is_tried_again_with_a_longer_limit(tmp_path, caplog):
    """A correct kernel whose first call takes 3 s, against a call limit of 1 s: beside another worker
    holding the device's memory, its timeout is tried again with CONFIRM_FACTOR times the limit, and
    the case is judged on that try (the line says so); alone on the device the timeout is the
    kernel's at once, as before."""
    from rescore.engine.sandbox import CONFIRM_FACTOR, CONFIRM_LINE

    cfg = LIMITED
    assert CONFIRM_FACTOR * cfg.call_floor_s > 3.0
    worker = _beside_another_worker(tmp_path / "shared", others=True)
    try:
        with caplog.at_level(logging.INFO, logger="rescore"):
            rows = run_submission(stand_in("slow_first_call.py"), cfg, worker)
    finally:
        worker.stop()
    assert [r["outcome"] for r in rows] == [Outcome.PASS] * 3, [r.get("reason") for r in rows]
    found = [m for r in caplog.records if (m := CONFIRM_LINE.search(r.getMessage()))]
    assert [m.group(3) for m in found] == ["pass"] and "beside 1 other workers' requests" in found[0].group(1)
    alone = _beside_another_worker(tmp_path / "alone", others=False)
    try:
        rows = run_submission(stand_in("slow_first_call.py"), cfg, alone)
    finally:
        alone.stop()
    assert rows[0]["outcome"] == Outcome.TIMEOUT and "tried again" not in rows[0]["reason"]


def test_a_hang_beside_other_workers_is_a_timeout_at_the_longer_limit_too(tmp_path):
    """The kernel that never returns: tried again beside other workers, its timeout stands, its reason
    saying that the first try's limit was shorter."""
    from test_stragglers import hack

    cfg = LIMITED
    worker = _beside_another_worker(tmp_path, others=True)
    try:
        rows = run_submission(hack("infinite_loop"), cfg, worker)
    finally:
        worker.stop()
    assert rows[0]["outcome"] == Outcome.TIMEOUT and 3.9 < rows[0]["limit_s"] < 4.5
    assert "tried again with 4x the limit: the first try's, 1" in rows[0]["reason"]
