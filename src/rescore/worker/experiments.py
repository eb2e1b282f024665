"""Second experiments that confirm why a case failed (issue 21's diagnoses).

A failing case says *that* a kernel is wrong; the value pattern (`oracle/diagnose.py`) hints at
where. A cause is recorded only when an experiment isolates it: the same kernel, run once more with
one thing changed, gives the right answer (or, for output aliasing, a call is seen overwriting the
output an earlier call returned). Each experiment here is a small, self-contained procedure; the
executor decides when to run which (`Executor._explain`) and records the first that confirms.

The context managers change torch's Python surface only for the length of one call into candidate
code, and undo it before the harness checks that call (`integrity.Harness`), so the harness never
sees them.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

from rescore.inputs.strategies import CaseSpec
from rescore.model.outcomes import Outcome, ValueEnum

RACE_REPEATS = 3  # a failing case's repeats on a GPU (`Explainer.race_repeats`)
REPEATED_PASSES = 2  # passes an experiment that confirms by passing needs, one after another


class Cause(ValueEnum):
    """A failure's cause, confirmed by an experiment (or by the check that caught it)."""

    UNSYNCHRONIZED_STREAM = "unsynchronized_stream"
    RACE = "race"
    PRECISION_DOWNGRADE = "precision_downgrade"
    STALE_GRAPH = "stale_graph"
    RESULT_REUSE = "result_reuse"
    OUTPUT_ALIASING = "output_aliasing"
    INPUT_MUTATION = "input_mutation"
    OUT_OF_BOUNDS = "out_of_bounds"
    SHAPE_SPECIALISED = "shape_specialised"
    DTYPE_SPECIALISED = "dtype_specialised"


# The harness's names (integrity.torch_state) of the global flags that change a result's numerics
# or the algorithms that compute it: a submission's own values of these stay in force for its calls.
NUMERICS_FLAGS = ("float32_matmul_precision", "cuda_matmul_tf32", "cuda_matmul_reduced", "cudnn")
_CUDNN_TF32 = 1  # the place of allow_tf32 in the `cudnn` state (enabled, allow_tf32, deterministic, benchmark)


def precision_flags(published: dict, harness: dict) -> list[str]:
    """Of the numerics flags a submission set (`published`, against the harness's `harness`), those
    that lower a float32 result's precision: TF32 in matmuls or convolutions, reduced-precision
    reductions, a float32 matmul precision below the harness's. cuDNN's autotuner, determinism and
    enabling choose algorithms, not precision, and count for nothing here."""
    found = []
    for name, value in published.items():
        before = harness.get(name)
        if name == "cudnn":
            if value[_CUDNN_TF32] and not before[_CUDNN_TF32]:
                found.append("cudnn.allow_tf32=True")
        elif name == "cuda_matmul_reduced":
            kinds = ("fp16", "bf16")
            found += [f"cuda_matmul_{k}_reduced=True" for k, now, was in zip(kinds, value, before) if now and not was]
        elif name == "cuda_matmul_tf32":
            if value and not before:
                found.append("cuda_matmul_tf32=True")
        elif name == "float32_matmul_precision" and value != before:
            found.append(f"float32_matmul_precision={value}")
    return found

# The torch._C setters behind torch.backends.cuda.matmul.* and torch.set_float32_matmul_precision:
# torch looks them up when a flag is set, so replacing them for one call pins those flags.
_C_SETTERS = (
    "_set_cublas_allow_tf32",
    "_set_float32_matmul_precision",
    "_set_cublas_allow_fp16_reduced_precision_reduction",
    "_set_cublas_allow_bf16_reduced_precision_reduction",
    "_set_cudnn_enabled",
    "_set_cudnn_allow_tf32",
    "_set_cudnn_benchmark",
    "_set_cudnn_deterministic",
)
_CUDNN_FLAGS = ("enabled", "allow_tf32", "deterministic", "benchmark")


@dataclass
class Confirmed:
    """A confirmed cause and what the experiment saw, for the row's `cause` and `cause_evidence`."""

    cause: Cause
    evidence: str

    def columns(self) -> dict:
        return {"cause": self.cause.value, "cause_evidence": self.evidence[:500]}


@dataclass
class CaseTrace:
    """What a judged case ran, kept until the next case for the experiments that explain it."""

    spec: CaseSpec
    model: object
    out: object
    lowp_inputs: list
    decoy: list | None
    init: list
    tdtype: torch.dtype
    wseed: int
    truths: list
    lowps: list | None
    structural: list | None
    terms: list | None
    reduction_len: int


@dataclass
class Explainer:
    """The experiments' state for the loaded job: the last case's trace, the answers already found
    (an experiment about the kernel is asked once per key), and whether one is running (an
    experiment's own cases run none)."""

    trace: CaseTrace | None = None
    answers: dict[tuple, Confirmed | None] = field(default_factory=dict)
    running: bool = False
    enabled: bool = True  # off (`fuzz.explain: false`): rows as they were before the experiments existed
    # How many times a failing case is run again before any other experiment, to tell a race. On a
    # GPU RACE_REPEATS; under the Triton interpreter 0: it runs program instances one after another,
    # so a repeat there shows only what a deterministic rerun shows (nothing a race could change).
    race_repeats: int = 0

    def reset(self) -> None:
        """A new job: nothing is known about it."""
        self.trace, self.answers, self.running = None, {}, False


