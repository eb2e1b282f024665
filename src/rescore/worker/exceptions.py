"""What an exception raised by candidate code means: its outcome (`crash`, `declined`, `compile_error`,
`oom`, `skipped` for a call the sandbox refused), where it was raised, and whether the worker's CUDA
context survived it (docs/architecture.md, "Outcomes")."""

from __future__ import annotations

import os
import time
import traceback
from dataclasses import dataclass

import torch

from rescore.model.findings import REFUSAL_FINDINGS
from rescore.model.oom import exception_chain, in_use_bytes, is_oom, requested_bytes
from rescore.model.outcomes import HARNESS_FAULT, REFUSED_PREFIX, Outcome
from rescore.runtime import interpreter
from rescore.worker import confine
from rescore.worker.protocol import ALONE_KEY

__all__ = ["NeedsRestart", "Verdict", "classify_exception", "cuda_context_usable", "exceeds_worker_memory",
           "from_harness", "harness_failure", "is_cuda_failure", "mark_from_candidate", "refusal", "verdict_of"]

REFUSALS = (ValueError, TypeError, NotImplementedError)


class NeedsRestart(Exception):
    """The worker's device state is no longer trustworthy (CUDA error): restart after this case."""


@dataclass
class Verdict:
    outcome: Outcome
    reason: str = ""
    diagnosis: str | None = None  # set when the failure itself says why (an out-of-bounds access)
    alone: dict | None = None  # out of memory: who asked and how much (`protocol.ALONE_KEY`)

    def row(self, row: dict, start: float) -> dict:
        """`row` completed as a failed call that began at perf_counter() `start`."""
        extra: dict = {"diagnosis": self.diagnosis} if self.diagnosis else {}
        if self.alone is not None:
            extra[ALONE_KEY] = self.alone
        return dict(row, outcome=self.outcome, reason=self.reason, wall_ms=1e3 * (time.perf_counter() - start), **extra)


def is_cuda_failure(exc: BaseException) -> bool:
    text = f"{type(exc).__name__}: {exc}"
    return any(
        s in text for s in ("CUDA error", "illegal memory access", "CUDA_ERROR", "cudaError", "device-side assert")
    )


def cuda_context_usable() -> bool:
    """Whether this process's CUDA context survived an error. A launch the driver refuses up front
    (a grid of 0 blocks, too many threads per block) leaves it usable; a fault inside a kernel (an
    illegal address, a device-side assert) poisons it for the life of the process. Restarting the
    worker after the first kind cost a fresh CUDA process and a reload on every case of a kernel
    whose grid is 0 at small sizes (12 minutes for one submission on the H200)."""
    try:
        torch.cuda.synchronize()
        return float(torch.ones(1, device="cuda").add_(1).item()) == 2.0
    except BaseException:  # noqa: BLE001 - any failure here means the context is gone
        return False


def _frames(tb) -> list[str]:
    return [frame.f_code.co_filename for frame, _ in traceback.walk_tb(tb)]


def _is_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _at(frame: traceback.FrameSummary | None) -> str:
    return f" (at {os.path.basename(frame.filename)}:{frame.lineno})" if frame is not None else ""


def _where(exc: BaseException) -> str:
    tb = traceback.extract_tb(exc.__traceback__)
    return _at(tb[-1]) if tb else ""


