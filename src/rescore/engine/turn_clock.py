"""One request's clock, as the worker's notes of whose turn it is move it (`worker/turns.py`).

A `fixed`, `case` or `explain` request gives the candidate and the harness `timeout` seconds each of
their own time; a turn of the candidate's whose reference time is known is also limited by its call
limit (`pacing.call_limit`), counted from its note. So the reference at a benchmark's sizes on a slow
machine never eats the kernel's time, and a kernel's hang never eats the harness's: when a turn runs
out, its holder is at fault. The compiler's turns (Triton's JIT, torch.compile) are the candidate's
time without a call limit. Other requests (a load, a timing row) keep one timeout, all the candidate's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from rescore.engine.pacing import HARNESS_TIMEOUT
from rescore.model.outcomes import Outcome

HARNESS, CANDIDATE = "harness", "candidate"


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
        self.deadline = self.turn_start + timeout
        self.by = HARNESS if turned else CANDIDATE
        self.used = {HARNESS: 0.0, CANDIDATE: 0.0}  # each one's own seconds in this request
        self.limit: float | None = None  # the call limit of the turn in hand, when it has one
        self.reference_s: float | None = None
        self.limit_s: float | None = None  # the last call limit any turn of the request had
        self.most_used = 0.0  # the largest share of its limit a limited turn used

    @staticmethod
    def holder(by: str) -> str:
        return HARNESS if by == HARNESS else CANDIDATE

    def note(self, body: dict) -> None:
        """A note from the worker (`{by, reference_s}`; `{}`: the answer, which ends the turn)."""
        now = time.monotonic()
        spent = now - self.turn_start
        if self.limit:
            self.most_used = max(self.most_used, spent / self.limit)
        if not self.turned:
            return
        self.used[self.holder(self.by)] += spent
        self.by, self.turn_start, self.limit = str(body.get("by") or self.by), now, None
        left = max(0.0, self.timeout - self.used[self.holder(self.by)])
        self.deadline = now + left
        ref = body.get("reference_s")
        if self.by != CANDIDATE or self.call_limit is None or not isinstance(ref, (int, float)):
            return
        limit = self.call_limit(float(ref))
        if limit is not None and limit < left:
            self.limit, self.limit_s, self.reference_s, self.deadline = limit, limit, float(ref), now + limit

    def expired(self) -> Expiry:
        """How the request ends now that the turn in hand ran out."""
        if self.turned and self.by == HARNESS:
            return Expiry(Outcome.SKIPPED, f"the harness's own work (the reference at these sizes, the inputs, the "
                          f"judging) took more than the {self.timeout:g} s per-case timeout on this machine: a limit "
                          f"of this machine, not the kernel's; the worker was killed", HARNESS_TIMEOUT)
        if self.limit is not None:
            return Expiry(Outcome.TIMEOUT, f"no answer within {self.limit:.3g} s, the limit of a call at these sizes "
                          f"(the float64 reference took {self.reference_s:.3g} s there); the worker was killed",
                          Outcome.TIMEOUT.value, self.limit)
        return Expiry(Outcome.TIMEOUT, f"no answer within {self.timeout:g} s; the worker was killed",
                      Outcome.TIMEOUT.value)
