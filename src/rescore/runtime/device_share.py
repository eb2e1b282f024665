"""How the processes that run kernels on one device share it: a lock for a retry with the device to
itself, and a ledger of the memory each one expects to use (docs/architecture.md, "Sharing a device").

Both are files in one folder per machine (`share_folder`), locked with flock(2): the kernel drops a
process's locks when it dies, so a killed shard never leaves a device locked, and the ledger drops
the entries of processes that are gone. Plain Python, no torch: the parent holds the lock and the
ledger, a worker only asks whether a retry is waiting (`retry_waiting`).

- `DeviceLock`: every request to a worker holds it shared, a retry alone holds it exclusive. A
  request that ran out of memory first runs again shared, with the `waiting` file held (`reclaim`):
  every worker hands its cache back and the running requests go on; if that is not enough, it waits,
  still shared, for a report of the device's free memory with room for it (`Ledger.await_room`, at
  most `sharing.ROOM_WAIT_S`, no grant on free memory but a creeping growth's (CREEP) taking that
  room meanwhile); only if none
  comes, or the room is gone again, does it wait for the device alone, which stops every other
  worker until the running requests end and it has run (on an H100 each such retry stopped every
  shard for 20 to 60 s: the waits behind 14 of them came to 8,700 of the run's 21,700
  worker-seconds). A retry alone that waits first takes a
  turnstile that every shared holder passes on its way in, so new requests queue behind it instead
  of starving it; it also holds the `waiting` file (shared) while it waits and runs, which tells the
  workers to hand their cached GPU memory back: after their request, or within IDLE_POLL_S while
  they wait for one; the retry starts SETTLE_S after it raised that flag at the earliest, so that
  the idle ones have done so. Given a time limit (`engine/sandbox.py`: ALONE_HOLD_S), a retry alone
  whose running requests have not all ended within it gives up, and the requests it held back go in.
- `Ledger`: each holder reserves the bytes it expects its next request to need and waits while the
  device's capacity is taken. A request counts every earlier one still waiting as held, so it goes
  ahead of them only when all fit, unless it is small (at most BACKFILL of the capacity) and fits
  beside what is held now: on an H200 a kernel waiting for 87 GiB held every shard's 1-4 GiB request
  up for a minute, while the big one waits for its room or its limit either way. The limit grows
  with the request (`wait_limit`): a minute (`MAX_WAIT_S`) from a quarter of the capacity up, a few
  seconds for a worker's usual 1-2 GiB. Past it the request goes ahead all the same (one that then
  runs out of memory is retried), and a ledger pushed over its capacity so holds every later
  request that grows until its holders shrink: on an H100 the check shards' requests small enough to
  backfill waited 3,885 s in 88 waits, 59 of them the whole minute, while 8 of the run's 13 retries
  alone came after a wait for 15 GiB or more and 2 after a small one; with the limit in proportion,
  574 s in 133 waits, none to the limit, and 14 retries alone. A request larger than the whole
  capacity is granted when nothing else is held. Where the reservations say wait, the device's free
  memory as a worker measured it last (`note_free`) grants a request whose growth beyond what its
  worker holds is small and has room there (`free_allows`): the reservations are estimates, and on
  an H100 they held up to 108 GiB of a 71 GiB capacity while 12 requests of the run ran out of
  memory. Only a small growth (at most BACKFILL of the capacity): a report is a moment, and the
  requests running beside it grow. On an
  H100, of 510 such grants the 54 larger ones ran out of memory 11 times, the 456 small ones 11 times,
  and 9 requests then needed the device alone, stopping every shard for 466 s in all.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

WAITING_ENV = "RESCORE_DEVICE_WAITING"  # a worker's path to its device's `waiting` file
LOCK_ENV = "RESCORE_DEVICE_LOCK"  # a worker's path to its device's lock file (the tests' stand-in kernels read it)
IDLE_POLL_S = 0.2  # how often a worker waiting for its next request looks for a waiting retry
SETTLE_S = 0.6  # the least time from a retry's flag to its start: an idle worker's look, its hand-back, a margin


def share_folder() -> Path:
    """Where the locks and ledgers live: $RESCORE_DEVICE_SHARE, else one folder per user (and per SLURM
    job, whose devices are its own) in the machine's temporary folder, so that every run on this
    machine, from any working directory, shares a device's memory with the others."""
    env = os.environ.get("RESCORE_DEVICE_SHARE")
    if env:
        return Path(env)
    job = os.environ.get("SLURM_JOB_ID")
    name = f"rescore-device-share-{os.getuid()}" + (f"-job{job}" if job else "")
    return Path(tempfile.gettempdir()) / name


