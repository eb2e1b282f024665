"""Run capture or compile jobs in fresh interpreters, each job in a forked child.

Why: TRITON_INTERPRET must be set before triton is imported for capture and must be unset for the
compiler, so each kind of job needs its own interpreter. The worker imports torch and triton once
and forks a child per job: a crash (an LLVM abort, a segfault in a submission) or a timeout costs
that job only, and a job costs milliseconds of start-up instead of seconds.

Run as `python -m rescore.static.worker KIND JOBS.json RESULTS.jsonl TIMEOUT`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rescore.model import paths
from rescore.model.outcomes import Outcome
from rescore.runtime.device import machine_cores

SRC_ROOT = paths.SRC_ROOT

# kind -> (module, job function, optional warm-up run once in the worker before forking)
KINDS: dict[str, tuple[str, str, str | None]] = {
    "capture": ("rescore.static.launches", "run_capture", None),
    "compile": ("rescore.static.compile", "run_compile", "warm_worker"),
}


def worker_env(kind: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment of a worker: interpreter on for capture and off for compile, no GPU, 1 thread."""
    env = dict(os.environ)
    if kind == "capture":
        env["TRITON_INTERPRET"] = "1"
    else:
        env.pop("TRITON_INTERPRET", None)
    env["CUDA_VISIBLE_DEVICES"] = ""
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([str(SRC_ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env.update(extra or {})
    return env


def _tail(path: Path, n: int = 2000) -> str:
    try:
        return path.read_text(errors="replace")[-n:].strip()
    except OSError:
        return ""


def run_forked(fn: Callable[[dict], dict], job: dict, timeout: float, tmp: Path) -> dict:
    """Run fn(job) in a forked child; a timeout or a dead child becomes an outcome."""
    out_path = tmp / f"out-{os.getpid()}-{time.monotonic_ns()}.json"
    log_path = out_path.with_suffix(".log")
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # child
        code = 0
        try:
            log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(log, 1)
            os.dup2(log, 2)
            try:
                payload = json.dumps(fn(job), default=str)
            except BaseException as exc:  # noqa: BLE001 - reported, never raised in the worker
                payload = json.dumps({"outcome": Outcome.CRASH, "error": f"{type(exc).__name__}: {exc}"[:4000]})
            out_path.write_text(payload)
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:  # noqa: BLE001
            code = 70
        os._exit(code)
    deadline = time.monotonic() + timeout
    status = None
    delay = 0.002
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            log_path.unlink(missing_ok=True)
            out_path.unlink(missing_ok=True)
            return {"outcome": Outcome.TIMEOUT, "error": f"no result after {timeout:.0f} s"}
        time.sleep(delay)
        delay = min(delay * 2, 0.05)
    try:
        if out_path.exists():
            return json.loads(out_path.read_text())
        if os.WIFSIGNALED(status):
            why = f"killed by signal {os.WTERMSIG(status)}"
        else:
            why = f"exit status {os.WEXITSTATUS(status)}"
        return {"outcome": Outcome.CRASH, "error": f"worker child died ({why}); output: {_tail(log_path)}"}
    finally:
        log_path.unlink(missing_ok=True)
        out_path.unlink(missing_ok=True)


def main(argv: list[str]) -> int:
    """Worker process: run every job of JOBS.json, append one JSON line per result."""
    kind, jobs_path, results_path, timeout = argv[0], Path(argv[1]), Path(argv[2]), float(argv[3])
    import importlib

    module_name, fn_name, warm_name = KINDS[kind]
    module = importlib.import_module(module_name)
    fn = getattr(module, fn_name)
    import torch  # noqa: F401 - imported once here so that forked children start warm
    import triton  # noqa: F401

    if warm_name:
        try:
            getattr(module, warm_name)()
        except Exception as exc:  # a failed warm-up only costs time
            print(f"warm-up failed: {exc}", file=sys.stderr)
    jobs = json.loads(jobs_path.read_text())
    with tempfile.TemporaryDirectory(prefix="rescore-static-") as tmp, results_path.open("a") as out:
        for index, job in jobs:
            res = run_forked(fn, job, timeout, Path(tmp))
            out.write(json.dumps({"index": index, "result": res}, default=str) + "\n")
            out.flush()
    return 0


def run_jobs(
    kind: str,
    jobs: list[dict],
    *,
    parallel: int | None = None,
    timeout: float = 300.0,
    env: dict[str, str] | None = None,
) -> list[dict]:
    """Run jobs of `kind` over `parallel` worker processes; results in job order.

    A job whose worker process died before reporting it gets outcome "crash" with the worker's
    stderr tail.
    """
    if not jobs:
        return []
    # no more workers than cores: each imports torch and triton (seconds) before its first job
    cores = machine_cores()
    parallel = max(1, min(parallel or cores, cores, len(jobs)))
    chunks: list[list[tuple[int, dict]]] = [[] for _ in range(parallel)]
    for i, job in enumerate(jobs):
        chunks[i % parallel].append((i, job))
    results: list[dict | None] = [None] * len(jobs)
    with tempfile.TemporaryDirectory(prefix="rescore-static-") as tmp:
        procs = []
        for w, chunk in enumerate(chunks):
            jobs_path, res_path, err_path = (Path(tmp) / f"{name}-{w}" for name in ("jobs.json", "res.jsonl", "err"))
            jobs_path.write_text(json.dumps(chunk, default=str))
            res_path.touch()
            with err_path.open("w") as err:
                proc = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "rescore.static.worker",
                        kind,
                        str(jobs_path),
                        str(res_path),
                        str(timeout),
                    ],
                    env=worker_env(kind, env),
                    stdout=err,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                )
            procs.append((proc, chunk, res_path, err_path))
        for proc, chunk, res_path, err_path in procs:
            try:
                proc.wait(timeout=timeout * len(chunk) + 120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            for line in res_path.read_text().splitlines():
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                results[rec["index"]] = rec["result"]
            for i, _ in chunk:
                if results[i] is None:
                    results[i] = {
                        "outcome": Outcome.CRASH,
                        "error": f"worker process exited {proc.returncode}: {_tail(err_path)}",
                    }
    return [r or {} for r in results]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
