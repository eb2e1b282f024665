"""Where a request's time goes: the executor enters `with phases(name):` around each phase of a case.
The default does nothing; `PhaseTimer` adds up the seconds per phase (inclusive, for
`bench/case_phases.py`) and, for the phase table (`results/tables/phases.parquet`), each second once
under the table phase it belongs to (`CATEGORY`): the worker sends those with every answer.

A timer lives on the executor that uses it, never in module state: the harness restores module
state after every call into candidate code (`integrity.py`), and would undo a module-level timer.
"""

from __future__ import annotations

import contextlib
import time

_NULL = contextlib.nullcontext()

# The table phase of each phase a worker times. A request's whole time is in one of `load`, `fixed`,
# `time` (the timing stage) or `case`; inside a case, time belongs to its innermost phase, except that everything
# inside an experiment (`explain`, and within it `race`, `sizes`; `second_call`: candidate calls,
# references, comparisons) is that experiment's, the innermost one's. Time of a case in no named phase
# is the worker's own (`worker_other`).
CATEGORY = {
    "load": "load",
    "fixed": "fixed",
    "time": "timing",
    "case": "worker_other",
    "explain": "experiments",
    "race": "race_repeats",  # a failing case run again, to tell a race (`explain._race`)
    "sizes": "size_experiments",  # the failing case at other sizes and dtypes (`specialised.confirm`)
    "second_call": "second_call",  # a passing case's model called again on one shape (`stateful.probe`)
    "reference_build": "reference_build",
    "reference": "reference",
    "call": "candidate",
    "rerun": "candidate",
    "police": "integrity",
    "judge": "compare",
    "judge_rerun": "compare",
    "output_findings": "compare",
    "kernel_findings": "compare",
    "draw": "inputs",
    "make_inputs": "inputs",
    "inputs_hash": "inputs",
    "scrub": "inputs",
    "lowp": "inputs",
    "candidate_inputs": "inputs",
    "decoy_values": "inputs",
    "digest": "inputs",
    "snapshot": "inputs",
}
# Phases that own all time spent inside them, whatever is nested.
ENCLOSING = frozenset({"load", "fixed", "time", "explain", "race", "sizes", "second_call"})
OTHER = "worker_other"


class Phases:
    """No timing: one shared no-op context for every phase."""

    def __call__(self, name: str) -> contextlib.AbstractContextManager[None]:
        return _NULL


NO_PHASES = Phases()


class PhaseTimer(Phases):
    """Seconds spent in each phase: `spent`, summed over every time it was entered (nested phases
    count in both: a `call` inside `rerun` is in each), and `by_category`, each second counted once
    under its table phase (`CATEGORY`, `ENCLOSING`)."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = {}
        self.by_category: dict[str, float] = {}
        self._stack: list[_Entered] = []

    def __call__(self, name: str) -> _Entered:
        return _Entered(self, name)

    def take(self) -> dict[str, float]:
        """The seconds per table phase since the last take (a request's), and start again."""
        taken, self.by_category = self.by_category, {}
        self.spent.clear()
        return taken

    def _category(self, name: str) -> str:
        if name in ENCLOSING:
            return CATEGORY[name]
        for entered in reversed(self._stack):  # innermost first
            if entered.name in ENCLOSING:
                return CATEGORY[entered.name]
        return CATEGORY.get(name, OTHER)


class _Entered:
    """One phase entered: its time goes to `spent` (inclusive) and, less its nested phases', to its
    table phase."""

    __slots__ = ("timer", "name", "start", "nested")

    def __init__(self, timer: PhaseTimer, name: str):
        self.timer, self.name, self.nested = timer, name, 0.0

    def __enter__(self) -> None:
        self.start = time.perf_counter()
        self.timer._stack.append(self)

    def __exit__(self, *exc: object) -> None:
        timer = self.timer
        total = time.perf_counter() - self.start
        category = timer._category(self.name)
        timer._stack.pop()
        if timer._stack:
            timer._stack[-1].nested += total
        timer.spent[self.name] = timer.spent.get(self.name, 0.0) + total
        timer.by_category[category] = timer.by_category.get(category, 0.0) + total - self.nested
