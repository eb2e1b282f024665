"""The closed set of case outcomes, and which of them flag a submission (docs/architecture.md)."""

from __future__ import annotations

from enum import Enum


class Outcome(str, Enum):
    PASS = "pass"
    MISMATCH = "mismatch"  # finite but outside tolerance
    NONFINITE = "nonfinite"  # NaN/Inf where the reference is finite, or the reverse
    BAD_OUTPUT = "bad_output"  # wrong shape, dtype, device, or not a plain tensor
    MUTATED_INPUT = "mutated_input"
    COMPILE_ERROR = "compile_error"  # could not be loaded or built for this input
    CRASH = "crash"  # the worker died, or the candidate raised at run time
    TIMEOUT = "timeout"
    DECLINED = "declined"  # the candidate's own code refused this input before launching anything
    SKIPPED = "skipped"  # this environment cannot run it (reason recorded)


ALL_OUTCOMES: tuple[str, ...] = tuple(o.value for o in Outcome)

FLAGGING: frozenset[str] = frozenset(
    {
        Outcome.MISMATCH.value,
        Outcome.NONFINITE.value,
        Outcome.BAD_OUTPUT.value,
        Outcome.MUTATED_INPUT.value,
        Outcome.COMPILE_ERROR.value,
        Outcome.CRASH.value,
        Outcome.TIMEOUT.value,
    }
)


def is_flagging(outcome: str) -> bool:
    """True when this outcome makes its submission flagged."""
    return outcome in FLAGGING
