"""Replay one case: from a stored failure's id, or from its problem, submission, strategy and seed.

The inputs are a pure function of (problem, strategy, dtype, seed), so a replay re-creates them bit
for bit (the `inputs_hash` printed must equal the stored one) and reproduces the outcome; a replay
that no longer fails says so.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path

from rescore.engine.pacing import call_limit
from rescore.engine.sandbox import Worker, run_with_retry
from rescore.ingest.files import pair_from_files
from rescore.model.outcomes import DIED, Outcome
from rescore.model.run import RunConfig, default_budget
from rescore.model.tables import read_parquet
from rescore.runtime.device import DeviceUnavailable, device_problem, resolve_device
from rescore.worker.protocol import Case, Fixed, Load, job_of


def find_failure(failure_id: str, results: str) -> dict:
    """The stored failure `failure_id` (results/failures/failures.parquet)."""
    path = Path(results) / "failures" / "failures.parquet"
    if not path.exists():
        raise FileNotFoundError(f"{path}: no stored failures; run the pipeline first, or pass PROBLEM SUBMISSION")
    table = read_parquet(path, "failures")
    match = table[table["failure_id"] == failure_id]
    if match.empty:
        raise KeyError(f"{path}: no failure with id {failure_id!r}")
    return match.iloc[0].to_dict()


def replay_case(
    problem_path: str,
    submission_path: str,
    oracle: str,
    strategy: str,
    seed: int | None,
    dtype: str,
    device: str,
    trigger: dict | None = None,
    profile: str = "kernelbench-v0.1",
    timeout: float = 120.0,
    budget: int | None = None,
) -> dict:
    """Run exactly one case in a fresh worker; returns its row. `budget` (elements of the largest
    input; None: the device's default) must be the one the case was drawn with: it bounds the sizes."""
    sub = pair_from_files(problem_path, submission_path)
    cfg = RunConfig(device=device, budget=budget)
    worker = Worker(device, cfg.budget)
    worker.call_limit = functools.partial(call_limit, cfg.call_floor_s, cfg.call_factor)  # as the run limited it
    try:
        loaded = run_with_retry(worker, Load(job_of(sub)), cfg.load_timeout_s)
        worker.job = job_of(sub)
        if loaded.get("outcome") in DIED:
            return loaded
        if oracle == "fixed":
            return run_with_retry(worker, Fixed(profile, dtype), timeout)
        msg = Case(strategy, int(seed or 0), dtype, trigger)
        return run_with_retry(worker, msg, timeout)
    finally:
        worker.stop()


def replay_cli(args: argparse.Namespace) -> int:
    expected = None
    device = resolve_device(args.device)
    problem = device_problem(device)
    if problem:
        print(f"rescore replay: {problem}", file=sys.stderr)
        return 2
    dtype = args.dtypes.split(",")[0]
    budget = args.budget or default_budget(device)
    try:
        if len(args.target) == 1:
            stored = find_failure(args.target[0], args.results)
            expected = stored
            trigger = json.loads(stored["trigger"]) if stored.get("trigger") else None
            row = replay_case(
                stored["problem_path"],
                stored["source_path"],
                stored["oracle"],
                stored["strategy"],
                int(stored["seed"]),
                stored["dtype"],
                device,
                trigger,
                stored.get("tolerance_policy") or args.profile,
                args.timeout,
                budget,
            )
        elif len(args.target) == 2:
            trigger = json.loads(args.trigger) if args.trigger else None
            row = replay_case(
                args.target[0],
                args.target[1],
                args.oracle,
                args.strategy,
                args.seed,
                dtype,
                device,
                trigger,
                args.profile,
                args.timeout,
                budget,
            )
        else:
            print(
                "rescore replay: give FAILURE_ID, or PROBLEM.py SUBMISSION.py with --strategy and --seed",
                file=sys.stderr,
            )
            return 2
    except (FileNotFoundError, KeyError, ValueError, DeviceUnavailable) as exc:
        print(f"rescore replay: {exc}", file=sys.stderr)
        return 2
    print(
        f"outcome: {row.get('outcome')}  dtype {row.get('dtype')}  sizes {row.get('sizes')}  "
        f"layout {row.get('layout')}  values {row.get('values')}"
    )
    print(f"inputs_hash: {row.get('inputs_hash')}")
    if row.get("reason"):
        print(row["reason"])
    if row.get("cause"):
        print(f"cause (confirmed by experiment): {row['cause']}: {row.get('cause_evidence')}")
    if expected is not None:
        same_inputs = (expected.get("inputs_hash") in (None, row.get("inputs_hash"))
                       and expected.get("sizes") in (None, row.get("sizes")))  # sizes: the init inputs too
        if row.get("outcome") == expected.get("outcome") and same_inputs:
            print(f"reproduced: same inputs, same outcome ({expected['outcome']})")
        elif row.get("outcome") == Outcome.PASS:
            print(f"this replay no longer fails (stored outcome: {expected['outcome']})")
        else:
            print(f"differs from the stored case: stored {expected.get('outcome')} / {expected.get('inputs_hash')}")
    return 0 if row.get("outcome") in (Outcome.PASS, Outcome.SKIPPED, Outcome.DECLINED) else 1
