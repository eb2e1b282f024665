"""One worker's part in sharing its device (`runtime/device_share.py`): the lock it holds around each
request, and the memory it reserves for each request of the submission it runs.

What a submission needs is estimated from the worker's own answers (`protocol.MEMORY_KEY`): at load,
the reference's peak at the benchmark's sizes traced on the meta device (`worker/footprint.py`); after
the fixed check, the peak it measured around the reference there; after every request, the most its
tensors took during it (not what its allocator caches). The reservation before a request is

    CONTEXT_BYTES + max(FACTOR x the reference's peak, what the worker was seen to hold at its scale)

where the reference's peak of a fuzz case, for a problem whose benchmark's largest input is past the
fuzz budget, is its trace at the benchmark's sizes fitted to that budget (`reference_at`).

A request's scale (`protocol.scale_of`) is the benchmark's sizes (the fixed check, a timing row, a fuzz case
of a strategy at the benchmark's sizes, a trigger's inputs) or the fuzz oracle's drawn sizes: what a
candidate held in the fixed check is not what its smaller fuzz cases need (on an H200 a kernel held
86 GiB at the benchmark's sizes, 64 times its fuzz cases' inputs, and the reservation kept 87 GiB
for the rest of its 300 s, every other shard waiting behind it). A worker hands its allocator's cache
back when the scale drops (`footprint.at_scale`), so that what it holds stays what it reserved.

FACTOR = 3: a fuzz case holds the float64 truth (twice the reference's float32 bytes) beside the
candidate's run (about one reference's worth) at the benchmark's sizes (`benchmark_shape`), and
the fixed check both models' outputs at once. The capacity is USABLE of the device's memory, the
rest left to the driver and fragmentation. On the CPU nothing is reserved (the host's memory is
bounded per worker by its rlimit) unless a capacity is given (the tests' stand-ins).
"""

from __future__ import annotations

import logging
import os
import re
import time
from pathlib import Path

from rescore.engine.gpus import visible_device
from rescore.model.findings import merge
from rescore.model.oom import alone_reason, size_text
from rescore.model.outcomes import Outcome
from rescore.runtime.device_share import DeviceLock, Grant, Ledger, share_folder
from rescore.worker.protocol import ALONE_KEY, BENCHMARK, FUZZ, MEASURE_ENV

log = logging.getLogger("rescore")

CONTEXT_BYTES = 768 << 20
"""A CUDA worker's own memory besides its tensors: the context, cuBLAS and cuDNN handles and workspaces
(torch 2.11 on an H100: about 0.5 to 0.7 GiB per process)."""
FACTOR = 3
USABLE = 0.9
WAIT_NOTE_S = 1.0  # a reservation that waited longer than this is logged
GRANTED = {"ledger": "as the reservations fit", "limit": "at its wait limit", "held": "within what it held"}
NOTE_FREE_S = 0.2  # the least time between two of one worker's reports of the device's free memory to the ledger
ROOM_WAIT_S = 60.0
"""How long a request still out of memory with the caches handed back waits for the device to report room
for it before it runs alone: on an H100 each retry alone stopped every other shard for its wait for the
running requests (6 to 167 s) and its run, 1,200 worker-seconds each on average; a wait for room stops no
one. Within 30 s, 5 of 7 found room (in 0.5-9.8 s), at 0cf08e4."""