def _open(path: Path) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT, 0o600)


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)


class DeviceLock:
    """A readers-writer lock on one device, across processes, with the writer (a retry alone) first."""

    def __init__(self, folder: Path, key: str, settle_s: float = SETTLE_S):
        folder.mkdir(parents=True, exist_ok=True)
        self.settle_s = settle_s
        self.paths = {name: folder / f"{key}.{name}" for name in ("lock", "turnstile", "waiting")}
        self.fds = {name: _open(path) for name, path in self.paths.items()}
        # Closed by `close`, else when the lock is dropped: a process that makes a worker per sanitizer
        # run would otherwise run out of descriptors.
        self._closer = weakref.finalize(self, _close_all, list(self.fds.values()))
        self.held: str | None = None

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        """Held while one request runs; a no-op inside `exclusive` (the retry alone is that request)."""
        if self.held is not None:
            yield
            return
        fcntl.flock(self.fds["turnstile"], fcntl.LOCK_EX)  # behind any retry already waiting
        try:
            fcntl.flock(self.fds["lock"], fcntl.LOCK_SH)
        finally:
            fcntl.flock(self.fds["turnstile"], fcntl.LOCK_UN)
        self.held = "shared"
        try:
            yield
        finally:
            self.held = None
            fcntl.flock(self.fds["lock"], fcntl.LOCK_UN)

    @contextlib.contextmanager
    def reclaim(self) -> Iterator[None]:
        """Every worker on the device hands its cached memory back while the requests inside run (those
        idle within IDLE_POLL_S, SETTLE_S before the first starts; those running after their request),
        the device still shared: room for a retry without stopping anyone."""
        if self.held is not None:
            yield
            return
        fcntl.flock(self.fds["waiting"], fcntl.LOCK_SH)
        try:
            time.sleep(self.settle_s)
            yield
        finally:
            fcntl.flock(self.fds["waiting"], fcntl.LOCK_UN)

    @contextlib.contextmanager
    def exclusive(self, limit_s: float | None = None) -> Iterator[bool]:
        """The device to this holder alone: waits for the requests running now, lets no new one start.
        With `limit_s`, it gives up when they have not all ended within it, lets new requests in again
        and holds nothing for the block (yields False); else yields True."""
        if self.held == "exclusive":
            yield True
            return
        assert self.held is None, "a retry alone is taken between requests, never inside one"
        fcntl.flock(self.fds["waiting"], fcntl.LOCK_SH)  # the workers hand their cached memory back
        flagged = time.monotonic()
        deadline = None if limit_s is None else flagged + limit_s
        taken = ["waiting"]
        for name in ("turnstile", "lock"):  # no new request gets in; the running ones have ended
            if not _flock_by(self.fds[name], deadline):
                for held in taken:
                    fcntl.flock(self.fds[held], fcntl.LOCK_UN)
                yield False
                return
            taken.append(name)
        time.sleep(max(0.0, self.settle_s - (time.monotonic() - flagged)))  # the idle ones have handed back
        self.held = "exclusive"
        try:
            yield True
        finally:
            self.held = None
            for name in ("lock", "turnstile", "waiting"):
                fcntl.flock(self.fds[name], fcntl.LOCK_UN)

    def env(self) -> dict[str, str]:
        """What a worker on this device is told: where to look for a waiting retry."""
        return {WAITING_ENV: str(self.paths["waiting"]), LOCK_ENV: str(self.paths["lock"])}

    def close(self) -> None:
        self._closer()
        self.fds = {}


EXCLUSIVE_POLL_S = 0.05  # how often a retry alone with a time limit asks again for the device


def _flock_by(fd: int, deadline: float | None) -> bool:
    """An exclusive flock on `fd`, waited for until `deadline` (time.monotonic(); None: as long as it
    takes); whether it was taken."""
    if deadline is None:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return True
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(EXCLUSIVE_POLL_S)


