"""The job a worker holds: its problem and candidate modules, the schema it fuzzes, and why it cannot
run when it cannot."""

from __future__ import annotations

import types
from dataclasses import dataclass, field

from rescore.model.schema import OpSchema
from rescore.worker.exceptions import Verdict
from rescore.worker.protocol import NULL_CANDIDATES


@dataclass
class Loaded:
    """The job in hand: its problem and candidate modules, the schema it fuzzes, and why it cannot
    run when it cannot (a load error becomes the outcome of every case)."""

    job: dict = field(default_factory=dict)
    problem: types.ModuleType | None = None
    candidate: types.ModuleType | None = None
    schema: OpSchema | None = None
    load_error: Verdict | None = None

    def start(self, job: dict) -> None:
        """A new job: nothing of the previous one is held (its modules can be collected)."""
        self.job, self.problem, self.candidate, self.schema, self.load_error = job, None, None, None, None

    @property
    def candidate_file(self) -> str | None:
        return getattr(self.candidate, "__file__", None)

    @property
    def nulls(self) -> bool:
        """The job holds no candidate but the problem's null candidates (`protocol.null_candidates`)."""
        return self.job.get("submission", {}).get("language") == NULL_CANDIDATES
