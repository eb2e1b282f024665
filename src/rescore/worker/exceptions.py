"""What an exception raised by candidate code means: its outcome (`crash`, `declined`, `compile_error`,
`oom`), where it was raised, and whether the worker's CUDA context survived it (docs/architecture.md,
"Outcomes")."""

from __future__ import annotations

import os
import re
import time
import traceback
from dataclasses import dataclass

import torch

from rescore.model.outcomes import Outcome
from rescore.runtime import interpreter
from rescore.worker import confine

REFUSALS = (ValueError, TypeError, NotImplementedError)


class NeedsRestart(Exception):
    """The worker's device state is no longer trustworthy (CUDA error): restart after this case."""


@dataclass
class Verdict:
    outcome: Outcome
    reason: str = ""
    diagnosis: str | None = None  # set when the failure itself says why (an out-of-bounds access)

    def row(self, row: dict, start: float) -> dict:
        """`row` completed as a failed call that began at perf_counter() `start`."""
        extra = {"diagnosis": self.diagnosis} if self.diagnosis else {}
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


def is_oom(exc: BaseException) -> bool:
    text = str(exc)
    return isinstance(exc, (torch.cuda.OutOfMemoryError, MemoryError)) or any(
        s in text for s in ("out of memory", "can't allocate memory", "Unable to allocate")
    )


def _frames(tb) -> list[str]:
    return [frame.f_code.co_filename for frame, _ in traceback.walk_tb(tb)]


def _is_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _where(exc: BaseException) -> str:
    tb = traceback.extract_tb(exc.__traceback__)
    if not tb:
        return ""
    last = tb[-1]
    return f" (at {os.path.basename(last.filename)}:{last.lineno})"


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


def classify_exception(exc: BaseException, candidate_file: str | None) -> Verdict:
    """Map an exception raised while running the candidate to an outcome (docs/architecture.md, "Outcomes")."""
    name = type(exc).__name__
    module = type(exc).__module__ or ""
    text = f"{name}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"[:500]
    if is_oom(exc):
        return Verdict(Outcome.OOM, text)
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
    shows (`exits`, `memory_hog`); raises NeedsRestart when it left the CUDA context unusable."""
    if isinstance(exc, (SystemExit, KeyboardInterrupt)):
        findings.add("exits")
    v = classify_exception(exc, candidate_file)
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
    return confine.memory_available() > limit // 2  # nothing else is short of memory: it asked too much


_SIZE = re.compile(r"(?:tried to allocate|unable to allocate)\s+([\d.]+)\s*(bytes|[KMGTP]i?B)", re.IGNORECASE)
_UNITS = {"bytes": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "pb": 1e15,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "pib": 2**50}


def requested_bytes(text: str) -> int | None:
    """The size of a failed allocation, from torch's (CPU or CUDA) or numpy's message."""
    m = _SIZE.search(text)
    if not m:
        return None
    return int(float(m.group(1)) * _UNITS.get(m.group(2).lower(), 1))