def retry_waiting(path: str | None = None) -> bool:
    """(In a worker.) Whether a retry alone is waiting for, or holding, this worker's device: the
    `waiting` file is then locked shared, and a non-blocking exclusive lock on it fails."""
    path = path or os.environ.get(WAITING_ENV)
    if not path:
        return False
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # closing drops the probe's own lock
    return False


MAX_WAIT_S = 60.0
FULL_WAIT_SHARE = 1 / 4  # a request of this share of the capacity or more may wait MAX_WAIT_S
BACKFILL = 1 / 16  # the largest share of the capacity a request may take ahead of earlier waiters
MAX_WAIT_ENV = "RESCORE_LEDGER_MAX_WAIT_S"
FRESH_S = 1.0  # the oldest report of the device's free memory a grant rests on
FREE_MARGIN = 1 / 16  # of the capacity, left free beside a grant on measured memory (the running requests' growth)
LENT_S = 5.0  # how long a grant on measured memory counts against later reports (its allocations may not show yet)
CREEP = 1 / 64
"""Of the capacity: a growth no larger is granted on measured free memory beside the room a retry waits
for (`Ledger.await_room`), not after it. A worker's peaks creep up from case to case (on an H100 at
c94eeba a median 90 MiB a step); kept from a retry's room, every such step waited its limit while
a retry waited up to a minute for 15-26 GiB: in the cold run all 92 small requests granted at their
limit (463 s) fell inside such a wait. It still counts against the retry's next report (`lend`)."""


def wait_limit(max_wait_s: float, nbytes: int, capacity: int) -> float:
    """The longest a request for `nbytes` waits: `max_wait_s` in proportion to its share of the
    capacity, all of it from FULL_WAIT_SHARE up. What a wrong guess costs grows with the request: a
    small one granted on a full device rarely runs out (and is then retried), while waiting
    costs it the same minute whatever its size."""
    return max_wait_s * min(1.0, nbytes / (FULL_WAIT_SHARE * capacity)) if capacity > 0 else max_wait_s


@dataclass(frozen=True)
class Grant:
    """How a reservation was granted: `ledger` (its arithmetic), `free` (the device's measured free
    memory: `free_bytes` reported `age_s` before), `limit` (its wait limit ran out; `free_bytes` the
    device's last report then, where there was one), `held` (no more than it held); after `waited_s`."""

    by: str
    free_bytes: int | None = None
    age_s: float | None = None
    waited_s: float = 0.0
    others: tuple[int, int, int, int] = (0, 0, 0, 0)  # what the other holders held then (`held_by_others`)
    counted: tuple[int, int] | None = None  # `limit`: what that report had to leave (`counted_against_report`)


def held_by_others(entries: dict[str, dict], owner: str) -> tuple[int, int, int, int]:
    """What the live holders other than `owner` hold: (bytes in all, how many hold some, the largest
    reservation, how many wait for more), for the log line of a long wait."""
    rest = [e for k, e in entries.items() if k != owner]
    held = [int(e.get("held") or 0) for e in rest]
    return sum(held), sum(h > 0 for h in held), max(held, default=0), sum(e.get("want") is not None for e in rest)


def free_allows(state: dict, nbytes: int, capacity: int, now: float) -> Grant | None:
    """A grant on the device's measured free memory (`Ledger.note_free`) of a request that asks for
    `nbytes` beyond what its worker holds already, when that is small (at most BACKFILL of the
    capacity), the latest report is fresh and leaves FREE_MARGIN of the capacity beside it and beside
    what was granted so since shortly before that report. On an H100 (0cf08e4) a worker's requests
    grew 20-100 MiB at a time as its cases' peaks crept up, and each growth, counted in full, waited
    its limit (5 s for 1.5 GiB) on a ledger over its capacity while the device reported 7-60 GiB free."""
    if nbytes > BACKFILL * capacity:
        return None
    return _room_reported(state, nbytes, capacity, now, now - FRESH_S, "free", keep_room=nbytes > CREEP * capacity)


def counted_against_report(state: dict, owner: str | None = None) -> tuple[int, int]:
    """What a grant on the latest report of free memory must leave beside it: the bytes lent on such
    reports shortly before that one (`lend`), and the room the holders other than `owner` wait for."""
    at = float((state.get("free") or {}).get("at", 0.0))
    lent = sum(int(b) for t, b in state.get("lent", []) if t >= at - LENT_S)
    kept = sum(int(e.get("room") or 0) for k, e in (state.get("entries") or {}).items() if k != owner)
    return lent, kept


