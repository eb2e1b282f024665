"""Shrinking: reduce a failing case to a smaller one that still fails (Hypothesis's habit).

Sizes first (each dim halved, then stepped down, while the case still fails), then values
(simpler value classes: no non-finite entries, small integers, mostly zeros), all at the failing
case's seed, dtype and layout. The result is never larger than the original and always re-checked.
"""

from __future__ import annotations

import json
import time

from rescore.engine.sandbox import Worker, run_with_retry
from rescore.model.failures import failure_id, first_failure_key
from rescore.model.outcomes import FLAGGING, Outcome
from rescore.model.records import Submission
from rescore.worker.protocol import EXPLAIN_KEY, Case, Load, job_of

SIMPLER_VALUES = ("normal", "small_integers", "sparse")
MAX_STEPS = 48


def _still_fails(worker: Worker, seed: int, trigger: dict, timeout: float) -> dict | None:
    # a step needs the verdict only: the experiments that confirm a cause are never asked for
    row = run_with_retry(worker, Case("shrink", seed, trigger["dtype"], trigger, defer_explain=True), timeout)
    row.pop(EXPLAIN_KEY, None)
    return row if row.get("outcome") in FLAGGING else None


def shrink_failure(worker: Worker, sub: Submission, failure: dict, timeout: float = 120.0,
                   deadline: float | None = None, settled: str | None = None) -> dict:
    """The smallest still-failing trigger found from one failing case (as a dict, with its row).

    Not tried for a timeout, nor for a submission that was settled (`settled`: its reason; every
    case ended the same way, so each step would cost a worker start to find the same death), nor
    past `deadline` (time.monotonic(): the end of the submission's budget); steps stop there too."""
    seed = int(failure["seed"])
    current = {"sizes": json.loads(failure["sizes"]) if failure.get("sizes") else {},
               "values": failure.get("values") or "normal", "layout": failure.get("layout") or "contiguous",
               "dtype": failure["dtype"]}
    if failure.get("outcome") == Outcome.TIMEOUT:  # each step of a hang would wait the whole per-case timeout
        return {"shrunk": False, "trigger": current, "row": {}, "steps": 0,
                "note": "not shrunk: a timeout costs the full per-case timeout at every step"}
    if settled:
        return {"shrunk": False, "trigger": current, "row": {}, "steps": 0, "note": f"not shrunk: {settled}"}
    if deadline is not None and time.monotonic() >= deadline:
        return {"shrunk": False, "trigger": current, "row": {}, "steps": 0,
                "note": "not shrunk: the submission's budget was spent on its cases"}
    stopped = False  # by the deadline, with more left to try

    def more() -> bool:
        nonlocal stopped
        stopped = stopped or (deadline is not None and time.monotonic() >= deadline)
        return steps < MAX_STEPS and not stopped

    job = job_of(sub)
    # Loaded afresh even where the worker holds it (a check shard): a kernel that caches results
    # across calls would otherwise fail on state earlier cases left, which no replay reproduces.
    run_with_retry(worker, Load(job), timeout)
    worker.job = job
    best = _still_fails(worker, seed, current, timeout)
    steps = 1
    if best is None:  # flaky, or fails only in its strategy's own sampling: keep the original
        return {"shrunk": False, "trigger": current, "row": {}, "steps": steps,
                "note": "the failure does not reproduce as an explicit trigger"}
    for name in sorted(current["sizes"], key=lambda k: -current["sizes"][k]):
        while more() and current["sizes"][name] > 1:
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
        if values == current["values"] or not more():
            continue
        trial = dict(current, values=values)
        steps += 1
        row = _still_fails(worker, seed, trial, timeout)
        if row is not None:
            current, best = trial, row
    return {"shrunk": True, "trigger": current, "row": best, "steps": steps,
            "note": f"stopped after {steps} steps: the submission's budget was spent" if stopped else ""}


def first_fuzz_failure(rows: list[dict]) -> dict | None:
    """The failure of one submission's rows that gets shrunk: its first flagged evaluation fuzz case
    in FIRST_FAILURE_ORDER, the one the illusion table names (whatever order the cases ran in)."""
    bad = [r for r in rows if r.get("oracle") == "fuzz" and r.get("purpose") == "evaluation"
           and r.get("outcome") in FLAGGING]
    return min(bad, key=first_failure_key, default=None)


def shrunk_record(worker: Worker, sub: Submission, failure: dict, device: str, timeout: float,
                  deadline: float | None = None, settled: str | None = None) -> dict:
    """One row of `results/failures/shrunk.parquet`: the failure, the smallest still-failing trigger
    found from it, and the command that replays that trigger (`shrink_failure` says when not)."""
    res = shrink_failure(worker, sub, failure, timeout, deadline, settled)
    trig = res["trigger"]
    return {
        "failure_id": failure_id(failure),
        "submission_id": sub.submission_id,
        "name": sub.name,
        "bug_class": sub.bug_class,
        "strategy": failure["strategy"],
        "seed": int(failure["seed"]),
        "dtype": failure["dtype"],
        "original_sizes": failure.get("sizes"),
        "original_values": failure.get("values"),
        "original_outcome": failure["outcome"],
        "original_elements": failure.get("n_elements"),
        "shrunk": res["shrunk"],
        "shrunk_sizes": json.dumps(trig["sizes"], sort_keys=True),
        "shrunk_values": trig["values"],
        "shrunk_outcome": res["row"].get("outcome"),
        "shrunk_elements": res["row"].get("n_elements"),
        "shrunk_diagnosis": res["row"].get("diagnosis"),
        "steps": res["steps"],
        "note": res["note"],
        "replay": f"rescore replay {sub.problem.path} {sub.path} --seed {failure['seed']} --device {device}"
                  f" --trigger '{json.dumps(trig, sort_keys=True)}'",
    }
