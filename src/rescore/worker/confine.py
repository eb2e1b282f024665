"""Confines a worker process: resource limits, a scratch folder, no network, no stray processes.

The walls are the operating system's where it has them: rlimits set here, and a network namespace
that the parent sets up with `unshare -n` where the machine allows it (see `sandbox.py`). An audit
hook is the second line, and the only one where no namespace could be made: it blocks Python-level
attempts to reach the network, start processes, write outside the allowed folders, signal other
processes or change the limits, and records each as a finding. Native code (ctypes) can get past
the hook; the namespace, the rlimits and the sweep of child processes after every call still hold.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import site
import socket
import sys
import sysconfig
import threading
import time
from pathlib import Path

GiB = 1 << 30
FILE_SIZE_CAP = 1 * GiB  # one file the candidate (or its log) writes
CPU_SLACK_S = 3600  # CPU seconds one request may use: a backstop for a worker nobody waits for
NPROC_MARGIN = 1024  # processes and threads the worker may add to what its user already runs

PR_SET_CHILD_SUBREAPER = 36
DENIED = "rescore sandbox: "  # how every refusal of the audit hook begins (`worker/exceptions.refusal`)

_NET_FAMILIES = {socket.AF_INET, socket.AF_INET6} | ({socket.AF_PACKET} if hasattr(socket, "AF_PACKET") else set())
_NET_EVENTS = {
    "socket.connect",
    "socket.bind",
    "socket.sendto",
    "socket.sendmsg",
    "socket.getaddrinfo",
    "socket.gethostbyname",
    "socket.gethostbyaddr",
    "socket.getnameinfo",
}
_SPAWN_EVENTS = {
    "subprocess.Popen",
    "os.system",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "os.fork",
    "os.forkpty",
    "pty.spawn",
    "os.startfile",
}
_PATH_EVENTS = {  # event -> indices of the path arguments it writes to
    "os.remove": (0,),
    "os.rmdir": (0,),
    "os.mkdir": (0,),
    "os.rename": (0, 1),
    "os.truncate": (0,),
    "os.chmod": (0,),
    "os.chown": (0,),
    "os.link": (0, 1),
    "os.symlink": (1,),
    "os.utime": (0,),
    "shutil.rmtree": (0,),
}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def memory_cap() -> int:
    """Bytes of address space a CPU worker may use: generous (90% of the machine), overridable."""
    env = os.environ.get("RESCORE_WORKER_MAX_MEMORY")
    if env:
        return _bytes(env)
    total = _meminfo().get("MemTotal", 16 * GiB)
    return max(4 * GiB, int(0.9 * total))


def _bytes(text: str) -> int:
    text = text.strip().upper().removesuffix("B")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": GiB, "T": 1 << 40}.get(text[-1:], 1)
    return int(float(text.rstrip("KMGT")) * scale)


def _meminfo() -> dict[str, int]:
    out = {}
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            name, _, rest = line.partition(":")
            out[name] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return out


def memory_available() -> int:
    """Bytes the machine could still give (MemAvailable), or 0 when unknown."""
    return _meminfo().get("MemAvailable", 0)


def _user_tasks() -> int:
    """Processes and threads the current user runs now (what RLIMIT_NPROC counts)."""
    uid, n = os.getuid(), 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid == uid:
                n += len(os.listdir(f"/proc/{entry.name}/task"))
        except OSError:
            continue
    return n


def apply_limits(device: str) -> dict[str, int]:
    """Set the worker's rlimits; returns what was set (for the log).

    The address-space cap is for the CPU only: the CUDA driver reserves far more virtual memory
    than it uses, and a GPU's memory has its own limit. RLIMIT_NPROC counts every thread of the
    user, so it is set above what already runs (root is exempt from it anyway)."""
    done: dict[str, int] = {}

    def put(name: str, soft: int, hard: int | None = None) -> None:
        res = getattr(resource, name)
        cur_soft, cur_hard = resource.getrlimit(res)
        hard = cur_hard if hard is None else hard
        if cur_hard != resource.RLIM_INFINITY:
            soft, hard = min(soft, cur_hard), min(hard, cur_hard)
        try:
            resource.setrlimit(res, (soft, hard))
            done[name] = soft
        except (ValueError, OSError):
            pass

    if device == "cpu":
        put("RLIMIT_AS", memory_cap())
    put("RLIMIT_FSIZE", FILE_SIZE_CAP)
    put("RLIMIT_CORE", 0)
    if os.getuid() != 0:
        put("RLIMIT_NPROC", _user_tasks() + NPROC_MARGIN)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a too-large write fails with EFBIG instead
    refresh_cpu_limit()
    return done


def refresh_cpu_limit(slack_s: int = CPU_SLACK_S) -> None:
    """Allow `slack_s` more CPU seconds from now (RLIMIT_CPU counts the whole life of the process)."""
    used = resource.getrusage(resource.RUSAGE_SELF)
    spent = int(used.ru_utime + used.ru_stime) + 1
    try:
        resource.setrlimit(resource.RLIMIT_CPU, (spent + slack_s, resource.getrlimit(resource.RLIMIT_CPU)[1]))
    except (ValueError, OSError):
        pass


def become_subreaper() -> None:
    """Orphaned grandchildren are re-parented to this process, so the sweep finds them."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def watch_parent(parent: int, period_s: float = 1.0) -> threading.Thread:
    """Exit when the parent is gone (killed harness): a worker must never outlive its run."""

    def watch() -> None:
        while True:
            if os.getppid() != parent:
                os._exit(3)
            time.sleep(period_s)

    t = threading.Thread(target=watch, name="rescore-parent-watch", daemon=True)
    t.start()
    return t


