"""When one submission's remaining cases stop being worth their time: its wall-clock budget, and
settling a submission whose cases keep ending the same fatal way.

A run waits on its slowest shard, and a shard on its slowest submission. A kernel that hangs costs
the per-case timeout on every case (300 cases x 120 s), one that kills its worker a worker start on
every case; neither changes its verdict after the first few. So, per submission:

- **budget**: its cases (the fixed check first, so a verdict always exists) run until its budget of
  wall-clock seconds, counted from the end of its load, is spent; the rest are `skipped`, saying
  how many ran. The budget is checked between cases: a case that starts in time runs to its own
  timeout. The time it waited for its device (memory another worker holds, another submission's
  retry alone: `engine/sharing.py`) is counted, and the skipped cases' reason says how much of the
  budget it was: a run's length stays bounded by its submissions' budgets. Left out of the budget,
  the waits let the submissions that need the most memory, which wait the most, hold it twice as
  long, and every other worker waited behind them (on an H100 the cold run of the two external dumps
  finished a third fewer submissions in its first 24 minutes: docs/runs/2026-12-06-h100-c82a1c1.md).
- **settling**: `after` cases in a row whose worker died the same way (a timeout, or a crash by
  the same signal or exit code) settle it: its verdict is already flagged by a genuine timeout or
  crash and cannot change, and its remaining cases are `skipped` with that reason. Cases in a row
  means consecutive and distinct, so a correct kernel that is merely slow on one large case times
  out on that case alone and goes on; any case that answers starts the count again.
- **a call's own limit**: inside a case, the candidate's calls at some sizes may take `call_limit`:
  a floor plus a factor times the float64 reference's own time at those sizes (the worker measures
  it before the candidate runs and tells the parent: `worker/turns.py`). A hang costs seconds, not
  the per-case timeout, and is a `timeout` like any other: the limit is set by the work the case
  asks for, not by the run's patience (beside other workers on a GPU, only once a try with a longer
  limit timed out too: `sandbox.confirms_timeout`). The harness's own work (the reference at the
  benchmark's sizes on a slow machine) has only the per-case timeout, and past it is `skipped` as a
  limit of the machine, never blamed on the kernel.
- after a case timed out, the next ones run with a shorter timeout (`timeout_s`): a hang is seen
  for what it is in seconds. A case that answers within it is judged as usual, and the full
  timeout is back for the case after it. One that does not is not judged (`skipped`, never a
  `timeout` at a limit shorter than the configured one) unless its call ran past its own limit
  (then it is that call's `timeout`), and counts towards settling either way.
- the fixed check's death is the fixed verdict, not the fuzz oracle's: it counts in the streak, but
  neither shortens the first fuzz case's timeout nor settles the fuzz cases until one of them has
  died the same way and been judged. A kernel that never returns is then a `timeout` in both
  oracles, never a fuzz verdict of `skipped` (on an H100 a CUDA-L1 kernel that hung once in its
  fixed check had its fuzz verdict `skipped` that way).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rescore.model.outcomes import Outcome
from rescore.model.run import SETTLE_AFTER, SETTLE_TIMEOUT_S

HARNESS_TIMEOUT = "harness timeout"  # how a request ended whose harness, not its candidate, ran out of time


def call_limit(floor_s: float, factor: float, reference_s: float) -> float | None:
    """How long a candidate's calls at some sizes may take: `floor_s` plus `factor` times the float64
    reference's own time at those sizes (None when `floor_s` is 0: only the per-case timeout)."""
    return floor_s + factor * max(0.0, reference_s) if floor_s > 0 else None


def _no_wait() -> float:
    return 0.0


