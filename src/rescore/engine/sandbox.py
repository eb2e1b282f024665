"""Runs untrusted candidate code in a worker process that can crash, hang or lie without harm.

One worker serves many cases (a fresh CUDA process costs seconds). A case that kills the worker is
`crash`, one that outlives its timeout is `timeout`; either way the worker is restarted, the job is
re-loaded, the case is retried once, and the run goes on. A candidate's call past half its time gets a
standby process started beside it, which a restart takes over: a hang then costs its limit and a load, not
also a fresh start (on a GPU, Python, torch and a CUDA context: 5-12 s); `rescore check`'s worker starts it
as early as a fresh start needs (`Worker.eager_standby`). Results come back over a pipe that
belongs to the harness, each answer tagged with its request's random token; the candidate's own
stdout and stderr go to a log file, which is read only to notice verdict-like claims in it.

The worker starts in a scratch folder of its own (its cwd and TMPDIR, removed when it stops), with a
scrubbed environment, rlimits and an audit hook (`confine.py`), and, where the machine allows it,
in a network namespace of its own (`unshare -n`: no interface but a down loopback).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import BinaryIO

from rescore.engine import phase_log
from rescore.engine.pacing import HARNESS_TIMEOUT
from rescore.engine.phase_log import PhaseLog
from rescore.engine.sharing import DeviceShare, alone_result
from rescore.engine.turn_clock import TurnClock
from rescore.engine.worker_env import network_isolation, worker_env
from rescore.model.findings import claims_verdict, merge
from rescore.model.oom import requested_bytes, size_text
from rescore.model.outcomes import Outcome
from rescore.runtime.device import NO_DEVICE_EXIT, DeviceUnavailable
from rescore.worker.protocol import (
    ALONE_KEY,
    CANDIDATE,
    MEMORY_KEY,
    PHASES_KEY,
    RSS_KEY,
    Kind,
    Load,
    Request,
    Status,
    Stop,
    encode,
    scale_of,
)

__all__ = ["Worker", "WorkerDied", "network_isolation", "request_with_retry", "run_with_retry"]

log = logging.getLogger("rescore")
MAX_LOADS = int(os.environ.get("RESCORE_WORKER_MAX_LOADS", "500"))  # then a fresh worker (bounded memory)
MAX_RSS = int(float(os.environ.get("RESCORE_WORKER_MAX_RSS_GB", "8")) * (1 << 30))
CLAIM_SCAN_BYTES = 1 << 20


# Deaths the candidate's own code causes (a bad pointer under the interpreter, a native abort):
# running it again gives the same death, so the case is not retried.
CANDIDATE_SIGNALS = {signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGFPE, signal.SIGILL}
# Requests whose time is split into turns (`turn_clock.py`): past its limit a candidate's turn is a
# `timeout`, the harness's a HARNESS_TIMEOUT (pacing.py: a limit of this machine, recorded `skipped`,
# never retried, never counted towards settling); a load or a timing request keeps one timeout.
TURNED = (Kind.FIXED.value, Kind.CASE.value, Kind.EXPLAIN.value)


class WorkerDied(Exception):
    def __init__(self, outcome: str, reason: str, findings: set[str] | None = None, signum: int | None = None,
                 kind: str | None = None, limit_s: float | None = None):
        super().__init__(reason)
        self.outcome, self.reason = outcome, reason
        self.findings = set(findings or ())
        self.signum = signum  # the signal that ended the worker, if one did
        self.kind = kind or outcome  # how it ended, in words that compare equal for the same death
        self.limit_s = limit_s  # a timeout at a call's own limit (`worker/turns.py`): that limit


def _kill_wrapped_workers(root: int) -> bool:
    """SIGKILL the worker processes (`python -m rescore.worker`) below `root`, a wrapper's pid, and
    leave the wrapper itself running; False when there is none."""
    parents: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                stat = Path(f"/proc/{entry.name}/stat").read_text()
                parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    below: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier and pid not in below}
        below |= frontier
    killed = False
    for pid in below:
        try:
            if b"rescore.worker" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0"):
                os.kill(pid, signal.SIGKILL)
                killed = True
        except (OSError, ProcessLookupError):
            continue
    return killed


def _absolute_load(wire: tuple) -> tuple:
    """A load's wire tuple with its job's paths absolute (the worker runs in its own scratch folder)."""
    return (Kind.LOAD.value, _absolute_job(wire[1]))


def _absolute_job(job: dict) -> dict:
    """The job with relative source paths made absolute: the worker's cwd is its scratch folder."""
    job = dict(job)
    for part in ("problem", "submission"):
        spec = dict(job.get(part) or {})
        path = spec.get("path")
        if path and not os.path.isabs(path) and os.path.exists(path):
            spec["path"] = os.path.abspath(path)
        job[part] = spec
    return job