def children() -> list[int]:
    """Pids of this process's live children (including re-parented orphans). One `waitid` first: it
    fails with ECHILD when the process has no child at all (the usual case, checked after every call
    into candidate code), which spares reading a file per thread."""
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WSTOPPED | os.WCONTINUED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return []
    pids: list[int] = []
    try:
        for task in os.listdir("/proc/self/task"):
            try:
                pids += [int(p) for p in Path(f"/proc/self/task/{task}/children").read_text().split()]
            except OSError:
                continue
    except OSError:
        pass
    return sorted(set(pids))


def sweep_children() -> int:
    """Kill and reap every child process; returns how many there were."""
    found = children()
    for pid in found:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for pid in found:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
    while True:  # reap any zombie left by a child that ended by itself
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
    return len(found)


def _trusted_roots() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(stdlib prefixes, trusted library prefixes): frames from these did not come from a candidate."""
    paths = sysconfig.get_paths()
    stdlib = {os.path.realpath(paths["stdlib"]), os.path.realpath(os.path.dirname(threading.__file__))}
    libs = {os.path.realpath(paths["purelib"]), os.path.realpath(paths["platlib"])}
    try:
        libs.update(os.path.realpath(p) for p in site.getsitepackages())
    except AttributeError:  # pragma: no cover - virtualenv without site.getsitepackages
        pass
    libs.add(os.path.realpath(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # all of rescore/
    return tuple(p + os.sep for p in stdlib), tuple(p + os.sep for p in libs)


class Audit:
    """The audit hook: blocks and records what a candidate may not do once the harness is armed."""

    def __init__(self, allowed_roots: list[str]):
        self.allowed = tuple(os.path.realpath(r) + os.sep for r in allowed_roots if r)
        self.fixed = len(self.allowed)
        self.armed = False
        self.seen: set[str] = set()
        self.details: list[str] = []
        self.own_pid = os.getpid()
        self.stdlib, self.libs = _trusted_roots()
        self._in_hook = False

    def allow(self, root: str) -> None:
        """Also allow writes under `root` (the build folder of the submission being loaded)."""
        self.allowed = self.allowed[: self.fixed] + (os.path.realpath(root) + os.sep,)

    def install(self) -> None:
        sys.addaudithook(self._hook)

    def drain(self) -> tuple[set[str], list[str]]:
        """The findings recorded since the last drain, and what was blocked."""
        seen, details = self.seen, self.details
        self.seen, self.details = set(), []
        return seen, details

    def _deny(self, finding: str, what: str) -> None:
        self.seen.add(finding)
        if len(self.details) < 20:
            self.details.append(what[:200])
        raise PermissionError(f"{DENIED}{what} is not allowed")

    def _hook(self, event: str, args: tuple) -> None:
        if not self.armed or self._in_hook:
            return
        if event == "open":
            self._on_open(args)
        elif event in _PATH_EVENTS:
            self._on_paths(event, args)
        elif event == "socket.__new__":
            if len(args) > 1 and args[1] in _NET_FAMILIES:
                self._deny("network", f"opening a network socket (family {args[1]!r})")
        elif event in _NET_EVENTS:
            self._deny("network", f"{event}{args[1:2]!r}")
        elif event in _SPAWN_EVENTS:
            if not self._from_library():
                self._deny("subprocess", f"{event} {str(args[:2])[:120]}")
        elif event in ("os.kill", "os.killpg", "signal.pthread_kill"):
            self._on_kill(event, args)
        elif event in ("resource.setrlimit", "resource.prlimit"):
            if not self._from_library():
                self._deny("rlimit", f"{event}{args!r}")
        elif event == "sys.addaudithook":
            self.seen.add("patched_harness")
            raise RuntimeError(f"{DENIED}adding an audit hook is not allowed")  # suppressed by Python

    def _from_library(self) -> bool:
        """Whether the nearest caller outside the standard library is a trusted library (torch, triton,
        rescore): their compilers legitimately start processes (ptxas, nvcc, ninja)."""
        self._in_hook = True
        try:
            frame = sys._getframe(2)
            while frame is not None:
                name = frame.f_code.co_filename
                if name.startswith("<frozen ") or name.startswith(self.stdlib):
                    frame = frame.f_back
                    continue
                return name.startswith(self.libs)
            return False
        finally:
            self._in_hook = False

    def _allowed(self, path) -> bool:
        if isinstance(path, int):
            return True  # an fd the process already holds
        try:
            real = os.path.realpath(os.fsdecode(path))
        except (TypeError, ValueError):
            return True
        return real == os.devnull or (real + os.sep).startswith(self.allowed)

    def _on_open(self, args: tuple) -> None:
        path, mode, flags = (tuple(args) + (None, None, None))[:3]
        writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and mode is None and bool(flags & _WRITE_FLAGS)
        )
        if writes and not self._allowed(path):
            self._deny("fs_escape", f"writing {os.fsdecode(path) if not isinstance(path, int) else path}")

    def _on_paths(self, event: str, args: tuple) -> None:
        for i in _PATH_EVENTS[event]:
            if i < len(args) and args[i] is not None and not self._allowed(args[i]):
                self._deny("fs_escape", f"{event} {args[i]!r}")

    def _on_kill(self, event: str, args: tuple) -> None:
        target = args[0] if args else None
        if event == "signal.pthread_kill" or target == self.own_pid:
            return
        if isinstance(target, int) and target > 0 and target in children():
            return
        self._deny("signals", f"{event}{args!r}")
