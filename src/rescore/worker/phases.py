"""Where a case's time goes (`bench/case_phases.py`): the executor enters `with phases(name):` around
each phase of a case. The default does nothing; `PhaseTimer` adds up the seconds per phase.

A timer lives on the executor that uses it, never in module state: the harness restores module
state after every call into candidate code (`integrity.py`), and would undo a module-level timer.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

_NULL = contextlib.nullcontext()


class Phases:
    """No timing: one shared no-op context for every phase."""

    def __call__(self, name: str) -> contextlib.AbstractContextManager[None]:
        return _NULL


NO_PHASES = Phases()


class PhaseTimer(Phases):
    """Seconds spent in each phase, summed over every time it was entered (nested phases count in
    both: a `call` inside `rerun` is in each)."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.spent[name] = self.spent.get(name, 0.0) + time.perf_counter() - start
