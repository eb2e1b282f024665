"""The messages between the parent (`engine/sandbox.py`) and a worker process: typed on both sides,
plain tuples of builtins on the pipe (no class crosses it by name, so a worker never unpickles
anything of the parent's but builtins, and the other way round).

The only worker module the parent imports (the `worker` contract of `.importlinter`).

    Load(job)                   -> ("load", job)
    Fixed(profile, dtype)       -> ("fixed", profile, dtype)
    Case(strategy, seed, ...)   -> ("case", {"strategy", "seed", "dtype", "override", "defer_explain"})
    Explain()                   -> ("explain",)
    Time(dtype, warmup, ...)    -> ("time", {"dtype", "warmup", "repeats", "budget_s", "host_clock", "flush_bytes"})
    Stop()                      -> ("stop",)

A job whose submission's language is NULL_CANDIDATES (`null_candidates`) holds no candidate: its
fixed check judges the problem's null candidates, each one's row under NULLS_KEY of its answer.

A request travels as (token, wire); its answer as (token, status, row), `status` a `Status` value
and `row` a plain dict holding the worker's resident memory under RSS_KEY and where the request's time
went under PHASES_KEY (and, on a shared device, its memory under MEMORY_KEY; a request to run again
alone under ALONE_KEY); before it, any number of (token, "note", {"by", "reference_s"}): whose turn it
is (`turns.py`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import Enum

from rescore.inputs.strategies import STRATEGIES
from rescore.model.records import Problem, Submission, cuda_only


class Kind(str, Enum):
    """The first element of a wire tuple: which request it is."""

    LOAD = "load"
    FIXED = "fixed"
    CASE = "case"
    EXPLAIN = "explain"
    TIME = "time"
    STOP = "stop"


@dataclass(frozen=True)
class Load:
    """Load a problem and a candidate (`job_of`); every later request runs on them."""

    job: dict


@dataclass(frozen=True)
class Fixed:
    """The benchmark's own fixed-shape check, under one tolerance profile."""

    profile: str
    dtype: str = "float32"


@dataclass(frozen=True)
class Case:
    """One fuzz case: a strategy's draw at `seed`, or exactly the inputs an `override` (a trigger) names."""

    strategy: str
    seed: int
    dtype: str
    override: dict | None = None
    # True: a failed case answers as judged, marked EXPLAIN_KEY, and its experiments wait for `Explain`
    defer_explain: bool = False


@dataclass(frozen=True)
class Explain:
    """The experiments of the last case answered with EXPLAIN_KEY (`Case.defer_explain`): its cause."""


@dataclass(frozen=True)
class Time:
    """A row of the timing table (`worker/timing.py`)."""

    dtype: str
    warmup: int
    repeats: int
    budget_s: float
    host_clock: bool = False
    flush_bytes: int | None = None


@dataclass(frozen=True)
class Stop:
    """End the worker."""


Request = Load | Fixed | Case | Explain | Time | Stop

BENCHMARK, FUZZ = "benchmark", "fuzz"  # the sizes a request runs at (`scale_of`)


def scale_of(msg: Request) -> str:
    """The sizes a request runs at: BENCHMARK for a load, the fixed check, a timing row, a fuzz case of
    a strategy at the benchmark's sizes or a trigger's named inputs (their sizes unknown here), else
    FUZZ; "" for an explanation or a stop, which run at their case's (the parent reserves device memory
    per scale, `engine/sharing.py`; the worker hands its cache back when the scale drops, `footprint.at_scale`)."""
    if isinstance(msg, (Load, Fixed, Time)):
        return BENCHMARK
    if isinstance(msg, Case):
        strategy = STRATEGIES.get(msg.strategy)
        return BENCHMARK if msg.override or strategy is None or strategy.shapes == "fixed" else FUZZ
    return ""


class Status(str, Enum):
    """How a worker answers: `restart` when its process can no longer be trusted after this request."""

    OK = "ok"
    RESTART = "restart"
    NOTE = "note"  # not an answer: whose turn it is now (`turns.py`), sent before the answer


# Whose turn a request's time is (`worker/turns.py` sends it, `engine/turn_clock.py` reads it).
HARNESS, CANDIDATE, COMPILER = "harness", "candidate", "compiler"
# Set by the parent where a CPU worker's memory estimates are wanted too (the tests' stand-ins).
MEASURE_ENV = "RESCORE_MEASURE_MEMORY"
# Set by the parent for a worker under compute-sanitizer's initcheck: fresh memory is left as the
# allocator gives it (`loop.poison_fresh_memory`), so that a read of memory nothing wrote is the tool's
# to see; filled, every allocation is written once before any kernel reads it.
UNFILLED_MEMORY_ENV = "RESCORE_UNFILLED_MEMORY"