class DeviceShare:
    """The lock and the reservation of one `sandbox.Worker` on its device."""

    def __init__(self, device: str, gpu: str | None = None, capacity: int | None = None,
                 folder: os.PathLike | None = None):
        self.device = device
        name = gpu if gpu is not None else visible_device(0)  # an index, a UUID or a MIG path
        self.key = "gpu-" + re.sub(r"[^A-Za-z0-9._-]", "_", name) if device == "cuda" else "host"
        root = Path(folder) if folder is not None else share_folder()
        self.lock = DeviceLock(root, self.key)
        self.ledger = Ledger(root, self.key)
        self.capacity = capacity  # bytes all holders may reserve together; from the worker's answers on a GPU
        self.owner = f"{os.getpid()}-{id(self)}"
        self.reference_bytes = 0  # the current submission's reference peak (estimated, then measured)
        self.measured = False  # reference_bytes was measured (the fixed check), not traced
        # The reference's traced peaks at the benchmark's sizes and at those fitted to the fuzz budget
        # (None: the benchmark is within the budget, or no trace): what a fuzz case reserves.
        self.traced: dict[str, int | None] = {BENCHMARK: None, FUZZ: None}
        self.seen = {BENCHMARK: 0, FUZZ: 0}  # the most the worker's tensors took at each scale (their peak)
        self.scale = BENCHMARK  # the scale of the request in hand
        self.held = 0  # what the ledger grants this worker now
        self.waited_s = 0.0  # time spent waiting for capacity, over the worker's life
        self.noted_at = float("-inf")  # when this worker last reported the device's free memory to the ledger

    def env(self) -> dict[str, str]:
        """What the worker is told (where a waiting retry shows; whether to estimate memory on the CPU)."""
        env = self.lock.env()
        if self.device != "cuda" and self.capacity is not None:
            env[MEASURE_ENV] = "1"
        return env

    def needed(self, scale: str | None = None) -> int:
        """What a request at `scale` (default: the one in hand) is expected to need."""
        scale = scale or self.scale
        return CONTEXT_BYTES + max(FACTOR * self.reference_at(scale), self.seen[scale])

    def reference_at(self, scale: str) -> int:
        """The reference's peak expected at `scale`: at the benchmark's sizes (traced, then measured);
        for a fuzz case of a problem whose benchmark is past the fuzz budget, its trace at the budget,
        raised in the proportion the fixed check's measure raised the benchmark's trace (no draw's
        inputs are larger; a case that needs more shows in `seen` and is reserved from then on)."""
        fuzz, bench = self.traced[FUZZ], self.traced[BENCHMARK]
        if scale != FUZZ or not fuzz or not bench:
            return self.reference_bytes
        return min(self.reference_bytes, int(fuzz * max(1.0, self.reference_bytes / bench)))

    def begin(self) -> None:
        """A new submission: nothing known of what it needs until its load answers."""
        self.reference_bytes, self.measured, self.seen = 0, False, {BENCHMARK: 0, FUZZ: 0}
        self.traced = {BENCHMARK: None, FUZZ: None}
        self.scale = BENCHMARK  # its load, then its fixed check

    def at(self, scale: str) -> None:
        """The next request runs at `scale` (`scale_of`; "" keeps the last: an explanation runs at its
        case's sizes)."""
        self.scale = scale or self.scale

    def observe(self, memory: dict | None) -> None:
        """Take in a worker's memory report (`protocol.MEMORY_KEY`) on the request in hand: the device's
        size, the reference's traced peak (at load), its measured peak (the fixed check), the most its
        tensors took (at the request's scale)."""
        memory = memory or {}
        if memory.get("total"):
            self.capacity = int(USABLE * memory["total"])
        if memory.get("reference_peak"):
            if not self.measured:  # how good the trace was, for the run's logs
                log.info("reference peak on %s: traced %s, measured %s", self.key, size_text(self.reference_bytes),
                         size_text(int(memory["reference_peak"])))
            self.reference_bytes, self.measured = int(memory["reference_peak"]), True  # measured beats traced
        elif memory.get("estimate") and not self.measured:
            self.reference_bytes = max(self.reference_bytes, int(memory["estimate"]))
        if memory.get("estimate"):  # the load's traces
            self.traced = {BENCHMARK: int(memory["estimate"]), FUZZ: int(memory.get("fuzz_estimate") or 0) or None}
        self.seen[self.scale] = max(self.seen[self.scale], int(memory.get("peak") or 0))
        if memory.get("free") is not None and time.monotonic() - self.noted_at >= NOTE_FREE_S:
            self.ledger.note_free(int(memory["free"]))
            self.noted_at = time.monotonic()

    def reserve(self) -> float:
        """Hold what the next request needs at its scale (`needed`), waiting while the device is full;
        returns the seconds it waited."""
        if self.capacity is None:
            return 0.0
        need = self.needed()
        if need == self.held:
            return 0.0
        grant = self.ledger.reserve(self.owner, need, self.capacity)
        waited, grown = grant.waited_s, max(0, need - self.held)
        self.held = need
        self.waited_s += waited
        on_free = grant.by == "free"
        if waited > WAIT_NOTE_S or on_free:
            # with what the others held then (a ledger over its capacity shows) and how it was granted
            held, holders, largest, waiting = grant.others
            others = (f"capacity {size_text(self.capacity)}; the others hold {size_text(held)} in {holders} "
                      f"reservations, the largest {size_text(largest)}; {waiting} waiting")
            # the device's report of its free memory that granted it, or that it went ahead beside
            report = ("" if grant.free_bytes is None
                      else f"{size_text(grant.free_bytes)} free {grant.age_s:.1f} s before")
            how = f"on the device's measured free memory ({report})" if on_free else GRANTED[grant.by]
            if grant.by == "limit" and report:  # whether the device had room all along, and what it had to leave
                lent, kept = grant.counted or (0, 0)
                how += (f" (the device's last report: {report}, {size_text(grown)} more asked; {size_text(lent)} "
                        f"lent against it, {size_text(kept)} kept for a retry's room)")
            if waited > WAIT_NOTE_S:
                log.info("waited %.1f s for %s of %s's memory (%s); granted %s", waited, size_text(need), self.key,
                         others, how)
            else:
                log.info("granted %s of %s's memory after %.1f s %s (%s)", size_text(need), self.key, waited, how,
                         others)
        return waited

    def room_needed(self, asked: int | None, in_use: int | None) -> int:
        """The room a request still out of memory needs beside the worker's own context: what its process
        held when the allocation failed and that allocation (`in_use`, `asked`: torch's message), else
        what it is expected to need (`needed`, at least `asked`). The message wins over the estimate:
        on an H100 (0cf08e4) a submission whose reference peaked at 8.5 GiB held a reservation of
        38.75 GiB, and its request whose failed allocation was 8 GiB found no room for that in 30 s."""
        if in_use is not None and asked is not None:
            return max(in_use - CONTEXT_BYTES, 0) + asked
        return max(self.needed() - CONTEXT_BYTES, asked or 0)

    def await_room(self, need: int) -> Grant | None:
        """Wait, at most ROOM_WAIT_S, for the device to report room for `need` bytes (`Ledger.await_room`);
        None when none was reported. Only where memory is reserved (a known capacity): the caller's to ask."""
        assert self.capacity is not None, "no capacity: nothing reserved, no report of free memory to wait for"
        return self.ledger.await_room(self.owner, need, self.capacity, ROOM_WAIT_S)

    def others_holding(self) -> int:
        """How many other live workers hold some of the device's memory now (0 where none is reserved:
        a CPU, a worker alone on its device)."""
        return self.ledger.others(self.owner)[1] if self.capacity is not None else 0

    def release(self) -> None:
        if self.held:
            self.ledger.release(self.owner)
            self.held = 0

    def close(self) -> None:
        self.release()
        self.lock.close()
        self.ledger.close()


def alone_result(result: dict, device: str) -> dict:
    """The row of a request that ran with the device to itself (or never needed to): still out of
    memory, it is `skipped` with the bytes asked, never a failure; the candidate's own allocation
    failing where the reference ran at the same sizes is also the finding `oom_where_reference_fits`."""
    alone = result.pop(ALONE_KEY, None) or {}
    if result.get("outcome") != Outcome.OOM:
        return result
    by = alone.get("by") or "the harness"
    out = dict(result, outcome=Outcome.SKIPPED, reason=alone_reason(by, alone.get("bytes"), device,
                                                                     str(result.get("reason") or "")))
    if alone.get("reference_ran"):
        out["findings"] = merge(result.get("findings"), ["oom_where_reference_fits"])
    return out