class _FrozenNamespace:
    """Reads through to a torch flags module; writes are dropped (and counted)."""

    def __init__(self, real: object, writes: list[str]) -> None:
        object.__setattr__(self, "_real", real)
        object.__setattr__(self, "_writes", writes)

    def __getattr__(self, name: str):
        return getattr(object.__getattribute__(self, "_real"), name)

    def __setattr__(self, name: str, value) -> None:
        object.__getattribute__(self, "_writes").append(f"cudnn.{name}")


@dataclass
class Pin:
    """What `pinned_numerics` saw: the flag writes it dropped."""

    dropped: list[str] = field(default_factory=list)


@contextlib.contextmanager
def pinned_numerics() -> Iterator[Pin]:
    """The global numerics flags (TF32, reduced-precision reductions, float32 matmul precision,
    cuDNN's modes) held at their current values for the length of the block: the candidate's writes
    to them are dropped, not applied."""
    pin = Pin()
    saved = {}

    def dropped(name: str):
        def setter(*_args, **_kwargs) -> None:
            pin.dropped.append(name.removeprefix("_set_"))
        return setter

    for name in _C_SETTERS:
        if hasattr(torch._C, name):
            saved[name] = getattr(torch._C, name)
            setattr(torch._C, name, dropped(name))
    cudnn = torch.backends.cudnn
    frozen = _FrozenNamespace(cudnn, pin.dropped)
    torch.backends.cudnn = frozen
    sys.modules["torch.backends.cudnn"] = frozen  # `import torch.backends.cudnn as c` reads this
    try:
        yield pin
    finally:
        torch.backends.cudnn = cudnn
        sys.modules["torch.backends.cudnn"] = cudnn
        for name, fn in saved.items():
            setattr(torch._C, name, fn)


def numerics_state() -> dict:
    """The flags `pinned_numerics` holds, as values (to check that the pin held)."""
    state = {
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "cuda_matmul_tf32": torch.backends.cuda.matmul.allow_tf32,
    }
    for flag in ("allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction"):
        state[flag] = getattr(torch.backends.cuda.matmul, flag, None)
    for flag in _CUDNN_FLAGS:
        state[f"cudnn.{flag}"] = getattr(torch.backends.cudnn, flag)
    return state


@dataclass
class Streams:
    """What `serialised_streams` saw: how many times the candidate asked for another stream."""

    switches: int = 0


@contextlib.contextmanager
def serialised_streams() -> Iterator[Streams]:
    """Every stream switch the candidate asks for (`torch.cuda.stream(s)`, `torch.cuda.set_stream`,
    `with s:`) is dropped for the length of the block: its work runs in order on the caller's
    stream, as if it had synchronised."""
    seen = Streams()
    patched: list[tuple[object, str, object]] = []

    def swap(owner: object, name: str, value: object) -> None:
        if hasattr(owner, name):
            patched.append((owner, name, getattr(owner, name)))
            setattr(owner, name, value)

    class _Same(contextlib.AbstractContextManager):
        def __init__(self, stream=None) -> None:
            if stream is not None:
                seen.switches += 1

        def __exit__(self, *exc) -> None:
            return None

    def set_stream(stream) -> None:
        seen.switches += 1

    def enter(stream):
        seen.switches += 1
        return stream

    swap(torch.cuda, "stream", _Same)
    swap(torch.cuda, "StreamContext", _Same)
    swap(torch.cuda, "set_stream", set_stream)
    swap(torch.cuda.Stream, "__enter__", enter)
    swap(torch.cuda.Stream, "__exit__", lambda stream, *exc: None)
    try:
        yield seen
    finally:
        for owner, name, value in reversed(patched):
            setattr(owner, name, value)


@dataclass
class Replays:
    """How many CUDA graph replays the candidate ran inside `counted_graph_replays`."""

    count: int = 0


@contextlib.contextmanager
def counted_graph_replays() -> Iterator[Replays]:
    """Counts `torch.cuda.CUDAGraph.replay` calls (a captured graph run again) inside the block."""
    seen = Replays()
    graph = getattr(torch.cuda, "CUDAGraph", None)
    replay = getattr(graph, "replay", None)
    if replay is None:
        yield seen
        return

    def counted(self, *args, **kwargs):
        seen.count += 1
        return replay(self, *args, **kwargs)

    graph.replay = counted
    try:
        yield seen
    finally:
        graph.replay = replay


def summary(verdict: dict) -> str:
    """A verdict in a few words, for evidence ('pass' or 'mismatch, max abs err 0.031')."""
    outcome = verdict.get("outcome", "")
    err = verdict.get("max_abs_err")
    if outcome == Outcome.PASS or err is None:
        return str(outcome)
    return f"{outcome}, max abs err {err:.3g}"
