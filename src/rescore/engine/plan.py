"""A submission's cases before any runs: every fuzz case in run order, a `skipped` row for each dtype
it does not claim, and the shell command that re-runs one case."""

from __future__ import annotations

import json
import shlex

from rescore.inputs.seeds import case_seed
from rescore.inputs.strategies import get_strategy
from rescore.model.outcomes import Outcome
from rescore.model.records import Submission, claims_dtype
from rescore.model.run import RunConfig


def strategy_dtypes(name: str, cfg: RunConfig) -> tuple[str, ...]:
    """The dtypes a strategy runs at: its own (the single-dtype strategies), else the config's."""
    return get_strategy(name).dtypes or cfg.dtypes


def plan_cases(sub: Submission, cfg: RunConfig) -> list[dict]:
    """Every fuzz case of a submission: (strategy, dtype, index, seed, purpose), in run order, only
    in the dtypes it claims (`problem.claims_dtype`; `unclaimed_rows` records the others). Controls
    (label `correct`) add their calibration cases, also only in the dtypes they claim.

    A case's seed does not depend on its dtype, so case i of a strategy is the same input at every
    dtype. With `dtypes_in_turn` a strategy's i-th evaluation case runs at the (i mod n)-th of its n
    dtypes only: a subset of the cases of every dtype, with a strategy's cases still in a row (one
    decoy call among each 8 under the interpreter). Calibration keeps every dtype: its fit is per dtype.
    """
    cases = []
    for purpose, table in (("evaluation", cfg.strategies), ("calibration", cfg.calibration)):
        if purpose == "calibration" and sub.label != "correct":
            continue
        for name, count in table.items():
            dtypes = [d for d in strategy_dtypes(name, cfg) if claims_dtype(sub.dtypes, sub.declines, d)]
            if cfg.dtypes_in_turn and purpose == "evaluation" and dtypes:
                order = [(index, dtypes[index % len(dtypes)]) for index in range(count)]
            else:
                order = [(index, dtype) for dtype in dtypes for index in range(count)]
            for index, dtype in order:
                seed = case_seed(cfg.master_seed, sub.problem.problem_id, name, index, purpose)
                cases.append(
                    {"strategy": name, "dtype": dtype, "case_index": index, "seed": seed, "purpose": purpose}
                )
    return cases


def unclaimed_rows(sub: Submission, cfg: RunConfig) -> list[dict]:
    """One `skipped` row per (evaluation strategy, dtype) the submission does not claim, with that
    reason: its cases there are not run, so no study counts them and the cases table says why.
    The row carries the strategy's first case index and seed (no replay); the number of cases not
    run is the strategy's count in the config."""
    claims = ", ".join(sub.dtypes)
    rows = []
    for name, count in cfg.strategies.items():
        for dtype in strategy_dtypes(name, cfg):
            if count <= 0 or claims_dtype(sub.dtypes, sub.declines, dtype):
                continue
            rows.append(
                {
                    "submission_id": sub.submission_id,
                    "name": sub.name,
                    "problem_id": sub.problem.problem_id,
                    "oracle": "fuzz",
                    "strategy": name,
                    "purpose": "evaluation",
                    "case_index": 0,
                    "seed": case_seed(cfg.master_seed, sub.problem.problem_id, name, 0, "evaluation"),
                    "dtype": dtype,
                    "outcome": Outcome.SKIPPED,
                    "reason": f"dtype {dtype} not claimed by the submission (claims: {claims})",
                    "device": cfg.device,
                }
            )
    return rows


def replay_command(sub: Submission, case: dict, device: str) -> str:
    """The shell command that re-runs one case bit for bit."""
    parts = ["rescore", "replay", sub.problem.path, sub.path]
    if case.get("oracle") == "fixed":
        parts += ["--oracle", "fixed", "--profile", case.get("tolerance_policy", "kernelbench-v0.1")]
    else:
        parts += ["--strategy", case["strategy"], "--seed", str(case["seed"])]
        if case.get("trigger"):
            parts += ["--trigger", json.dumps(case["trigger"], sort_keys=True)]
    parts += ["--dtype", case["dtype"], "--device", device]
    return " ".join(shlex.quote(p) for p in parts)