def _caller(exc: BaseException, candidate_file: str | None) -> str:
    """Where the refused call was made: the candidate's last line on the stack, else the last line
    outside the audit hook that refused it."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not _is_file(f.filename, confine.__file__)]
    own = [f for f in frames if candidate_file and _is_file(f.filename, candidate_file)]
    return _at((own or frames or [None])[-1])


def _compile_error_text(name: str, message: str) -> str:
    """A Triton compilation error in one line: its position, the source line it points at and its
    last line (the cause), instead of the position alone that its first line holds."""
    lines = [line.rstrip() for line in message.strip().splitlines() if line.strip()]
    if len(lines) <= 1:
        return f"{name}: {lines[0] if lines else ''}"[:500]
    body = lines[1:-1]  # the kernel's source up to the line it points at, then a caret line
    carets = [i for i, line in enumerate(body) if set(line.strip()) <= {"^", "~"}]
    source = body[carets[0] - 1].strip() if carets and carets[0] > 0 else (body[-1].strip() if body else "")
    return f"{name}: {lines[0]} `{source}`: {lines[-1].strip()}"[:500]


def refusal(exc: BaseException) -> str | None:
    """What the sandbox refused, when `exc` is (or wraps, or says in its message) the audit hook's
    refusal; None for any other exception."""
    for e in exception_chain(exc):
        text = str(e)
        if confine.DENIED in text:
            return text.split(confine.DENIED, 1)[1].strip().splitlines()[0].removesuffix(" is not allowed")
    return None


def oom_source(exc: BaseException, candidate_file: str | None) -> str:
    """Who asked for the memory that was not there: the candidate when its file is on the stack, the
    reference when the problem's reference module is, else the harness itself."""
    files = _frames(exc.__traceback__)
    if candidate_file and any(_is_file(f, candidate_file) for f in files):
        return "the candidate"
    if any(f.endswith(os.path.join("oracle", "reference.py")) or "rescore_problem_" in f for f in files):
        return "the reference"
    return "the harness"


def alone_of(by: str, exc: BaseException, reference_ran: bool) -> dict:
    """What an out-of-memory answer tells the parent for its retry alone (`protocol.ALONE_KEY`)."""
    return {"by": by, "bytes": requested_bytes(str(exc)), "in_use": in_use_bytes(str(exc)),
            "reference_ran": reference_ran and by == "the candidate"}


def refused_by_the_hook(v: Verdict, findings: set[str]) -> bool:
    """A `skipped` verdict for a refused call that the audit hook did record (not a message that only
    reads like a refusal)."""
    return v.outcome == Outcome.SKIPPED and bool(findings & REFUSAL_FINDINGS)


def oom_verdict(exc: BaseException, candidate_file: str | None, text: str, reference_ran: bool) -> Verdict:
    """An out-of-memory verdict: its request runs again with the device to itself (`engine/sandbox.py`)."""
    by = oom_source(exc, candidate_file)
    return Verdict(Outcome.OOM, f"out of memory in {by}: {text}"[:500], alone=alone_of(by, exc, reference_ran))


FROM_CANDIDATE = "_rescore_from_candidate"  # set on an exception that left a call into candidate code


def mark_from_candidate(exc: BaseException) -> None:
    """Note on `exc` that it left a call into candidate code (`Guard.call`), whoever raised it there."""
    try:
        setattr(exc, FROM_CANDIDATE, True)
    except Exception:  # noqa: BLE001 - an exception without attributes: its frames still tell (`from_harness`)
        pass


def from_harness(exc: BaseException, candidate_file: str | None) -> bool:
    """Whether an exception in a case's candidate block is rescore's own: it left no call into
    candidate code (`mark_from_candidate`), no frame of it is in the candidate's file, and it is no
    fault the device reports (out of memory, a CUDA error: the kernel's, or the machine's to retry)."""
    if getattr(exc, FROM_CANDIDATE, False) or isinstance(exc, (SystemExit, KeyboardInterrupt)):
        return False
    if is_oom(exc) or is_cuda_failure(exc):
        return False
    return not (candidate_file and any(_is_file(f, candidate_file) for f in _frames(exc.__traceback__)))


def harness_failure(exc: BaseException, candidate_file: str | None) -> dict:
    """The answer to a request whose harness code raised (outside any call into candidate code): out
    of memory is retried alone (the reference's, or the harness's own copies); a CUDA error is the
    kernel's `crash` (a fault of its launch surfaces at the harness's next synchronisation); anything
    else is rescore's own fault, never the kernel's verdict: `skipped`, saying so."""
    text = f"{type(exc).__name__}: {exc}"
    if is_oom(exc):
        v = oom_verdict(exc, candidate_file, text.strip().splitlines()[0], reference_ran=False)
        return {"outcome": v.outcome, "reason": v.reason, ALONE_KEY: v.alone}
    if is_cuda_failure(exc):
        return {"outcome": Outcome.CRASH, "reason": f"a CUDA error after the candidate's launches, raised in the "
                                                     f"harness: {text}"[:500]}
    return {"outcome": Outcome.SKIPPED, "reason": f"{HARNESS_FAULT}, not the kernel's (report it with this case's "
                                                  f"replay command): rescore raised, outside the candidate's calls, "
                                                  f"{text}"[:500]}