def _room_reported(state: dict, nbytes: int, capacity: int, now: float, since: float, by: str,
                   owner: str | None = None, keep_room: bool = True) -> Grant | None:
    """A grant of `nbytes` (`by`) when the latest report of the device's free memory, made at `since` or
    later, leaves FREE_MARGIN of the capacity beside it, beside what was lent on such reports shortly
    before that one and, `keep_room`, beside the room the holders other than `owner` wait for
    (`counted_against_report`): a retry waiting for room goes before any grant on free memory but a
    creeping growth's (CREEP)."""
    free = state.get("free") or {}
    at, free_bytes = float(free.get("at", 0.0)), int(free.get("bytes", 0))
    if not free or at < since:
        return None
    lent, kept = counted_against_report(state, owner)
    if free_bytes - lent - (kept if keep_room else 0) - FREE_MARGIN * capacity < nbytes:
        return None
    return Grant(by, free_bytes, max(0.0, now - at))


def lend(state: dict, nbytes: int, now: float) -> None:
    """Count a grant on measured memory against the reports of the next LENT_S (its allocations may
    not show in them yet)."""
    state.setdefault("lent", []).append([now, nbytes])


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc/<pid>/stat), None when it is gone or
    a zombie (killed, its parent gone before reaping it: it holds no memory, though its pid stays):
    a pid the system reused for another process does not keep a dead holder's entry alive."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            return ""
        return ""  # no /proc: alive, start unknown
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] in ("Z", "X") else fields[19]


def holder_id() -> dict:
    """This process as a ledger entry names it."""
    return {"pid": os.getpid(), "start": _start_time(os.getpid())}


def _entry(entries: dict[str, dict], owner: str, me: dict) -> dict:
    """`owner`'s entry in the ledger, a fresh one (nothing held, nothing wanted) where it has none."""
    return entries.setdefault(owner, dict(me, held=0, want=None, order=0))


def _alive(entry: dict) -> bool:
    start = _start_time(int(entry.get("pid", 0)))
    return start is not None and (not entry.get("start") or not start or start == entry["start"])


