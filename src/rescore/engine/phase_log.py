"""Where one submission's time goes, as the parent sees it: the seconds each worker request spent in
each phase (the worker's `phases.PhaseTimer`, sent with every answer) and the parent's own waits
(a worker's start, a restart after a death, a timeout, the pipe), summed per submission into rows of
the phase table (`results/tables/phases.parquet`, `bench/phases.py` summarises it).

The phases of a submission add up to its elapsed time: what no phase names is `parent` (planning,
rows, the runner's own work).
"""

from __future__ import annotations

# The parent's phases (the worker's are in worker/phases.py: CATEGORY).
BUILD = "build"  # the submission's CUDA C build, in its check shard before its load (on a GPU)
WORKER_START = "worker_start"  # a fresh worker's start (python, torch, the harness's imports and snapshots)
RESTART = "restart"  # a worker started again after one died, and the submission loaded into it again
TIMEOUT_WAIT = "timeout_wait"  # waiting on a request that never answered, until its worker was killed
KILL = "kill"  # from a worker's SIGKILL to its exit (on a GPU: the driver tearing its context down)
DIED = "died"  # a request whose worker died before answering
MEMORY_WAIT = "memory_wait"  # waiting for the ledger to grant the device memory a request needs (`sharing.py`)
DEVICE_WAIT = "device_wait"  # waiting for the device lock: a retry holding the device alone, or a retry's hand-back
IPC = "ipc"  # a request's round trip less the worker's own time (the pipe, pickling, waking up)
SHRINK = "shrink"  # shrinking the submission's first fuzz failure (every request of it)
RESULT_CACHE = "result_cache"  # reading a submission's stored result (`result_cache.py`): none of its cases ran
PARENT = "parent"  # the rest of the submission's elapsed time: the runner's own work


class PhaseLog:
    """Seconds and counts per phase of one submission, added to by the worker's requests."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self.limit_use = 0.0  # the largest share of its limit a candidate's turn used (`turns.py`)
        # The most device memory its requests reserved (`sharing.DeviceShare.needed`: the estimate the
        # ledger granted; 0 where nothing is reserved, a CPU): what keeps it from running beside others.
        self.reserved_bytes = 0
        # The most device memory its worker's tensors took in one request (torch's max_memory_allocated,
        # the worker's report): what it used, against what was reserved for it.
        self.peak_bytes = 0

    def add(self, phase: str, seconds: float, calls: int = 1) -> None:
        self.seconds[phase] = self.seconds.get(phase, 0.0) + max(0.0, seconds)
        self.calls[phase] = self.calls.get(phase, 0) + calls

    def add_all(self, seconds: dict) -> None:
        """Add a worker's seconds per phase (what its answer says: only numbers are taken)."""
        for phase, s in seconds.items():
            if isinstance(s, (int, float)) and not isinstance(s, bool):
                self.add(str(phase), float(s))

    def observe_memory(self, memory: dict | None) -> None:
        """Take in a worker's memory report on a request (`protocol.MEMORY_KEY`): its tensors' peak."""
        self.peak_bytes = max(self.peak_bytes, int((memory or {}).get("peak") or 0))

    def rows(self, elapsed_s: float, case_s: float, **columns: object) -> list[dict]:
        """One row per phase, `parent` holding what the others leave of `elapsed_s`; each row also
        carries the submission's elapsed time, its cases' own time (`case_s`), the largest share of a
        call's limit it used, the most device memory it reserved and the most its tensors took."""
        parent = elapsed_s - sum(self.seconds.values())
        spent = dict(self.seconds)
        if parent > 0:
            spent[PARENT] = parent
        return [
            dict(columns, phase=phase, seconds=round(s, 6), calls=self.calls.get(phase, 1),
                 elapsed_s=round(elapsed_s, 6), case_s=round(case_s, 6), limit_use=round(self.limit_use, 4),
                 reserved_bytes=int(self.reserved_bytes), peak_bytes=int(self.peak_bytes))
            for phase, s in sorted(spent.items())
        ]


def case_seconds(rows: list[dict]) -> float:
    """A submission's cases' own time: the `wall_ms` of its rows, in seconds."""
    return sum(float(r["wall_ms"]) for r in rows if isinstance(r.get("wall_ms"), (int, float))
               and r["wall_ms"] == r["wall_ms"]) / 1e3
