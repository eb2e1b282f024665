"""The executor as the case, fixed-check and timing functions see it (`WorkerContext`), so that none
of them imports the executor back; and which cases start with the decoy call (`DecoySchedule`)."""

from __future__ import annotations

from typing import Protocol

from rescore.oracle.reference import Reference
from rescore.worker.experiments import Explainer
from rescore.worker.guard import Guard
from rescore.worker.job import Loaded
from rescore.worker.phases import Phases
from rescore.worker.placement import TruthPlacement

DECOY_EVERY = 8  # under the interpreter, the decoy call runs on one fuzz case in this many
# (8: then every strategy's first 8 cases in a row hold exactly one decoy, and a cache-keeping
# kernel has the same chance under every strategy; at 32 the strategy study lost 3 to 7 of the
# result_caching variants for some strategies and none for others)


class DecoySchedule:
    """Which fuzz cases of the loaded job start with the decoy call (`cases_run`: those run so far)."""

    def __init__(self, device: str):
        self.device = device
        self.cases_run = 0

    def reset(self) -> None:
        """A new job: its first case has the decoy."""
        self.cases_run = 0

    def due(self) -> bool:
        """Whether this case starts with the decoy call. On a GPU always; under the interpreter (where
        every candidate call costs milliseconds per program) on the first case after a load and every
        DECOY_EVERY-th after it: a cache keyed by pointer, id or shape is fooled on the first judged
        call it sees, and one flagged case flags the submission."""
        due = self.device == "cuda" or self.cases_run % DECOY_EVERY == 0
        self.cases_run += 1
        return due


class ExplainLater:
    """A failed case's experiments, or a passing case's probe of later calls, kept for a request of
    their own (`Case.defer_explain`, `Executor.run_explain`): whether this request defers them, and
    what they need."""

    def __init__(self) -> None:
        self.defer = False
        # ("explain", spec, row, override, run_case, decoy, the reference's time), or
        # ("probe", the case's trace, the reference's time)
        self.pending: tuple | None = None


class WorkerContext(Protocol):
    """The executor as the case, fixed-check and timing functions see it (`worker/executor.py`)."""

    device: str
    budget: int
    versions: str
    loaded: Loaded
    guard: Guard
    placement: TruthPlacement
    reference: Reference
    decoys: DecoySchedule
    phases: Phases
    explainer: Explainer
    later: ExplainLater
