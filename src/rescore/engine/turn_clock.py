"""One request's clock, as the worker's notes of whose turn it is move it (`worker/turns.py`).

A request has its timeout; inside a `fixed`, `case` or `explain` request a turn of the candidate's
whose reference time is known is also limited by its call limit (`pacing.call_limit`), counted from
its note. When time runs out, the turn in hand says whose fault it is:

- the candidate's, past its call limit, or without a reference time to judge it by (a model's
  construction, a compile): a `timeout`;
- the harness's (a reference run), or the candidate's while what the reference's own time at these
  sizes allows it (the call limit less its floor) was more than the timeout left: a limit of this
  machine (HARNESS_TIMEOUT: `skipped`), never the kernel's timeout.

So the reference at a benchmark's sizes on a slow machine never times the kernel out (level1/task59's
fixed check on a CPU: a minute of conv3d per reference call), and a hang at sizes the reference
answers quickly costs seconds. Other requests (a load, a timing row) keep one timeout, the candidate's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from rescore.engine.pacing import HARNESS_TIMEOUT
from rescore.model.outcomes import Outcome
from rescore.worker.protocol import CANDIDATE, HARNESS


@dataclass(frozen=True)
class Expiry:
    """How a request whose turn ran out ends: its outcome, reason, kind of death and call limit."""

    outcome: Outcome
    reason: str
    kind: str
    limit_s: float | None = None


class TurnClock:
    """The deadline of the turn in hand (`deadline`), moved by each note (`note`)."""

    def __init__(self, turned: bool, timeout: float, call_limit: Callable[[float], float | None] | None,
                 sent: float | None = None):
        self.turned, self.timeout, self.call_limit = turned, timeout, call_limit
        self.turn_start = time.monotonic() if sent is None else sent
        self.cap = self.deadline = self.turn_start + timeout
        self.by = HARNESS if turned else CANDIDATE
        self.limit: float | None = None  # the call limit of the candidate's turn in hand, when it has one
        self.reference_s: float | None = None
        self.limit_s: float | None = None  # the last call limit any turn of the request had
        self.scaled = 0.0  # the part of that limit the reference's time gives (the limit less its floor)
        self.most_used = 0.0  # the largest share of its limit a limited turn used

    def note(self, body: dict) -> None:
        """A note from the worker (`{by, reference_s}`; `{}`: the answer, which ends the turn)."""
        now = time.monotonic()
        if self.limit:
            self.most_used = max(self.most_used, (now - self.turn_start) / self.limit)
        if not self.turned:
            return
        self.by, self.turn_start, self.limit, self.deadline = str(body.get("by") or self.by), now, None, self.cap
        ref = body.get("reference_s")
        if self.by != CANDIDATE or self.call_limit is None or not isinstance(ref, (int, float)):
            return
        limit = self.call_limit(float(ref))
        if limit is not None:
            self.limit, self.limit_s, self.reference_s = limit, limit, float(ref)
            self.scaled = limit - (self.call_limit(0.0) or 0.0)  # what the reference's own time adds
            self.deadline = min(self.cap, now + limit)

    def expired(self) -> Expiry:
        """How the request ends now that the turn in hand ran out."""
        if self.turned and self.by == HARNESS:
            return Expiry(Outcome.SKIPPED, f"the harness's own work (the reference at these sizes, the inputs, the "
                          f"judging) did not finish within the {self.timeout:g} s per-case timeout on this machine: "
                          f"a limit of this machine, not the kernel's; the worker was killed", HARNESS_TIMEOUT)
        if self.limit is not None and self.turn_start + self.limit <= self.cap:
            return Expiry(Outcome.TIMEOUT, f"no answer within {self.limit:.3g} s, the limit of a call at these sizes "
                          f"(the float64 reference took {self.reference_s:.3g} s there); the worker was killed",
                          Outcome.TIMEOUT.value, self.limit)
        if self.limit is not None and self.scaled > self.cap - self.turn_start:
            return Expiry(Outcome.SKIPPED, f"the kernel's call at these sizes may take {self.limit:.3g} s (the float64 "
                          f"reference took {self.reference_s:.3g} s there), more than the {self.timeout:g} s per-case "
                          f"timeout left it: a limit of this machine, not the kernel's; the worker was killed",
                          HARNESS_TIMEOUT)
        return Expiry(Outcome.TIMEOUT, f"no answer within {self.timeout:g} s; the worker was killed",
                      Outcome.TIMEOUT.value)
