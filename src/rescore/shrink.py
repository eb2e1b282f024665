"""Shrinking: reduce a failing case to a smaller one that still fails (Hypothesis's habit).

Sizes first (each dim halved, then stepped down, while the case still fails), then values
(simpler value classes: no non-finite entries, small integers, mostly zeros), all at the failing
case's seed, dtype and layout. The result is never larger than the original and always re-checked.
"""

from __future__ import annotations

import json

from rescore.outcomes import FLAGGING
from rescore.problem import Submission
from rescore.runner import job_of
from rescore.sandbox import Worker, run_with_retry

SIMPLER_VALUES = ("normal", "small_integers", "sparse")
MAX_STEPS = 48


def _still_fails(worker: Worker, seed: int, trigger: dict, timeout: float) -> dict | None:
    row = run_with_retry(worker, ("case", {"strategy": "shrink", "seed": seed, "dtype": trigger["dtype"],
                                           "override": trigger}), timeout)
    return row if row.get("outcome") in FLAGGING else None


def shrink_failure(worker: Worker, sub: Submission, failure: dict, timeout: float = 120.0) -> dict:
    """The smallest still-failing trigger found from one failing case (as a dict, with its row)."""
    job = job_of(sub)
    run_with_retry(worker, ("load", job), timeout)
    worker.job = job
    seed = int(failure["seed"])
    current = {"sizes": json.loads(failure["sizes"]) if failure.get("sizes") else {},
               "values": failure.get("values") or "normal", "layout": failure.get("layout") or "contiguous",
               "dtype": failure["dtype"]}
    best = _still_fails(worker, seed, current, timeout)
    steps = 1
    if best is None:  # flaky, or fails only in its strategy's own sampling: keep the original
        return {"shrunk": False, "trigger": current, "row": {}, "steps": steps,
                "note": "the failure does not reproduce as an explicit trigger"}
    for name in sorted(current["sizes"], key=lambda k: -current["sizes"][k]):
        while steps < MAX_STEPS and current["sizes"][name] > 1:
            size = current["sizes"][name]
            for candidate in (1, size // 2, size - 1):
                if candidate < 1 or candidate >= size:
                    continue
                trial = dict(current, sizes=dict(current["sizes"], **{name: candidate}))
                steps += 1
                row = _still_fails(worker, seed, trial, timeout)
                if row is not None:
                    current, best = trial, row
                    break
            else:
                break
    for values in SIMPLER_VALUES:
        if values == current["values"] or steps >= MAX_STEPS:
            continue
        trial = dict(current, values=values)
        steps += 1
        row = _still_fails(worker, seed, trial, timeout)
        if row is not None:
            current, best = trial, row
    return {"shrunk": True, "trigger": current, "row": best, "steps": steps, "note": ""}
