"""Plans and runs the cases of submissions: the fixed-shape check, then seeded fuzz cases per strategy
and dtype, in a sandboxed worker, with progress on a terminal and quiet logs elsewhere.
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from dataclasses import dataclass, field

from rescore.engine import failure_store as regressions
from rescore.engine.pacing import SETTLE_AFTER, SETTLE_TIMEOUT_S, Pace
from rescore.engine.sandbox import Worker, request_with_retry, run_with_retry
from rescore.inputs.seeds import case_seed
from rescore.inputs.strategies import get_strategy
from rescore.model.records import Submission, claims_dtype
from rescore.worker.protocol import Case, Fixed, Load, job_of


@dataclass
class RunConfig:
    """How to run: the science (strategies, cases, seeds, dtypes) and the machine (device, budget)."""

    device: str = "cpu"
    master_seed: int = 0
    strategies: dict[str, int] = field(default_factory=lambda: {"default": 50, "boundary": 50})
    dtypes: tuple[str, ...] = ("float32", "float16", "bfloat16")
    fixed_profile: str = "kernelbench-v0.1"
    fixed_dtype: str = "float32"
    calibration: dict[str, int] = field(default_factory=dict)  # strategy -> cases on calibration seeds
    timeout_s: float = 120.0
    regressions: bool = False  # replay a submission's stored failures first (regressions.py): `rescore check`
    load_timeout_s: float = 600.0
    budget: int = 1 << 15  # elements of the largest input tensor
    submission_budget_s: float | None = None  # wall seconds for one submission's cases (pacing.py); None: no limit
    settle_after: int = SETTLE_AFTER  # this many same worker deaths in a row settle a submission; 0: never
    settle_timeout_s: float = SETTLE_TIMEOUT_S  # the per-case timeout after a case timed out
    dtypes_in_turn: bool = False  # a strategy's evaluation cases take the dtypes in turn, not each dtype


def resolve_device(device: str) -> str:
    """`auto` is CUDA when present, otherwise the CPU through the Triton interpreter."""
    if device != "auto":
        return device
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except Exception:  # pragma: no cover
        return "cpu"


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
                    "outcome": "skipped",
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


class Progress:
    """Cases done of total, the submission in hand, and time left (`rescore check`): on a terminal
    only, so that a log or a pipe gets nothing."""

    def __init__(self, total: int, label: str = "", stream=None):
        self.total, self.done, self.label = total, 0, label
        self.start = time.monotonic()
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty()

    def step(self, name: str, n: int = 1) -> None:
        self.done += n
        if not self.tty:
            return
        elapsed = time.monotonic() - self.start
        left = elapsed / self.done * (self.total - self.done) if self.done else 0.0
        self.stream.write(f"\r{self.label}{self.done}/{self.total} cases  {name[:40]:<40}  ~{left:5.0f} s left ")
        self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")


def run_submission(
    sub: Submission,
    cfg: RunConfig,
    worker: Worker,
    cases: list[dict] | None = None,
    progress: Progress | None = None,
    fixed: bool = True,
) -> list[dict]:
    """All rows of one submission: the fixed-shape check and its fuzz cases; when the cases are
    planned here, also a `skipped` row for each strategy and dtype outside the submission's claim."""
    unclaimed = unclaimed_rows(sub, cfg) if cases is None else []
    cases = plan_cases(sub, cfg) if cases is None else cases
    base = {"submission_id": sub.submission_id, "name": sub.name, "problem_id": sub.problem.problem_id}
    rows: list[dict] = []
    load = run_with_retry(worker, Load(job_of(sub)), cfg.load_timeout_s)
    worker.job = job_of(sub)
    if load.get("outcome") in ("crash", "timeout"):
        reason = f"loading the submission: {load.get('reason')}"
        for case in (
            [
                {
                    "oracle": "fixed",
                    "strategy": "fixed",
                    "dtype": cfg.fixed_dtype,
                    "seed": 42,
                    "case_index": 0,
                    "purpose": "evaluation",
                }
            ]
            if fixed
            else []
        ) + cases:
            rows.append(
                dict(
                    base,
                    oracle=case.get("oracle", "fuzz"),
                    outcome=load["outcome"],
                    reason=reason,
                    **{k: case[k] for k in ("strategy", "dtype", "seed", "case_index", "purpose")},
                )
            )
        if progress:
            progress.step(sub.name, len(cases))
        return rows + unclaimed
    remembered = []
    if cfg.regressions:
        remembered = [
            dict(c, purpose="regression")
            for c in regressions.load(sub.submission_id)
            if claims_dtype(sub.dtypes, sub.declines, c["dtype"])
        ]
    # The clock starts after the load (it has its own timeout): the fixed check always runs, so a
    # submission stopped by its budget or settled still has a verdict.
    pace = Pace(cfg.timeout_s, int(fixed) + len(remembered) + len(cases), cfg.submission_budget_s,
                cfg.settle_after, cfg.settle_timeout_s)
    if fixed:
        timeout = pace.timeout()
        row, death = request_with_retry(worker, Fixed(cfg.fixed_profile, cfg.fixed_dtype), timeout)
        row = pace.record(row, death, timeout)
        case = {"oracle": "fixed", "dtype": cfg.fixed_dtype, "tolerance_policy": cfg.fixed_profile}
        rows.append(
            dict(
                row,
                **base,
                oracle="fixed",
                strategy="fixed",
                case_index=0,
                seed=42,
                dtype=cfg.fixed_dtype,
                purpose="evaluation",
                tolerance_policy=cfg.fixed_profile,
                replay=replay_command(sub, case, cfg.device),
            )
        )
    for case in remembered + cases:
        msg = Case(case["strategy"], case["seed"], case["dtype"], case.get("trigger"))
        stop = pace.stop_reason()
        if stop is not None:
            row = {"outcome": "skipped", "reason": stop}
        else:
            timeout = pace.timeout()
            row, death = request_with_retry(worker, msg, timeout)
            row = pace.record(row, death, timeout)
        row = dict(
            row,
            **base,
            oracle="fuzz",
            strategy=case["strategy"],
            seed=case["seed"],
            case_index=case["case_index"],
            purpose=case["purpose"],
        )
        row.setdefault("dtype", case["dtype"])
        row["replay"] = replay_command(sub, dict(case, dtype=row["dtype"]), cfg.device)
        row.setdefault("device", cfg.device)
        rows.append(row)
        if progress and case["purpose"] != "regression":
            progress.step(sub.name)
    if cfg.regressions:
        regressions.save(sub.submission_id, rows)
    return rows + unclaimed


def fuzz_verdict(outcomes: list[str]) -> str:
    """pass | flagged | declined | skipped (no case ran), from the outcomes of a submission's fuzz
    cases, as the illusion table gives it."""
    from rescore.model.outcomes import FLAGGING

    if any(o in FLAGGING for o in outcomes):
        return "flagged"
    if any(o == "declined" for o in outcomes):
        return "declined"
    if all(o == "skipped" for o in outcomes):
        return "skipped"
    return "pass"