RSS_KEY = "_rss"  # the worker's resident memory in bytes, in every answer (taken out by the parent)
# What the worker's allocator holds and what its submission is expected to need, on a device whose
# memory is shared (`engine/sharing.py`): {"peak", "total", "free", "estimate", "fuzz_estimate",
# "reference_peak"} (bytes; "free": the device's, after the request, as the driver counts it for every
# process).
MEMORY_KEY = "_memory"
# In an answer whose request should run again with the device to itself (out of memory, or the
# reference failing at its own sizes): {"by": who ran out, "bytes": asked or None, "reference_ran":
# the reference ran at the same sizes first}. Taken out by the parent (`sharing.alone_result`).
ALONE_KEY = "_alone"
PHASES_KEY = "_phases"  # seconds per phase of the request (`phases.PhaseTimer.take`), taken out likewise
EXPLAIN_KEY = "_explain"  # in a case's row: its experiments wait for an `Explain` request (taken out by the runner)
# The language of a job's submission that is a problem's null candidates (`null_candidates`), and where
# its fixed check's row holds each null's {"outcome", "reason", "max_abs_err"} (`worker/fixed.py`, `run_nulls`).
NULL_CANDIDATES = "nulls"
NULLS_KEY = "nulls"


class UnknownMessage(ValueError):
    """A wire tuple whose first element names no request."""


def encode(msg: Request) -> tuple:
    """The wire tuple of a request (its dicts with Enum members replaced by their values, as `plain`)."""
    if isinstance(msg, Load):
        return (Kind.LOAD.value, _plain(msg.job))
    if isinstance(msg, Fixed):
        return (Kind.FIXED.value, msg.profile, msg.dtype)
    if isinstance(msg, Case):
        fields = _plain(asdict(msg))
        if not msg.defer_explain:  # the tuple a case always was
            del fields["defer_explain"]
        return (Kind.CASE.value, fields)
    if isinstance(msg, Explain):
        return (Kind.EXPLAIN.value,)
    if isinstance(msg, Time):
        return (Kind.TIME.value, asdict(msg))
    if isinstance(msg, Stop):
        return (Kind.STOP.value,)
    raise TypeError(f"not a worker request: {msg!r}")


def decode(wire: tuple) -> Request:
    """The request a wire tuple holds; UnknownMessage for an unknown kind."""
    kind = wire[0]
    if kind == Kind.LOAD:
        return Load(wire[1])
    if kind == Kind.FIXED:
        return Fixed(*wire[1:])
    if kind == Kind.CASE:
        return Case(**wire[1])
    if kind == Kind.EXPLAIN:
        return Explain()
    if kind == Kind.TIME:
        return Time(**wire[1])
    if kind == Kind.STOP:
        return Stop()
    raise UnknownMessage(f"unknown message {kind!r}")


def job_of(sub: Submission) -> dict:
    """What a worker needs to load a submission: sources, paths and the problem's schema."""
    p = sub.problem
    return {
        "problem": {
            "problem_id": p.problem_id,
            "source": p.source,
            "path": p.path,
            "schema": p.schema,
            "tolerance": p.tolerance,
        },
        "submission": {
            "name": sub.name,
            "source": sub.source,
            "path": sub.path,
            "language": sub.language,
            "cuda_only": cuda_only(sub.source),
        },
    }


def null_candidates(problem: Problem) -> Submission:
    """A problem's null candidates (`model/nulls.py`) as one submission with no source: loaded, its fixed
    check runs the reference once per trial and judges every null on that output."""
    return Submission(name=f"null:{problem.problem_id}", problem=problem, source="", path="", dump="null",
                      language=NULL_CANDIDATES, dtypes=("float32",))


def plain(row: dict) -> dict:
    """`row` with every Enum member replaced by its value, in nested dicts and lists too, so that only
    builtins cross the pipe (a str Enum such as `Outcome` pickles by class reference, not by value)."""
    return {k: _plain(v) for k, v in row.items()}


def _plain(v: object) -> object:
    if isinstance(v, Enum):
        return v.value
    if isinstance(v, dict):
        return {_plain(k): _plain(x) for k, x in v.items()}
    if type(v) in (list, tuple):
        return type(v)(_plain(x) for x in v)
    return v