def classify_exception(exc: BaseException, candidate_file: str | None, reference_ran: bool = True) -> Verdict:
    """Map an exception raised while running the candidate to an outcome (docs/architecture.md, "Outcomes").
    `reference_ran`: the reference ran at the same sizes before the candidate (a fuzz case, the fixed check)."""
    name = type(exc).__name__
    module = type(exc).__module__ or ""
    text = f"{name}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"[:500]
    refused = refusal(exc)
    if refused is not None:
        return Verdict(Outcome.SKIPPED, f"{REFUSED_PREFIX}{refused}{_caller(exc, candidate_file)}; not judged, "
                       "the refusal is reported apart (findings)"[:500])
    if is_oom(exc):
        return oom_verdict(exc, candidate_file, text, reference_ran)
    if is_cuda_failure(exc):
        return Verdict(Outcome.CRASH, text + _where(exc))
    if isinstance(exc.__cause__, interpreter.OutOfBounds):  # the interpreter wraps kernel errors
        return Verdict(Outcome.CRASH, text + _where(exc), "out_of_bounds")
    if module.startswith("triton") and ("Compilation" in name or "OutOfResources" in name):
        return Verdict(Outcome.COMPILE_ERROR, _compile_error_text(name, str(exc)))
    if isinstance(exc, REFUSALS) and candidate_file:
        files = _frames(exc.__traceback__)
        own = [i for i, f in enumerate(files) if _is_file(f, candidate_file)]
        if own and all(_is_file(f, candidate_file) for f in files[own[0] :]):
            return Verdict(Outcome.DECLINED, text + _where(exc))
    return Verdict(Outcome.CRASH, text + _where(exc))


def verdict_of(exc: BaseException, findings: set[str], candidate_file: str | None, device: str) -> Verdict:
    """The verdict of an exception raised by a call into candidate code, adding to `findings` what it
    shows (`exits`, `memory_hog`); raises NeedsRestart when it left the CUDA context unusable. A call
    the sandbox refused (`findings` holds the refusal the audit hook recorded) is `skipped`, not the
    kernel's crash: the refusal is what it showed, and it is reported apart."""
    if isinstance(exc, (SystemExit, KeyboardInterrupt)):
        findings.add("exits")
    v = classify_exception(exc, candidate_file)
    if v.outcome == Outcome.SKIPPED and not refused_by_the_hook(v, findings):
        # a message that only reads like a refusal: the audit hook refused nothing in this call
        return Verdict(Outcome.CRASH, f"{type(exc).__name__}: {exc}".strip().splitlines()[0][:400] + _where(exc))
    if v.outcome == Outcome.OOM and exceeds_worker_memory(exc, device):
        findings.add("memory_hog")
        return Verdict(Outcome.CRASH, f"{v.reason}: more memory than this worker may use")
    if v.outcome == Outcome.CRASH and is_cuda_failure(exc) and not cuda_context_usable():
        raise NeedsRestart(v.reason) from exc
    return v


def exceeds_worker_memory(exc: BaseException, device: str) -> bool:
    """An allocation larger than the worker may ever have is the kernel's fault, not the machine's
    (which would be retried and then `skipped`)."""
    asked = requested_bytes(str(exc))
    if device == "cuda":
        limit = torch.cuda.get_device_properties(0).total_memory
        return asked is not None and asked > limit
    limit = confine.memory_cap()
    if asked is not None:
        return asked > limit
    # a host allocation of unknown size while nothing else is short of memory: it asked too much
    # (a cuBLAS or cuDNN failure names no size either, and is retried alone instead)
    return isinstance(exc, MemoryError) and confine.memory_available() > limit // 2
