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


NEEDS_GPU = "timing needs a CUDA GPU"  # the reason of a timing row no GPU could measure

STOPPED_PREFIXES = ("submission budget of ", "settled: ")  # a case its submission's pacing never ran


def stopped_early(reason: object) -> bool:
    """Whether a `skipped` case's reason is a budget or settling stop (the case was never run)."""
    return isinstance(reason, str) and reason.startswith(STOPPED_PREFIXES)


def settled_reason(rows: list[dict]) -> str | None:
    """The reason a submission's rows were settled with, or None when they were not."""
    return next((r["reason"] for r in rows if r.get("outcome") == Outcome.SKIPPED.value
                 and str(r.get("reason") or "").startswith(STOPPED_PREFIXES[1])), None)


def fixed_verdict(outcome: str) -> str:
    """pass | skipped | fail, from the outcome of a submission's fixed-shape check."""
    return outcome if outcome in ("pass", "skipped") else "fail"


def fuzz_verdict(outcomes: list[str]) -> str:
    """pass | flagged | declined | skipped (no case ran), from the outcomes of a submission's fuzz
    cases, as the illusion table gives it."""
    if any(o in FLAGGING for o in outcomes):
        return "flagged"
    if any(o == "declined" for o in outcomes):
        return "declined"
    if all(o == "skipped" for o in outcomes):
        return "skipped"
    return "pass"
