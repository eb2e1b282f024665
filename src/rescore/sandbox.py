"""Runs untrusted candidate code in a worker process that can crash, hang or lie without harm.

One worker serves many cases (a fresh CUDA process costs seconds). A case that kills the worker is
`crash`, one that outlives its timeout is `timeout`; either way the worker is restarted, the job is
re-loaded, the case is retried once, and the run goes on. Results come back over a pipe that
belongs to the harness; the candidate's own stdout and stderr go to a log file.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path

KEEP_ENV = (
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "PYTHONPATH",
    "VIRTUAL_ENV",
    "CUDA_VISIBLE_DEVICES",
    "TMPDIR",
    "TRITON_CACHE_DIR",
    "TORCH_EXTENSIONS_DIR",
    "CUDA_HOME",
    "LD_LIBRARY_PATH",
    "OMP_NUM_THREADS",
    "NCCL_NVLS_ENABLE",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST",
    "NVSHMEM_DISABLE_NVLS",
)


class WorkerDied(Exception):
    def __init__(self, outcome: str, reason: str):
        super().__init__(reason)
        self.outcome, self.reason = outcome, reason


class Worker:
    """A worker process and the pipes to it."""

    def __init__(self, device: str, budget: int, log_dir: str | None = None):
        self.device, self.budget = device, budget
        self.log_dir = Path(log_dir or tempfile.gettempdir())
        self.proc: subprocess.Popen | None = None
        self.job: dict | None = None
        self.starts = 0

    def start(self) -> None:
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        env = {k: v for k, v in os.environ.items() if k in KEEP_ENV}
        env["PYTHONUNBUFFERED"] = "1"
        env.setdefault("OMP_NUM_THREADS", "1")
        src = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.log_dir / f"worker-{os.getpid()}-{self.starts}.log"
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [
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
            ],
            pass_fds=(to_child_r, from_child_w),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            cwd=os.getcwd(),
            start_new_session=True,
        )
        os.close(to_child_r)
        os.close(from_child_w)
        self.send_conn = Connection(to_child_w, readable=False)
        self.recv_conn = Connection(from_child_r, writable=False)
        self.starts += 1

    def stop(self) -> None:
        if self.proc is None:
            return
        try:
            self.send_conn.send(("stop",))
        except (OSError, EOFError):
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._kill()
        self._close()

    def _kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()

    def _close(self) -> None:
        for conn in (getattr(self, "send_conn", None), getattr(self, "recv_conn", None)):
            if conn is not None:
                try:
                    conn.close()
                except OSError:
                    pass
        if getattr(self, "log", None):
            self.log.close()
        self.proc = None

    def _tail(self) -> str:
        try:
            return self.log_path.read_bytes()[-400:].decode("utf-8", "replace").strip().replace("\n", " | ")
        except OSError:
            return ""

    def request(self, msg: tuple, timeout: float):
        """Send one message; return the worker's answer, or raise WorkerDied (crash / timeout)."""
        if self.proc is None:
            self.start()
            if self.job is not None:
                self._ask(("load", self.job), timeout)
        return self._ask(msg, timeout)

    def _ask(self, msg: tuple, timeout: float):
        try:
            self.send_conn.send(msg)
            if not self.recv_conn.poll(timeout):
                self._kill()
                self._close()
                raise WorkerDied("timeout", f"no answer within {timeout:.0f} s; the worker was killed")
            status, result = self.recv_conn.recv()
        except (EOFError, OSError, BrokenPipeError) as exc:
            code = self.proc.wait() if self.proc else None
            tail = self._tail()
            self._close()
            what = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
            raise WorkerDied("crash", f"the worker died ({what}){': ' + tail if tail else ''}") from exc
        if status == "restart":
            self._kill()
            self._close()
        return result

    def load(self, job: dict, timeout: float) -> dict:
        self.job = job
        return self.request(("load", job), timeout)


def run_with_retry(worker: Worker, msg: tuple, timeout: float, retries: int = 1) -> dict:
    """One request; a worker that dies is restarted and the request retried `retries` times.

    Running out of memory is a fault of the run (several workers share a machine), not a verdict:
    the case is retried alone and recorded `skipped` if it still cannot fit.
    """
    last: WorkerDied | None = None
    for attempt in range(retries + 1):
        try:
            result = worker.request(msg, timeout)
        except WorkerDied as died:
            last = died
            if died.outcome == "timeout":  # a hang is not retried: it would cost the timeout again
                break
            continue
        if result.get("outcome") == "oom":
            if attempt < retries:
                time.sleep(1.0)
                continue
            return dict(
                result, outcome="skipped", reason="out of memory on a shared machine: " + result.get("reason", "")
            )
        return result
    assert last is not None
    retried = " (after a retry)" if retries and last.outcome == "crash" else ""
    return {"outcome": last.outcome, "reason": last.reason + retried}