@dataclass
class Pace:
    """One submission's clock and its run of same-kind worker deaths, asked before and told after
    every case (`runner.run_submission`)."""

    timeout_s: float  # the per-case timeout
    total: int  # cases planned, the fixed check included
    budget_s: float | None = None
    settle_after: int = SETTLE_AFTER  # 0: never settle
    settle_timeout_s: float = SETTLE_TIMEOUT_S
    started: float = field(default_factory=time.monotonic)
    done: int = 0
    streak: list[str] = field(default_factory=list)  # death kinds of the last cases, in a row
    full_timeouts: int = 0  # timeouts at the full per-case timeout in the current streak
    limited_timeouts: int = 0  # timeouts at a call's own limit (`call_limit`) in the current streak
    judged: int = 0  # deaths in the current streak judged in the oracle whose cases settling would skip
    waited: Callable[[], float] = _no_wait  # the seconds its worker has waited for its device so far (the reason)

    def __post_init__(self) -> None:
        self._waited_before = self.waited()

    def spent(self) -> float:
        """The budget's seconds spent: since the clock started, the waits for the device included."""
        return time.monotonic() - self.started

    def device_waits(self) -> float:
        """The seconds of it the submission's worker waited for its device."""
        return self.waited() - self._waited_before

    def stop_reason(self) -> str | None:
        """Why the next case is not run (None: run it)."""
        if self.settle_after and len(self.streak) >= self.settle_after and self.judged:
            return self._settled()
        if self.budget_s is not None and self.spent() >= self.budget_s:
            waits = self.device_waits()
            shared = (f" ({waits:.0f} s of it waiting for the shared device: a limit of this run, not the "
                      "kernel's)") if waits >= 1 else ""
            return f"submission budget of {self.budget_s:g} s spent after {self.done} of {self.total} cases{shared}"
        return None

    def timeout(self) -> float:
        """The next case's timeout: shortened while the last case timed out."""
        if self.streak and self.streak[-1] == Outcome.TIMEOUT.value and self.settle_after and self.judged:
            return min(self.timeout_s, self.settle_timeout_s)
        return self.timeout_s

    def record(self, row: dict, death: str | None, timeout: float, settles: bool = True) -> dict:
        """Count one case that ran (`death`: how its worker died, None if it answered); returns its
        row, `skipped` when it outlived only a shortened timeout (not its call's own limit: `limit_s`).
        `settles` False: a case of another oracle than the cases after it (the fixed check), whose
        death cannot settle them or shorten their timeout on its own."""
        self.done += 1
        if death == HARNESS_TIMEOUT:  # the machine's limit, not the kernel's death: as if it answered
            death = None
        if death is None or (self.streak and self.streak[-1] != death):
            self.streak, self.full_timeouts, self.limited_timeouts, self.judged = [], 0, 0, 0
        if death is None:
            return row
        self.streak.append(death)
        if death == Outcome.TIMEOUT.value and row.get("limit_s") is not None:
            self.limited_timeouts += 1
            self.judged += settles
            return row
        if death != Outcome.TIMEOUT.value or timeout >= self.timeout_s:
            self.full_timeouts += death == Outcome.TIMEOUT.value
            self.judged += settles
            return row
        reason = (f"no answer within {timeout:g} s, the shortened timeout after a case of this submission timed "
                  f"out at the full {self.timeout_s:g} s; not judged")
        return dict(row, outcome=Outcome.SKIPPED.value, reason=reason)

    def _settled(self) -> str:
        kind, n = self.streak[-1], len(self.streak)
        if kind == Outcome.TIMEOUT.value:
            shortened = n - self.full_timeouts - self.limited_timeouts
            parts = [f"{self.limited_timeouts} at its call's own limit"] if self.limited_timeouts else []
            parts += [f"{self.full_timeouts} at the full {self.timeout_s:g} s"] if self.full_timeouts else []
            parts += [f"{shortened} at the shortened {self.settle_timeout_s:g} s"] if shortened else []
            how = f"timed out ({', '.join(parts)})"
        else:
            how = f"crashed the worker the same way ({kind})"
        return f"settled: {n} cases in a row {how}; its verdict cannot change, remaining cases not run"
