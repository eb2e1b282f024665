"""Proof that every seeded bug's trigger is real: the variant fails on its trigger input, and its
control passes on the same input. Runs on the CPU (interpreter) or a GPU, several workers at once."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from rescore.engine.sandbox import Worker, run_with_retry
from rescore.inputs.seeds import case_seed
from rescore.model.outcomes import DIED, FLAGGING, Outcome
from rescore.model.records import Submission
from rescore.model.run import RunConfig
from rescore.worker.protocol import Case, Load, job_of


@dataclass
class TriggerResult:
    variant: str
    control: str
    bug_class: str
    variant_outcome: str
    control_outcome: str
    reason: str
    diagnosis: str = ""

    @property
    def real(self) -> bool:
        return self.variant_outcome in FLAGGING and self.control_outcome == Outcome.PASS

    @property
    def skipped(self) -> bool:
        return Outcome.SKIPPED in (self.variant_outcome, self.control_outcome)


def run_trigger(worker: Worker, sub: Submission, trigger: dict, timeout: float) -> dict:
    job = job_of(sub)
    loaded = run_with_retry(worker, Load(job), timeout)
    worker.job = job
    if loaded.get("outcome") in DIED:
        return loaded
    seed = case_seed(0, sub.problem.problem_id, "trigger", 0)
    return run_with_retry(worker, Case("trigger", seed, trigger.get("dtype", "float32"), trigger), timeout)


def check_triggers(
    subs: list[Submission], device: str = "cpu", workers: int = 2, timeout: float = 300.0,
    on_result: Callable[[TriggerResult], None] | None = None,
) -> list[TriggerResult]:
    """Run every buggy variant and its control on the variant's trigger. `on_result` sees each
    result as soon as it exists (from a worker thread), so a run cut short keeps what it found."""
    by_name = {s.name: s for s in subs}
    variants = [s for s in subs if s.label == "buggy" and s.trigger and s.control in by_name]
    budget = RunConfig(device=device).budget

    def work(chunk: list[Submission]) -> list[TriggerResult]:
        w = Worker(device, budget)
        out = []
        try:
            for v in chunk:
                vr = run_trigger(w, v, v.trigger, timeout)
                cr = run_trigger(w, by_name[v.control], v.trigger, timeout)
                out.append(
                    TriggerResult(
                        v.name,
                        v.control,
                        v.bug_class or "",
                        vr.get("outcome", "?"),
                        cr.get("outcome", "?"),
                        (vr.get("reason") or cr.get("reason") or "")[:300],
                        vr.get("diagnosis") or "",
                    )
                )
                if on_result is not None:
                    on_result(out[-1])
        finally:
            w.stop()
        return out

    chunks = [variants[i::workers] for i in range(workers)]
    with ThreadPoolExecutor(workers) as pool:
        results = [r for part in pool.map(work, chunks) for r in part]
    return sorted(results, key=lambda r: r.variant)
