"""Degenerate problems: per problem, each null candidate judged by the benchmark's own fixed check in a
sandboxed worker; a problem is degenerate when any of them passes, so a "correct" verdict on it says little.

A problem's four nulls are one job (`protocol.null_candidates`): one load, and one run of the check's
reference (its model built once, called once a trial while a null still passes: most problems' nulls
all fail the first) from which every null's output is derived (`oracle/fixed.py`, `null_check`).
Run as four submissions, each its own check with the reference inside its forward, they would cost
four loads, eight model constructions and forty reference calls a problem (13-19 s on an H200 at
CUDA-L1's sizes).

Each problem's nulls run in the check shard that runs the problem's first submission (`owned_problems`),
in that shard's worker after its submissions (`stages.run_shard`): no worker of their own, no job slot
of their own, and never beside the same problem's submissions. On an H100 (071391d) nine jobs of
their own, beside the check shards, took 1,673 s of the run's 16 job slots in its first seven
minutes, most of it the heavy problems' references at the benchmark's sizes waiting for the memory
the same problems' check shards held (`level1/task66` 270 s); the check stage replayed without them
ended at 11.6 min instead of 13.3. One worker for a dump's 199 problems held `all` for over 40 minutes
on an H200 after every check shard had finished.
"""

from __future__ import annotations

import logging

import pandas as pd

from rescore.engine.runner import run_submission
from rescore.engine.sandbox import Worker
from rescore.engine.shards import runnable
from rescore.model.nulls import NULLS
from rescore.model.outcomes import FixedVerdict, Outcome
from rescore.model.records import Problem, Submission
from rescore.model.run import RunConfig
from rescore.worker.protocol import NULLS_KEY, null_candidates

log = logging.getLogger("rescore")


def _verdict(row: dict) -> FixedVerdict | str:
    outcome = row.get("outcome")
    if outcome == Outcome.PASS:
        return FixedVerdict.PASS
    if outcome == Outcome.MISMATCH:
        return FixedVerdict.FAIL
    if outcome == Outcome.DECLINED:
        return "n/a"  # the null does not apply (no input has the output's shape, no tensor output)
    return str(outcome)


def degenerate_table(problems: list[tuple[str, Problem]], cfg: RunConfig, log_dir: str | None = None,
                     gpu: str | None = None, worker: Worker | None = None) -> pd.DataFrame:
    """Per problem: each null candidate's fixed-check verdict; degenerate when any of them passes
    (unknown, <NA>, when none passed and some could not run: their outcomes are in `reason`).

    `problems` is [(dump, Problem)]; `cfg` a RunConfig (device, fixed profile, dtype).
    Null candidates run in a sandboxed worker, `worker` (a check shard's, left running) or one of their
    own on `gpu` (`gpus.worker_gpu`), under exactly the check the submissions faced; a failure of the
    problem's own code (or of the worker) is every null's outcome."""
    rows = []
    own = worker is None
    worker = Worker(cfg.device, cfg.budget, log_dir, gpu=gpu) if worker is None else worker
    try:
        for dump, problem in problems:
            row: dict = {
                "dump": dump,
                "problem_id": problem.problem_id,
                "op": problem.op,
                "problem_path": problem.path,
                "profile": cfg.fixed_profile,
                "dtype": cfg.fixed_dtype,
                "device": cfg.device,
            }
            reasons = []
            fixed = run_submission(null_candidates(problem), cfg, worker, cases=[], fixed=True)[0]
            judged = fixed.get(NULLS_KEY)  # absent when the check did not run (the problem's code, the worker)
            for kind in NULLS:
                result = judged[kind] if judged else fixed
                row[kind] = _verdict(result)
                row[f"{kind}_max_diff"] = result.get("max_abs_err")
                if row[kind] not in (FixedVerdict.PASS, FixedVerdict.FAIL, "n/a"):
                    reasons.append(f"{kind}: {result.get('outcome')}: {result.get('reason') or ''}"[:300])
            passing = [k for k in NULLS if row[k] == FixedVerdict.PASS]
            row["passing_nulls"] = ",".join(passing)
            # Unknown (null) when no null passed but some could not be run at all.
            row["degenerate"] = True if passing else (None if reasons else False)
            row["reason"] = "; ".join(reasons) or None
            rows.append(row)
            log.info("problem %s: degenerate=%s (%s)", problem.problem_id, row["degenerate"], row["passing_nulls"])
    finally:
        if own:
            worker.stop()
    columns = [
        "dump",
        "problem_id",
        "op",
        "problem_path",
        "profile",
        "dtype",
        "device",
        *NULLS,
        *[f"{k}_max_diff" for k in NULLS],
        "passing_nulls",
        "degenerate",
        "reason",
    ]
    df = pd.DataFrame(rows, columns=columns)
    df["degenerate"] = df["degenerate"].astype("boolean")
    return df


def first_submissions(subs: list[Submission]) -> list[Submission]:
    """The first readable submission of each distinct problem of `subs`, in their order."""
    seen: set[tuple[str, str]] = set()
    out = []
    for sub in runnable(subs):
        key = (sub.problem.problem_id, sub.problem.content_hash)
        if key not in seen:
            seen.add(key)
            out.append(sub)
    return out


def problems_of(subs: list[Submission]) -> list[tuple[str, Problem]]:
    """The distinct problems of the readable submissions `subs`, as [(dump, Problem)] in their order."""
    return [(sub.dump, sub.problem) for sub in first_submissions(subs)]


def owned_problems(subs: list[Submission], assignment: dict[str, int], shard: int) -> list[tuple[str, Problem]]:
    """The problems whose nulls check shard `shard` runs, each of a dump's exactly once: those whose
    first readable submission it runs (`assignment`: submission_id -> shard)."""
    return [(sub.dump, sub.problem) for sub in first_submissions(subs) if assignment.get(sub.submission_id) == shard]
