"""The closed set of case outcomes, the verdicts drawn from them, and which of them flag a submission
(docs/architecture.md).

Every outcome is written as a member of these enums, never as a bare string (tests/test_outcomes.py
walks the package for one). They are `str` subclasses whose `str()` and `format()` give the value,
so a member reads, compares, hashes, formats and is stored exactly as its string: a table cell is
"pass", never "Outcome.PASS". Only builtins cross the worker's pipe (`worker.protocol.plain`)."""

from __future__ import annotations

from enum import Enum


class ValueEnum(str, Enum):
    """A str enum that prints, formats and serialises as its value, also inside a printed list or dict
    (a log line of counts, a reason naming a set of outcomes): `repr` is the value's too."""

    __str__ = str.__str__

    def __format__(self, spec: str) -> str:
        return str.__format__(self.value, spec)

    def __repr__(self) -> str:
        return repr(self.value)


class Outcome(ValueEnum):
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
    OOM = "oom"  # a worker status, never recorded: the case runs again with the device to itself, then SKIPPED


class FixedVerdict(ValueEnum):
    """A submission's verdict under the benchmark's own fixed-shape check."""

    PASS = "pass"
    FAIL = "fail"
    SKIPPED = "skipped"


class FuzzVerdict(ValueEnum):
    """A submission's verdict from its fuzz cases, as the illusion table gives it."""

    PASS = "pass"
    FLAGGED = "flagged"
    DECLINED = "declined"
    SKIPPED = "skipped"  # no case ran


class RunStatus(ValueEnum):
    """The success of a timing row or a static job; their failures are Outcomes."""

    OK = "ok"


class SanitizerStatus(ValueEnum):
    """How one compute-sanitizer run of one case under one tool ended (`status` of
    results/tables/sanitizer.parquet, engine/sanitizer.py)."""

    FOUND = "found"  # the tool reported an error: one row per diagnosis
    CLEAN = "clean"  # its summary counts none, and the case ran the kernel's call to its end under it
    TIMEOUT = "timeout"  # the case ran past the run's own limit (sanitizer.timeout_s)
    INCOMPLETE = "incomplete"  # it checked less than the case: cut by the budget, no summary, or no kernel ran
    NOT_RUN = "not_run"  # never started, with the reason


RECORDED: tuple[Outcome, ...] = tuple(o for o in Outcome if o is not Outcome.OOM)

ALL_OUTCOMES: tuple[str, ...] = tuple(o.value for o in RECORDED)

FLAGGING: frozenset[Outcome] = frozenset(
    {
        Outcome.MISMATCH,
        Outcome.NONFINITE,
        Outcome.BAD_OUTPUT,
        Outcome.MUTATED_INPUT,
        Outcome.COMPILE_ERROR,
        Outcome.CRASH,
        Outcome.TIMEOUT,
    }
)

# The outcomes a tolerance can change.
TOLERANCE_JUDGED: tuple[Outcome, ...] = (Outcome.PASS, Outcome.MISMATCH, Outcome.NONFINITE)

DIED: tuple[Outcome, ...] = (Outcome.CRASH, Outcome.TIMEOUT)  # a load whose worker did not survive it


NEEDS_GPU = "timing needs a CUDA GPU"  # the reason of a timing row no GPU could measure

STOPPED_PREFIXES = ("submission budget of ", "settled: ")  # a case its submission's pacing never ran
REFUSED_PREFIX = "refused by the sandbox: "  # a `skipped` case the candidate's refused call stopped (findings.py)
HARNESS_FAULT = "harness fault"  # how a `skipped` case's reason begins when rescore's own code raised
OLD_HARNESS_CRASH = "harness: "  # how older runs recorded the same, as a `crash`


def stopped_early(reason: object) -> bool:
    """Whether a `skipped` case's reason is a budget or settling stop (the case was never run)."""
    return isinstance(reason, str) and reason.startswith(STOPPED_PREFIXES)


def refused(reason: object) -> bool:
    """Whether a `skipped` case's reason is the sandbox's refusal of a call (a write outside, a socket,
    a process): the case was not judged; the refusal is a finding, reported apart."""
    return isinstance(reason, str) and reason.startswith(REFUSED_PREFIX)


def harness_fault(outcome: object, reason: object) -> bool:
    """Whether a case ended on rescore's own fault, not the kernel's: a reason beginning HARNESS_FAULT,
    or an older run's `crash` beginning OLD_HARNESS_CRASH (tools reading such a run count those too)."""
    if not isinstance(reason, str):
        return False
    return reason.startswith(HARNESS_FAULT) or (outcome == Outcome.CRASH and reason.startswith(OLD_HARNESS_CRASH))


def settled_reason(rows: list[dict]) -> str | None:
    """The reason a submission's rows were settled with, or None when they were not."""
    return next((r["reason"] for r in rows if r.get("outcome") == Outcome.SKIPPED
                 and str(r.get("reason") or "").startswith(STOPPED_PREFIXES[1])), None)


def fixed_verdict(outcome: str) -> FixedVerdict:
    """pass | skipped | fail, from the outcome of a submission's fixed-shape check."""
    if outcome == Outcome.PASS:
        return FixedVerdict.PASS
    if outcome == Outcome.SKIPPED:
        return FixedVerdict.SKIPPED
    return FixedVerdict.FAIL


def fuzz_verdict(outcomes: list[str]) -> FuzzVerdict:
    """pass | flagged | declined | skipped (no case ran), from the outcomes of a submission's fuzz
    cases, as the illusion table gives it."""
    if any(o in FLAGGING for o in outcomes):
        return FuzzVerdict.FLAGGED
    if any(o == Outcome.DECLINED for o in outcomes):
        return FuzzVerdict.DECLINED
    if all(o == Outcome.SKIPPED for o in outcomes):
        return FuzzVerdict.SKIPPED
    return FuzzVerdict.PASS
