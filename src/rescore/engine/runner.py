"""Plans and runs the cases of submissions: the fixed-shape check, then seeded fuzz cases per strategy
and dtype, in a sandboxed worker, with progress on a terminal and quiet logs elsewhere.
"""

from __future__ import annotations

import functools
import sys
import time

from rescore.engine.failure_store import default_store
from rescore.engine.pacing import HARNESS_TIMEOUT, Pace, call_limit
from rescore.engine.plan import plan_cases, replay_command, unclaimed_rows
from rescore.engine.sandbox import Worker, WorkerDied, request_with_retry, run_with_retry
from rescore.inputs.strategies import STRATEGIES, get_strategy
from rescore.model.outcomes import DIED, Outcome
from rescore.model.records import Submission, claims_dtype
from rescore.model.run import RunConfig
from rescore.worker.protocol import EXPLAIN_KEY, Case, Explain, Fixed, Load, job_of

CAUSE_COLUMNS = ("cause", "cause_evidence")
# A submission's experiments may take EXPLAIN_FLOOR_S plus EXPLAIN_SHARE x its cases' own time (`Experiments`).
EXPLAIN_FLOOR_S = 30.0
EXPLAIN_SHARE = 1.0


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


def beyond_machine(row: dict, where: str) -> str:
    """Why a submission's later cases at the benchmark's own sizes are not run: the harness's own work
    there (the float64 reference of a KernelBench level-1 problem on a CPU) ran out of time in `where`,
    and would again in each, a per-case timeout apiece, never the kernel's."""
    return f"not run at the benchmark's own sizes, which are beyond this machine: in {where} {row.get('reason')}"


def at_benchmark_sizes(case: dict) -> bool:
    """Whether a planned case draws the benchmark's own sizes (its strategy's shapes are `fixed`)."""
    if case.get("trigger") or case["strategy"] not in STRATEGIES:
        return False
    return get_strategy(case["strategy"]).shapes == "fixed"


class Experiments:
    """A failed case's experiments (the cause they confirm: `worker/explain.py`), and a passing
    case's probe of later calls (`worker/stateful.py`: the verdict columns when it flags the case),
    asked for as a request of their own once the case has its verdict: a death, a timeout or the
    machine's limit in them costs the case nothing. They are spent within the submission's budget, and while they
    have taken no more than `floor_s` plus `share` x its cases' own time so far (an experiment at
    the benchmark's sizes costs seconds on a GPU, and a minute of float64 on a CPU, once per
    strategy). After one that does not answer, or past that allowance, the submission's later
    failures are not explained; their cause stays empty, as when no experiment confirms one."""

    def __init__(self, floor_s: float = EXPLAIN_FLOOR_S, share: float = EXPLAIN_SHARE) -> None:
        self.floor_s, self.share = floor_s, share
        self.spent = 0.0  # seconds of the experiments so far
        self.case_s = 0.0  # the cases' own time so far (their wall_ms)
        self.broken: str | None = None  # why the experiments stopped being asked for

    def explain(self, worker: Worker, row: dict, pace: Pace) -> dict:
        """`row` with the cause its experiments confirm, when it waits for them (EXPLAIN_KEY)."""
        wall = row.get("wall_ms")
        self.case_s += float(wall) / 1e3 if isinstance(wall, (int, float)) and wall == wall else 0.0
        if not row.pop(EXPLAIN_KEY, False):
            return row
        if self.spent > self.floor_s + self.share * self.case_s:
            self.broken = self.broken or f"the experiments took {self.spent:.0f} s, more than the cases allow"
        # a worker that restarted after the case has lost what the experiments need
        if self.broken or worker.proc is None or pace.stop_reason() is not None:
            return row
        start = time.monotonic()
        try:
            found = worker.request(Explain(), pace.timeout())
        except WorkerDied as died:
            self.broken = died.reason
            return row
        finally:
            self.spent += time.monotonic() - start
        if "outcome" in found:
            if found.get("cause"):  # a passing case's probe of later calls flagged it: its verdict columns
                return dict(row, **found)
            # the experiments' own code failed (out of memory beside other workers, a fault of the
            # harness): nothing is learned of the kernel, and the case keeps its verdict
            if found["outcome"] != Outcome.OOM:
                self.broken = str(found.get("reason") or "the experiments failed")
            return row
        return dict(row, **{k: found[k] for k in CAUSE_COLUMNS if found.get(k)})


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
    worker.call_limit = functools.partial(call_limit, cfg.call_floor_s, cfg.call_factor)
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
                cfg.settle_after, cfg.settle_timeout_s, waited=lambda: worker.device_waited_s)
    beyond = None  # why the benchmark's own sizes are beyond this machine, once its harness ran out there
    if fixed:
        timeout = pace.timeout()
        row, death = request_with_retry(worker, Fixed(cfg.fixed_profile, cfg.fixed_dtype), timeout)
        row = pace.record(row, death, timeout, settles=False)  # the fixed verdict: the fuzz cases need their own
        if death == HARNESS_TIMEOUT:
            beyond = beyond_machine(row, "the fixed check")
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
    experiments = Experiments()
    for case in remembered + cases:
        msg = Case(case["strategy"], case["seed"], case["dtype"], case.get("trigger"), defer_explain=cfg.explain)
        stop = pace.stop_reason()
        at_benchmark = at_benchmark_sizes(case)
        if stop is not None:
            row = {"outcome": Outcome.SKIPPED, "reason": stop}
        elif beyond and at_benchmark:
            row = {"outcome": Outcome.SKIPPED, "reason": beyond}
        else:
            timeout = pace.timeout()
            row, death = request_with_retry(worker, msg, timeout)
            row = experiments.explain(worker, pace.record(row, death, timeout), pace)
            if death == HARNESS_TIMEOUT and at_benchmark:
                beyond = beyond_machine(row, f"a {case['strategy']} case")
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
