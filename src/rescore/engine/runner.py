"""Plans and runs the cases of submissions: the fixed-shape check, then seeded fuzz cases per strategy
and dtype, in a sandboxed worker, with progress on a terminal and quiet logs elsewhere.
"""

from __future__ import annotations

import sys
import time

from rescore.engine.failure_store import default_store
from rescore.engine.pacing import Pace
from rescore.engine.plan import plan_cases, replay_command, unclaimed_rows
from rescore.engine.sandbox import Worker, request_with_retry, run_with_retry
from rescore.model.outcomes import DIED, Outcome
from rescore.model.records import Submission, claims_dtype
from rescore.model.run import RunConfig
from rescore.worker.protocol import Case, Fixed, Load, job_of


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
    if load.get("outcome") in DIED:
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
            for c in default_store().fetch(sub.submission_id)
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
            row = {"outcome": Outcome.SKIPPED, "reason": stop}
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
        default_store().save(sub.submission_id, rows)
    return rows + unclaimed