STANDBY_AT = 0.5  # the share of the candidate's turn after which a standby process starts (`Worker._start_standby`)


@dataclasses.dataclass
class _Process:
    """One started worker process, its pipes, log and scratch folder."""

    proc: subprocess.Popen
    send_conn: Connection
    recv_conn: Connection
    log: BinaryIO
    log_path: Path
    scratch: str
    ahead: tuple[bytes, dict] | None = None  # the token and job of a load sent before it was taken over

    def close(self) -> None:
        """End an unused process (a standby no restart took) and remove what it left."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        for conn in (self.send_conn, self.recv_conn):
            with contextlib.suppress(OSError):
                conn.close()
        self.log.close()
        shutil.rmtree(self.scratch, ignore_errors=True)


class Worker:
    """A worker process and the pipes to it."""

    def __init__(self, device: str, budget: int, log_dir: str | None = None, wrapper: list[str] | None = None,
                 extra_env: dict[str, str] | None = None, gpu: str | None = None, explain: bool = True,
                 share: DeviceShare | None = None):
        self.device, self.budget = device, budget
        # The lock every request holds on the device and the memory this worker reserves there
        # (`sharing.py`): a case that runs out of memory is retried with the caches handed back, then alone.
        self.share = share if share is not None else DeviceShare(device, gpu)
        # The device this worker runs on (CUDA_VISIBLE_DEVICES, `gpus.worker_gpu`); None leaves it as
        # inherited. Every restart starts on it again: a lost context costs the other GPUs nothing.
        self.gpu = gpu
        self.explain = explain  # the worker runs the experiments that confirm a failure's cause
        # A command the worker runs under (`compute-sanitizer --tool memcheck ...`: sanitizer.py), and
        # variables it adds to the scrubbed environment; the confinement inside the worker is the same.
        self.wrapper = list(wrapper or [])
        self.extra_env = dict(extra_env or {})
        self.log_dir = Path(log_dir or tempfile.gettempdir()).absolute()
        self.proc: subprocess.Popen | None = None
        self.job: dict | None = None
        self.starts = 0
        self.loads = 0
        self.last_rss = 0
        self.peak_rss = 0  # the largest resident memory any of this Worker's processes reached
        self.scratch: str | None = None
        self.isolation = "unstarted"
        self.load_timeout = 600.0  # seconds to start a worker and re-load its job after a restart
        # Seconds a stopped worker (and its wrapper: a sanitizer tears down and writes its summary
        # after the worker ends) gets to exit before the whole group is killed; and, under a
        # wrapper, seconds the wrapper gets to end after its worker alone was killed (a hang), so
        # that it can still write its report. sanitizer.py raises both; 5 s and 0 (the group at once).
        self.exit_wait_s = 5.0
        self.wrapper_grace_s = 0.0
        # A candidate's turn's limit from the reference's own time (`pacing.call_limit`); None: only the
        # request's timeout
        self.call_limit = None
        self.phases: PhaseLog | None = None  # where the requests' time goes (the phase table); None: not kept
        self._starting: str | None = None  # the phase the next answer's wait is charged to (a fresh worker's start)
        self._whole: str | None = None  # the phase the next request's whole time is charged to (a restart's load)
        self._started_in = 0.0
        self.standby: _Process | None = None  # a process started beside a long request (`_start_standby`)
        self.standbys_used = 0  # restarts that took over a standby
        self.spawned = 0  # processes started, standbys included (their log files' numbers)
        self.device_waited_s = 0.0  # waits for the device (memory, a retry alone), over the worker's life
        self.killed_s = 0.0  # waits for killed processes to exit (`phase_log.KILL`), over the worker's life
        # A worker alone on its device (`rescore check`) starts its standby as early as a hang needs:
        # a fresh process's start and load (`ready_s`, measured at its first load) before the limit.
        self.eager_standby = False
        self.ready_s: float | None = None
        self._spawned_at: float | None = None  # when the process in hand was started fresh, until its load
        self._ahead: tuple[bytes, dict] | None = None  # a load the process in hand was sent as a standby

    def start(self) -> None:
        """A worker process: the standby when one is up (its start, and its load of the job it was started
        in, already paid beside a hang: `request` reads that load's answer), else a new one."""
        standby, self.standby = self.standby, None
        if standby is not None and standby.proc.poll() is None:
            self.standbys_used += 1
        else:
            if standby is not None:
                standby.close()
            standby = self._spawn()
            self._spawned_at = time.monotonic()
        self.proc, self.send_conn, self.recv_conn = standby.proc, standby.send_conn, standby.recv_conn
        self.log, self.log_path, self.scratch = standby.log, standby.log_path, standby.scratch
        self._ahead = standby.ahead
        self.log_pos = 0
        self.starts += 1
        self.loads = 0

    def prestart(self) -> None:
        """Start the process ahead of the first request, so that its start (a Python with torch, on a GPU
        a device context: about 10 s on a loaded H200) runs beside other work, a shard's CUDA builds;
        what the first request still waits for of it is charged to `worker_start`."""
        if self.proc is None:
            self.start()
            self._starting, self._started_in = phase_log.WORKER_START, 0.0

    def _spawn(self) -> _Process:
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        scratch = tempfile.mkdtemp(prefix="rescore-worker-")
        env = worker_env(scratch, self.gpu, {**self.share.env(), **self.extra_env})
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"worker-{os.getpid()}-{id(self)}-{self.spawned}.log"
        self.spawned += 1
        out = open(log_path, "wb")
        prefix = network_isolation()
        self.isolation = "network namespace" if prefix else "audit hook only"
        proc = subprocess.Popen(
            [
                *prefix,
                *self.wrapper,
                sys.executable,
                "-m",
                "rescore.worker",
                "--fd-in",
                str(to_child_r),
                "--fd-out",
                str(from_child_w),
                "--device",
                self.device,
                "--budget",
                str(self.budget),
                *([] if self.explain else ["--no-explain"]),
            ],
            pass_fds=(to_child_r, from_child_w),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=scratch,
            start_new_session=True,
        )
        os.close(to_child_r)
        os.close(from_child_w)
        return _Process(proc, Connection(to_child_w, readable=False), Connection(from_child_r, writable=False),
                        out, log_path, scratch)

    def _start_standby(self) -> None:
        """A second process, started while a request runs long, that takes over if the request's worker
        is killed, and is sent the job's load at once: a restart then reads that load's answer instead
        of waiting for a start and a load (on a GPU a torch, a device context and the models: about 11
        s a restart on an H100). `_wait` starts none under a wrapper (a sanitizer run reports on the
        one process it watches)."""
        self.standby = self._spawn()
        if self.job is not None:
            token = os.urandom(16)
            with contextlib.suppress(OSError):  # a process that died at once: `start` spawns another
                self.standby.send_conn.send((token, _absolute_load(encode(Load(self.job)))))
                self.standby.ahead = (token, self.job)

    def stop(self) -> None:
        self.share.release()
        if self.standby is not None:
            self.standby.close()
            self.standby = None
        if self.proc is None:
            return
        self._note_peak()
        try:
            self.send_conn.send((os.urandom(16), encode(Stop())))
        except (OSError, EOFError):
            pass
        try:
            self.proc.wait(timeout=self.exit_wait_s)
        except subprocess.TimeoutExpired:
            self._kill()
        self._close()

    def _kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self._note_peak()
            if self.wrapper and self.wrapper_grace_s > 0 and _kill_wrapped_workers(self.proc.pid):
                try:
                    self.proc.wait(timeout=self.wrapper_grace_s)
                except subprocess.TimeoutExpired:
                    pass
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            began = time.monotonic()
            self.proc.wait()  # on a GPU, until the driver has torn down its context (a kernel that spins too)
            waited = time.monotonic() - began
            self.killed_s += waited
            self._charge(phase_log.KILL, waited)

    def _note_peak(self) -> None:
        """The worker's peak resident memory (VmHWM), read while it still exists."""
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    self.peak_rss = max(self.peak_rss, int(line.split()[1]) * 1024)
        except (OSError, ValueError, AttributeError):
            pass

    def _close(self) -> None:
        for conn in (getattr(self, "send_conn", None), getattr(self, "recv_conn", None)):
            if conn is not None:
                try:
                    conn.close()
                except OSError:
                    pass
        if getattr(self, "log", None):
            self.log.close()
        if self.scratch:
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = None
        self.proc = None
        self._ahead = None

    def _tail(self) -> str:
        try:
            return self.log_path.read_bytes()[-400:].decode("utf-8", "replace").strip().replace("\n", " | ")
        except OSError:
            return ""

    def _claims(self) -> set[str]:
        """`stdout_claim` when what the worker printed since the last request reads like a verdict."""
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(self.log_pos)
                new = fh.read(CLAIM_SCAN_BYTES)
                self.log_pos = fh.seek(0, os.SEEK_END)
        except (OSError, AttributeError):
            return set()
        return {"stdout_claim"} if new and claims_verdict(new.decode("utf-8", "replace")) else set()

    def request(self, msg: Request, timeout: float):
        """Send one message; return the worker's answer, or raise WorkerDied (crash / timeout)."""
        load = isinstance(msg, Load)
        began = time.monotonic()
        if load and self.proc is not None and (self.loads >= MAX_LOADS or self.last_rss > MAX_RSS):
            self.stop()  # a fresh worker for the next submission: memory stays bounded over a long run
        again = False  # a fresh process for the job in hand, which must load it again
        if self.proc is None:
            again = self.job is not None and not load
            self.start()
            self._starting, self._started_in = (phase_log.RESTART if again else phase_log.WORKER_START,
                                                time.monotonic() - began)
        if again or self._ahead is not None:  # a fresh process's start and load are not the case's time
            reload = max(timeout, self.load_timeout)
            if not self._read_ahead(reload, again) and again:
                self._whole = phase_log.RESTART
                self._ask(encode(Load(self.job)), reload)
        if load:
            self.share.begin()
        else:
            self.share.at(scale_of(msg))
            if self.share.lock.held is None:  # a retry alone holds the device already: it waits for no one
                self._reserve()
        result = self._ask(encode(msg), timeout)
        if load and self.share.lock.held is None:
            self._reserve()  # the new submission's estimate, waited for outside its load's time
        return result

    def _read_ahead(self, timeout: float, reload: bool) -> bool:
        """Read the answer to the load a standby taken over was sent (`_start_standby`). True when it
        reloads the job in hand (`reload`: a restart inside a submission); else it is dropped (the
        request is the next job's load, or the standby was started in an earlier job), and a failure
        there, which is that job's, only makes way for a fresh process."""
        ahead, self._ahead = self._ahead, None
        if ahead is None:
            return False
        token, job = ahead
        self._whole = phase_log.RESTART
        if reload and job is self.job:
            self._ask(encode(Load(job)), timeout, sent=token)
            return True
        try:
            self._ask(encode(Load(job)), timeout, sent=token)
        except WorkerDied:
            self.start()
            self._starting, self._started_in = phase_log.RESTART, 0.0
        return False

    def _reserve(self) -> None:
        """The device memory the submission needs, the wait for it charged as `memory_wait` (and the
        most it held, as `reserved_bytes`)."""
        self._charge(phase_log.MEMORY_WAIT, self.share.reserve())
        if self.phases is not None:
            self.phases.reserved_bytes = max(self.phases.reserved_bytes, self.share.held)

    def _ask(self, wire: tuple, timeout: float, sent: bytes | None = None):
        """Send one wire tuple (`protocol.encode`) and wait for its answer (the worker's notes of whose
        turn it is on the way: `_wait`); `sent`: the token it was sent with already (a standby's load)."""
        if wire[0] == Kind.LOAD:
            wire = _absolute_load(wire)
            self.loads += 1
        token = sent or os.urandom(16)
        began = time.monotonic()
        starting, self._starting = self._starting, None
        charge, self._whole = self._whole, None  # the phase the whole request's time goes to, if one
        # A load holds no lock: it allocates little on the device and may build a CUDA extension
        # for minutes, which a retry alone would wait for with every other shard stopped behind it.
        held = self.share.lock.shared() if wire[0] != Kind.LOAD else contextlib.nullcontext()
        locked = 0.0  # waiting for a retry that holds the device alone
        killed = self.killed_s  # a kill inside the request is charged as `kill`, not twice
        try:
            with held:
                locked = time.monotonic() - began
                # the request's time runs from here: the wait for the lock is no turn's
                clock = TurnClock(wire[0] in TURNED, timeout, self.call_limit, began + locked)
                if sent is None:
                    self.send_conn.send((token, wire))
                packet = self._wait(token, clock)
        except WorkerDied:
            self._charge(charge or phase_log.TIMEOUT_WAIT, time.monotonic() - began - (self.killed_s - killed))
            raise
        except (EOFError, OSError, BrokenPipeError) as exc:
            self._charge(charge or phase_log.DIED, time.monotonic() - began)
            code = self.proc.wait() if self.proc else None
            tail = self._tail()
            if code == NO_DEVICE_EXIT:
                self._close()
                raise DeviceUnavailable(tail.rsplit(" | ", 1)[-1]) from exc
            found = self._claims()
            self._close()
            signum = -code if code is not None and code < 0 else None
            what = f"signal {signum}" if signum else f"exit code {code}"
            if code is not None and code >= 0:
                found.add("exits")
            raise WorkerDied(Outcome.CRASH, f"the worker died ({what}){': ' + tail if tail else ''}", found, signum,
                             kind=what) from exc
        found = self._claims()
        if not (isinstance(packet, tuple) and len(packet) == 3 and packet[0] == token and isinstance(packet[2], dict)):
            self._kill()
            self._close()
            found.add("forged_result")
            raise WorkerDied(Outcome.CRASH, "the result channel carried a message the harness did not send", found,
                             kind="a forged result")
        _, status, result = packet
        if wire[0] == Kind.LOAD and self._spawned_at is not None:  # a fresh process's first answer
            self.ready_s, self._spawned_at = time.monotonic() - max(self._spawned_at, began), None
        if status == Status.OK and self.recv_conn.poll(0) and not self._exited():
            found.add("forged_result")  # more than one answer to one request: something else wrote too
            status = Status.RESTART
        spent = result.pop(PHASES_KEY, None)
        spent = spent if isinstance(spent, dict) else {}
        self._charge(phase_log.DEVICE_WAIT, locked)
        waited = time.monotonic() - began - locked
        if charge is not None:
            self._charge(charge, waited + (self._started_in if starting else 0.0))
        else:
            if self.phases is not None:
                self.phases.add_all(spent)
            busy = sum(v for v in spent.values() if isinstance(v, (int, float)))
            self._charge(starting or phase_log.IPC, waited - busy + (self._started_in if starting else 0.0))
        if clock.limit_s is not None:
            result["limit_s"] = round(clock.limit_s, 3)
        if self.phases is not None:
            self.phases.limit_use = max(self.phases.limit_use, clock.most_used)
        self.last_rss = int(result.pop(RSS_KEY, 0) or 0)
        memory = result.pop(MEMORY_KEY, None)
        self.share.observe(memory)
        if self.phases is not None:
            self.phases.observe_memory(memory)
        self.peak_rss = max(self.peak_rss, self.last_rss)
        if status == Status.RESTART:
            self._kill()
            self._close()
        if found:
            result["findings"] = merge(result.get("findings"), found)
        return result

    def _wait(self, token: bytes, clock: TurnClock):
        """The request's answer, reading the notes of whose turn it is before it; WorkerDied (after
        killing the worker) when the turn in hand runs past its deadline."""
        while True:
            now = time.monotonic()
            left = clock.deadline - now
            # the candidate's call past half its time may be a hang: a standby starts beside it (never
            # for the harness's own turns, which a loaded machine slows and a second start would slow more)
            at = self._standby_at(clock)
            wanted = self.standby is None and not self.wrapper and clock.by == CANDIDATE and left > 0
            if wanted and now >= at:
                self._start_standby()
                continue
            early = wanted and now < at
            if left <= 0 or not self.recv_conn.poll(at - now if early else left):
                if early and left > 0:
                    continue  # its time to start a standby
                claims = self._claims()
                self._kill()
                self._close()
                end = clock.expired()
                raise WorkerDied(end.outcome, end.reason, claims, kind=end.kind, limit_s=end.limit_s)
            packet = self.recv_conn.recv()
            if (isinstance(packet, tuple) and len(packet) == 3 and packet[0] == token and packet[1] == Status.NOTE
                    and isinstance(packet[2], dict)):
                clock.note(packet[2])
                continue
            clock.note({})  # the answer ends the turn in hand
            return packet

    def _standby_at(self, clock: TurnClock) -> float:
        """When a standby starts beside the candidate's turn in hand: at STANDBY_AT of its limit, or for
        an eager worker early enough that a fresh process's start and load (`ready_s`) end with the
        limit (at once when they are longer: on an H100 about 7 s, against a 5 s limit)."""
        turn = clock.deadline - clock.turn_start
        wait = STANDBY_AT * turn
        if self.eager_standby and self.ready_s is not None:
            wait = max(0.0, min(wait, turn - self.ready_s))
        return clock.turn_start + wait

    def _charge(self, phase: str, seconds: float) -> None:
        if phase in (phase_log.DEVICE_WAIT, phase_log.MEMORY_WAIT):
            self.device_waited_s += seconds  # named in a spent budget's reason (`pacing.Pace.stop_reason`)
        if self.phases is not None:
            self.phases.add(phase, seconds)

    def _exited(self) -> bool:
        """Whether the worker has ended (its closed pipe then reads as ready, with no message in it)."""
        try:
            self.proc.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            return False
        return True

    def alone(self, limit_s: float | None = None) -> contextlib.AbstractContextManager[float]:
        """The device to this worker alone for the requests inside (a retry after running out of
        memory); yields the seconds it waited for that. With `limit_s` it may give up waiting for the
        running requests (`DeviceLock.exclusive`): then `self.share.lock.held` is None inside."""
        return self._holding(self.share.lock.exclusive(limit_s))

    def await_room(self, need: int) -> tuple[bool, float]:
        """Wait for the device to report room for `need` bytes (`DeviceShare.await_room`), charged as
        `memory_wait`: whether it came, and the seconds waited."""
        began = time.monotonic()
        grant = self.share.await_room(need)
        waited = time.monotonic() - began
        self._charge(phase_log.MEMORY_WAIT, waited)
        return grant is not None, waited

    def reclaiming(self) -> contextlib.AbstractContextManager[float]:
        """Every worker's cache handed back for the requests inside, the device still shared (the first
        retry after running out of memory); yields the seconds it settled for."""
        return self._holding(self.share.lock.reclaim())

    @contextlib.contextmanager
    def _holding(self, hold: contextlib.AbstractContextManager) -> Iterator[float]:
        """Enter one of the device lock's holds, the wait for it charged as `device_wait` and yielded."""
        began = time.monotonic()
        with hold:
            waited = time.monotonic() - began
            self._charge(phase_log.DEVICE_WAIT, waited)
            yield waited

    def load(self, job: dict, timeout: float) -> dict:
        self.job = job
        return self.request(Load(job), timeout)


def run_with_retry(worker: Worker, msg: Request, timeout: float, retries: int = 1) -> dict:
    """One request; a worker that dies is restarted and the request retried `retries` times, unless
    the death is the candidate's own (a hang, a forged answer, a segfault or abort), which repeats.

    Running out of memory is a fault of the run (several workers share a device), not a verdict:
    the request runs again with every worker's cache handed back, then with the device to itself
    (`retry_for_memory`), and is recorded `skipped` with the bytes asked if it still cannot fit
    (`sharing.alone_result`).
    """
    return request_with_retry(worker, msg, timeout, retries)[0]


def needs_device_alone(result: dict) -> bool:
    """Whether a worker's answer asks for its request to run again with the device to itself: it
    ran out of memory, or the reference failed at its own sizes (which a shared device explains)."""
    return ALONE_KEY in result or result.get("outcome") == Outcome.OOM


# A retry's log line (`retry_for_memory`, and a retry alone after a SIGKILL), read back by
# tools/harness_faults.py: how it ran, the device, why it was retried, how it ended; then its seconds,
# and those it waited for room or for the device alone (older logs lack both).
RETRY_LINE = re.compile(r"retried (alone|with the caches handed back|once the device had room) on (\S+) \((.*)\): (\w+)"
                        r"(?:; ([\d.]+) s(?:, ([\d.]+) s of it waiting for (?:the running requests|room))?)?$")
HANDED_BACK, ROOM, ALONE = "with the caches handed back", "once the device had room", "alone"
NO_ROOM = "no room reported on "  # the start of the line of a wait for room that ended without it
NOT_ALONE = "not alone on "  # the start of the line of a try alone that gave up after ALONE_HOLD_S


ALONE_HOLD_S = 20.0
"""How long a retry alone holds new requests back while it waits for the running ones to end, before it
lets them in again and waits for room beside them instead; its last try (of ALONE_TRIES) waits as long
as they run. Every other worker of the device stops while it waits: on an H100 one request running for
minutes held 15 workers up behind a retry alone for 116 s (1,700 of the run's worker-seconds), and such
waits took 5 to 167 s in the runs before."""
ALONE_TRIES = 3
LET_IN_S = 1.0  # after a try alone gave up, where no room is reported: the requests it held back get in


def retry_for_memory(worker: Worker, msg: Request, timeout: float, first: str) -> dict:
    """Run a request that ran out of memory (`first`: why) again: with every worker's cache handed back
    and the device still shared; still out of memory, once the device reports room for it (at most
    `sharing.ROOM_WAIT_S`, the caches still handed back); then with the device alone. A retry alone
    waits for every running request to end and holds new ones back, so it stops every worker of the
    device: it gives up after ALONE_HOLD_S and waits for room again, the device shared, before it
    tries again; the last of ALONE_TRIES waits as long as the running requests take. A wait for room
    stops no one. Its log line says which way it ran and how long it took (`tools/harness_faults.py`
    sums them)."""
    began = time.monotonic()
    with worker.reclaiming():
        result = worker.request(msg, timeout)
        if not needs_device_alone(result):
            _note_retry(worker, HANDED_BACK, None, first, result.get("outcome"), began)
            return result
        need = _room_needed(worker, result)
        roomy = _once_room(worker, msg, timeout, need, first, began)
        if roomy is not None:
            return roomy
    held_back = 0.0  # seconds this retry held the other workers back, over its tries alone
    for attempt in range(ALONE_TRIES):
        limit = ALONE_HOLD_S if attempt < ALONE_TRIES - 1 else None
        with worker.alone(limit) as waited:
            held_back += waited
            if worker.share.lock.held == "exclusive":
                result = worker.request(msg, timeout)
                _note_retry(worker, ALONE, held_back, first, result.get("outcome"), began)
                return result
        log.info(NOT_ALONE + "%s after %.1f s: the running requests went on; new ones let in again, and the "
                 "retry waits for room beside them", worker.share.key, waited)
        if need is None:
            time.sleep(LET_IN_S)
            continue
        with worker.reclaiming():
            roomy = _once_room(worker, msg, timeout, need, first, began)
            if roomy is not None:
                return roomy
    raise AssertionError("the last try alone waits as long as the running requests take")


def _room_needed(worker: Worker, result: dict) -> int | None:
    """The room a request that ran out of memory (`result`) needs; None where the device's memory is not
    reserved (nothing reports its free memory)."""
    if worker.share.capacity is None:
        return None
    said = result.get(ALONE_KEY) or {}  # the worker's reading of torch's message
    asked = said.get("bytes") or requested_bytes(str(result.get("reason") or ""))
    return worker.share.room_needed(asked, said.get("in_use"))


def _once_room(worker: Worker, msg: Request, timeout: float, need: int | None, first: str,
               began: float) -> dict | None:
    """The request run again once the device reports room for `need` bytes (`Worker.await_room`), the
    device shared; None when no room came or it ran out of memory again (or nothing reports room)."""
    if need is None:
        return None
    room, waited = worker.await_room(need)
    if not room:
        log.info(NO_ROOM + "%s after %.1f s for %s", worker.share.key, waited, size_text(need))
        return None
    result = worker.request(msg, timeout)
    if needs_device_alone(result):
        return None
    _note_retry(worker, ROOM, waited, first, result.get("outcome"), began)
    return result


def _note_retry(worker: Worker, how: str, waited: float | None, first: str, outcome: object, began: float) -> None:
    """The retry's line in the shard's log (`RETRY_LINE`), with the seconds it waited for room or for
    the device alone (`waited`), if it did."""
    what = "room" if how == ROOM else "the running requests"
    waited_text = "" if waited is None else f", {waited:.1f} s of it waiting for {what}"
    log.info("retried %s on %s (%s): %s; %.1f s%s", how, worker.share.key, first, outcome,
             time.monotonic() - began, waited_text)


def request_with_retry(worker: Worker, msg: Request, timeout: float, retries: int = 1) -> tuple[dict, str | None]:
    """`run_with_retry`'s row, and how the worker ended when the row is its death (`timeout`,
    `signal 11`, `exit code 0`, `a forged result`, HARNESS_TIMEOUT), else None: a runner
    settles a submission whose cases end the same way in a row (`pacing.py`). A timeout at a call's
    own limit while other workers share the device is tried once more (`confirms_timeout`)."""
    last: WorkerDied | None = None
    alone = False  # the next attempt holds the device alone
    confirming: str | None = None  # the attempt in hand confirms a timeout; the first one's limit, beside whom
    deaths, tries = 0, retries + 1
    while tries > 0:
        tries -= 1
        began, why = time.monotonic(), last.reason[:160] if last else ""
        waited: float | None = None  # the wait for the device alone, on a retry after a SIGKILL
        try:
            with (worker.alone() if alone else contextlib.nullcontext()) as waited, \
                    (_limits_scaled(worker, CONFIRM_FACTOR) if confirming else contextlib.nullcontext()):
                result = worker.request(msg, timeout)
            if alone:
                _note_retry(worker, ALONE, waited, why, result.get("outcome"), began)
            elif needs_device_alone(result):
                result = retry_for_memory(worker, msg, timeout, str(result.get("reason") or "")[:160])
            result = alone_result(result, worker.device)
            if confirming:
                _note_confirmation(worker, confirming, result.get("outcome"), began)
        except WorkerDied as died:
            if alone:
                _note_retry(worker, ALONE, waited, why, died.outcome, began)
            if confirming:
                _note_confirmation(worker, confirming, died.outcome, began)
            elif beside := confirms_timeout(worker, died):
                last, deaths, tries = died, deaths + 1, tries + 1
                confirming = f"{died.limit_s:.3g} s beside {beside} other workers' requests"
                continue
            last, deaths = died, deaths + 1
            if (died.outcome == Outcome.TIMEOUT or died.kind == HARNESS_TIMEOUT or "forged_result" in died.findings
                    or died.signum in CANDIDATE_SIGNALS):
                break  # a hang would cost the timeout again; a forgery is deliberate; a segfault repeats
            # a SIGKILL the harness did not send is most likely the host's OOM killer: retry alone
            alone = died.signum == signal.SIGKILL
            continue
        return result, None
    assert last is not None
    retried = " (after a retry)" if deaths > 1 and not confirming else ""
    if confirming and last.outcome == Outcome.TIMEOUT:
        retried = f" (tried again with {CONFIRM_FACTOR:g}x the limit: the first try's, {confirming}, had timed out)"
    out = {"outcome": last.outcome, "reason": last.reason + retried}
    if last.findings:
        out["findings"] = merge(last.findings)
    if last.limit_s is not None:
        out["limit_s"] = round(last.limit_s, 3)
    return out, last.kind


# A candidate's call that runs past its own limit (`pacing.call_limit`, a floor of seconds plus a
# multiple of the float64 reference's time) while other workers' requests share the device is tried
# once more with CONFIRM_FACTOR times the limit before its timeout is the kernel's: on an H100 beside
# 15 other workers the 3-D convolutions of CUDA-L1 (cuDNN's autotuning at each new size, CUDA graph
# captures) ran past limits of about 5 s: of one run's 21 such timeouts, 12 answered at the same
# cases in the run before (3 passing), 6 timed out in both.
CONFIRM_FACTOR = 4.0
# Its log line, read back by tools/harness_faults.py: the first try's limit and beside how many, how the
# second ended, its seconds.
CONFIRM_LINE = re.compile(r"timed out at its call's limit of (.*); tried again with ([\d.]+)x the limit: (\w+); "
                          r"([\d.]+) s$")


def confirms_timeout(worker: Worker, died: WorkerDied) -> int:
    """How many other workers hold memory of its device when a worker's death is a timeout at its call's
    own limit (a GPU run's shards; else 0): the device's other work may have slowed the call, so it
    runs again with a longer limit. A worker alone on its device (`rescore check`), or on the CPU,
    whose memory no ledger holds, is judged at once: a hang costs the limit, not more."""
    if died.outcome != Outcome.TIMEOUT or died.limit_s is None or died.kind == HARNESS_TIMEOUT:
        return 0
    return worker.share.others_holding()


@contextlib.contextmanager
def _limits_scaled(worker: Worker, factor: float) -> Iterator[None]:
    """The candidate's call limits `factor` times longer for the requests inside."""
    limit = worker.call_limit
    if limit is not None:
        def scaled(reference_s: float) -> float | None:
            seconds = limit(reference_s)
            return None if seconds is None else factor * seconds

        worker.call_limit = scaled
    try:
        yield
    finally:
        worker.call_limit = limit


def _note_confirmation(worker: Worker, first: str, outcome: object, began: float) -> None:
    log.info("timed out at its call's limit of %s; tried again with %gx the limit: %s; %.1f s", first,
             CONFIRM_FACTOR, getattr(outcome, "value", outcome), time.monotonic() - began)