class Ledger:
    """The bytes each holder expects to use on one device, and who waits for what."""

    def __init__(self, folder: Path, key: str, poll_s: float = 0.25, sleep: Callable[[float], None] = time.sleep,
                 max_wait_s: float | None = None):
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / f"{key}.ledger.json"
        self.fd = _open(self.path)
        self._closer = weakref.finalize(self, os.close, self.fd)  # as DeviceLock's
        self.poll_s, self.sleep = poll_s, sleep
        # The longest a reservation waits (for a request of a quarter of the capacity or more, less for
        # a smaller one: `wait_limit`): past it the request goes ahead all the same. The ledger only
        # spaces out what its estimates say will not fit; a request that then runs out of memory is
        # retried with the caches handed back, then with the device to itself (sandbox.retry_for_memory),
        # so no verdict rests on an estimate, and one large or overestimated submission never holds
        # every other worker up.
        self.max_wait_s = float(os.environ.get(MAX_WAIT_ENV, MAX_WAIT_S)) if max_wait_s is None else max_wait_s

    def _edit(self, change: Callable[[dict], object]) -> object:
        """Apply `change` to the ledger (live entries only) under its lock, write it back, return its result."""
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        try:
            raw = os.pread(self.fd, 1 << 24, 0)
            try:
                state = json.loads(raw) if raw.strip() else {}
            except ValueError:
                state = {}  # a ledger torn by a crash mid-write: the holders re-register on their next request
            state["entries"] = {k: e for k, e in (state.get("entries") or {}).items() if _alive(e)}
            state.setdefault("next", 0)
            result = change(state)
            data = json.dumps(state).encode()
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, data, 0)
            return result
        finally:
            fcntl.flock(self.fd, fcntl.LOCK_UN)

    def entries(self) -> dict[str, dict]:
        return dict(self._edit(lambda state: dict(state["entries"])))

    def others(self, owner: str) -> tuple[int, int, int, int]:
        """What the other live holders hold now (`held_by_others`)."""
        return held_by_others(self.entries(), owner)

    def note_free(self, nbytes: int) -> None:
        """Record the device's free memory as a worker measured it just now (`free_allows` reads it)."""
        now = time.time()
        self._edit(lambda state: state.update(free={"bytes": int(nbytes), "at": now}, lent=[
            [t, b] for t, b in state.get("lent", []) if t >= now - FRESH_S - LENT_S]))

    def reserve(self, owner: str, nbytes: int, capacity: int) -> Grant:
        """Hold `nbytes` of the device for `owner` (a reservation it held before is replaced: it keeps
        holding that while it waits for more); returns how it was granted and the seconds it waited.
        Where the reservations' arithmetic says wait, a small request that a fresh report of the
        device's free memory has room for is granted at once (`free_allows`; the module's docstring
        says why small only)."""
        began = time.monotonic()
        limit = wait_limit(self.max_wait_s, nbytes, capacity)
        me = dict(holder_id())

        def granted(state: dict, grant: Grant) -> Grant:
            """The reservation held, with what the others held then (read here: no second edit to log it)."""
            state["entries"][owner].update(held=nbytes, want=None)
            return replace(grant, others=held_by_others(state["entries"], owner))

        def attempt(state: dict) -> Grant | None:
            entries = state["entries"]
            own = _entry(entries, owner, me)
            if nbytes <= own["held"]:
                return granted(state, Grant("held"))
            if own["want"] is None:
                state["next"] += 1
                own.update(want=nbytes, order=state["next"])
            own["want"] = nbytes
            others = sum(e["held"] for k, e in entries.items() if k != owner)
            ahead = [e for k, e in entries.items()
                     if k != owner and e["want"] is not None and e["order"] < own["order"]]
            extra = sum(max(0, e["want"] - e["held"]) for e in ahead)
            small = nbytes <= BACKFILL * capacity and others + nbytes <= capacity
            if small or others + extra + nbytes <= capacity or (not ahead and others == 0):
                return granted(state, Grant("ledger"))
            # On measured memory only the growth counts: the worker holds its reservation already
            # (its allocator keeps what its last request took), and the device's report leaves it out.
            grow, now = nbytes - own["held"], time.time()
            if grant := free_allows(state, grow, capacity, now):
                lend(state, grow, now)
                return granted(state, grant)
            return None

        def at_limit(state: dict) -> Grant:
            _entry(state["entries"], owner, me)
            free = state.get("free") or {}  # the device's last report, for the log: was there room?
            if not free:
                return granted(state, Grant("limit"))
            return granted(state, Grant("limit", int(free["bytes"]), max(0.0, time.time() - float(free["at"])),
                                        counted=counted_against_report(state, owner)))

        while (grant := self._edit(attempt)) is None:
            if time.monotonic() - began >= limit:
                grant = self._edit(at_limit)
                break
            self.sleep(self.poll_s)
        return replace(grant, waited_s=time.monotonic() - began)

    def await_room(self, owner: str, nbytes: int, capacity: int, limit_s: float) -> Grant | None:
        """(A request still out of memory with the caches handed back.) Wait, at most `limit_s`, for
        a report of the device's free memory made since this call with room for `nbytes` beside
        FREE_MARGIN of the capacity (`_room_reported`); None when none came, or when no other holder
        is live (then nothing running will free any). The others' requests run on meanwhile, while
        a retry alone would stop them all (the module's docstring); while it waits, the room it
        waits for is not granted to them on measured free memory (the entry's `room`)."""
        began, since, me = time.monotonic(), time.time(), holder_id()

        def attempt(state: dict) -> Grant | bool:
            entries = state["entries"]
            if not any(k != owner for k in entries):
                return False
            own = _entry(entries, owner, me)
            now = time.time()
            if grant := _room_reported(state, nbytes, capacity, now, since, "room", owner):
                own.pop("room", None)
                lend(state, nbytes, now)
                return grant
            own["room"] = nbytes  # until it comes, no grant on free memory takes it
            return True

        def give_up(state: dict) -> None:
            state["entries"].get(owner, {}).pop("room", None)

        while (grant := self._edit(attempt)) is True:
            if time.monotonic() - began >= limit_s:
                self._edit(give_up)
                return None
            self.sleep(self.poll_s)
        return replace(grant, waited_s=time.monotonic() - began) if grant else None

    def release(self, owner: str) -> None:
        self._edit(lambda state: state["entries"].pop(owner, None))

    def close(self) -> None:
        self._closer()
