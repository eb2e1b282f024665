"""Degenerate problems: per problem, each null candidate judged by the benchmark's own fixed check in a
sandboxed worker; a problem is degenerate when any of them passes, so a "correct" verdict on it says little.

A problem's four nulls are one job (`protocol.null_candidates`): one load, and one run of the check's
reference (its model built once, called once a trial while a null still passes: most problems' nulls
all fail the first) from which every null's output is derived (`oracle/fixed.py`, `null_check`).
Run as four submissions, each its own check with the reference inside its forward, they would cost
four loads, eight model constructions and forty reference calls a problem (13-19 s on an H200 at
CUDA-L1's sizes).

A dump's problems are shared out over a few jobs that run beside the check shards (`shard_count`,
`shard_problems`, `rule degenerate_shard`): one worker for a dump's 199 problems at the benchmark's
sizes held `all` for over 40 minutes on an H200 after every check shard had finished; one job per
check shard cost the CPU's main job eight worker starts for 41 problems of a second each."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import pandas as pd

from rescore.engine.runner import run_submission
from rescore.engine.sandbox import Worker
from rescore.engine.shards import runnable
from rescore.model.nulls import NULLS
from rescore.model.outcomes import FixedVerdict, Outcome
from rescore.model.records import Problem, Submission, read_manifests
from rescore.model.run import RunConfig
from rescore.worker.protocol import NULLS_KEY, null_candidates

log = logging.getLogger("rescore")
# 25 problems a job: under 7 minutes on an H200 at CUDA-L1's sizes when a problem's four nulls were four
# checks (13-19 s a problem); one check for the four took 2.3x less on the CPU (17 level-1 problems).
PROBLEMS_PER_SHARD = 25
# Snakemake's priority of a degenerate job: above every check shard's (`shards.shard_priority`, its
# expected seconds), so that these jobs start with the first shards: on an H100 the last of them to
# start, at minute 15, ended the run two minutes after the last check shard.
PRIORITY = 1_000_000


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
                     gpu: str | None = None) -> pd.DataFrame:
    """Per problem: each null candidate's fixed-check verdict; degenerate when any of them passes
    (unknown, <NA>, when none passed and some could not run: their outcomes are in `reason`).

    `problems` is [(dump, Problem)]; `cfg` a RunConfig (device, fixed profile, dtype).
    Null candidates run in a sandboxed worker on `gpu` (`gpus.worker_gpu`), under exactly the check the
    submissions faced; a failure of the problem's own code (or of the worker) is every null's outcome."""
    rows = []
    worker = Worker(cfg.device, cfg.budget, log_dir, gpu=gpu)
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


def problems_of(subs: list[Submission]) -> list[tuple[str, Problem]]:
    """The distinct problems of the readable submissions `subs`, as [(dump, Problem)] in their order."""
    seen: set[tuple[str, str]] = set()
    out = []
    for sub in runnable(subs):
        key = (sub.problem.problem_id, sub.problem.content_hash)
        if key not in seen:
            seen.add(key)
            out.append((sub.dump, sub.problem))
    return out


def shard_count(manifest: str | Path, cap: int) -> int:
    """How many jobs run a dump's null candidates: one per PROBLEMS_PER_SHARD problems, at most `cap`
    (the config's `shards`), at least one (which writes an empty table)."""
    problems = len(problems_of(read_manifests([str(manifest)])))
    return max(1, min(cap, math.ceil(problems / PROBLEMS_PER_SHARD)))


def shard_problems(subs: list[Submission], shard: int, shards: int) -> list[tuple[str, Problem]]:
    """The problems job `shard` of `shards` runs: every `shards`-th from the `shard`-th, so that the
    jobs share a dump's problems out, each exactly once."""
    return problems_of(subs)[shard::shards]
