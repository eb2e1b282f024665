"""Running out of memory, in every form it takes, and how a case that ran out is recorded.

Several workers share a GPU (or a host): an allocation that fails there says nothing about a kernel
until the case has run again with the device to itself (`engine/sandbox.py`). The failure takes many
forms besides torch's `OutOfMemoryError`: a CUDA runtime error, a cuBLAS or cuDNN handle that could
not be created (their workspace is allocated then), numpy's `MemoryError` under the worker's rlimit.
Plain text and class names only, so that every layer (the worker, the reference, the parent) reads
an exception the same way without importing torch."""

from __future__ import annotations

import re

OOM_TYPES = frozenset({"OutOfMemoryError", "MemoryError"})
"""Exception classes (by name, anywhere in the class's MRO) that are out-of-memory errors."""

OOM_MARKERS = (
    "out of memory",  # torch.OutOfMemoryError, "CUDA error: out of memory" (AcceleratorError), the driver
    "can't allocate memory",  # torch's CPU allocator
    "cannot allocate memory",  # ENOMEM
    "unable to allocate",  # numpy
    "std::bad_alloc",
    "cudaerrormemoryallocation",
    "cuda_error_out_of_memory",
    "cublas_status_alloc_failed",  # cublasCreate / its workspace
    "cublas_status_not_initialized",  # cublasCreate failing for want of memory for its handle
    "cudnn_status_alloc_failed",
    "cudnn_status_not_initialized",  # cudnnCreate failing for want of memory
    "cufft_alloc_failed",
    "cusolver_status_alloc_failed",
    "cusparse_status_alloc_failed",
    # the driver's answer when a CUDA context (a restarted worker's) cannot be made on a device whose
    # memory other workers hold
    "busy or unavailable",
    "cudaerrordevicesunavailable",
)

_SIZE = re.compile(r"(?:tried to allocate|unable to allocate)\s+([\d.]+)\s*(bytes|[KMGTP]i?B)", re.IGNORECASE)
_IN_USE = re.compile(r"this process has\s+([\d.]+)\s*(bytes|[KMGTP]i?B) memory in use", re.IGNORECASE)
_UNITS = {"bytes": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "pb": 1e15,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "pib": 2**50}


def exception_chain(exc: BaseException, depth: int = 6) -> list[BaseException]:
    """`exc` and the exceptions it was raised from or during (a wrapper's cause), innermost last."""
    out: list[BaseException] = []
    while exc is not None and len(out) < depth and exc not in out:
        out.append(exc)
        exc = exc.__cause__ or exc.__context__
    return out


def is_oom(exc: BaseException) -> bool:
    """Whether `exc`, or an exception it wraps, is a failed allocation (host or device)."""
    for e in exception_chain(exc):
        if any(t.__name__ in OOM_TYPES for t in type(e).__mro__):
            return True
        text = str(e).lower()
        if any(m in text for m in OOM_MARKERS):
            return True
    return False


def requested_bytes(text: str) -> int | None:
    """The size of a failed allocation, from torch's (CPU or CUDA) or numpy's message; None where the
    message names none (a cuBLAS handle, a CUDA runtime error)."""
    return _bytes(_SIZE.search(text or ""))


def in_use_bytes(text: str) -> int | None:
    """What the process held on the device when its allocation failed, its context included, from
    torch's CUDA message (`Including non-PyTorch memory, this process has 31.29 GiB memory in use`);
    None where the message names none."""
    return _bytes(_IN_USE.search(text or ""))


def _bytes(m: re.Match | None) -> int | None:
    return int(float(m.group(1)) * _UNITS.get(m.group(2).lower(), 1)) if m else None


def size_text(nbytes: int | None) -> str:
    """`1.65 GiB`; `an amount the message does not name` for None."""
    if nbytes is None:
        return "an amount the message does not name"
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.2f} {unit}"
    return f"{nbytes} bytes"


def alone_reason(by: str, nbytes: int | None, device: str, message: str) -> str:
    """The reason of a case that ran out of memory again with the device to itself (`skipped`)."""
    where = "the GPU" if device == "cuda" else "the host"
    return (f"out of memory with {where} to itself: {by} asked for {size_text(nbytes)} ({message}); "
            "not judged: this machine cannot run the case, which says nothing about the kernel")[:500]
