"""A CUDA C submission's build, and whether its own CUDA ran: the words every layer shares.

A `load_inline` submission that catches its build's failure and computes with PyTorch instead
answers correctly, so no outcome shows it; its claim of a CUDA kernel (and of that kernel's speed)
is still false. The prebuild (`engine/cuda_build.py`) says whether each extension compiled and
loaded; the check worker (`worker/usage.py`) counts the calls of the functions of every library
`load_inline` returned, and records per case whether any ran (`cuda_ran`) and what stopped them
(`cuda_build`); the gathered builds table (`analysis/cuda_usage.py`) joins the two.
"""

from __future__ import annotations

import re

from rescore.model.outcomes import ValueEnum

ERROR_CHARS = 4000  # the most of a build's error a table keeps


class BuildStatus(ValueEnum):
    """A CUDA submission's build (not a case outcome)."""

    BUILT = "built"  # compiled, loaded, and a case called its functions
    LOADED = "loaded"  # compiled and loaded by the prebuild; whether a case calls it is the check stage's to say
    NOT_CALLED = "not_called"  # compiled and loaded, but no case called any of its functions
    COMPILE_FAILED = "compile_failed"  # a load_inline / load call failed to compile (the compiler's error kept)
    LOAD_FAILED = "load_failed"  # compiled, but importing the library failed
    NO_BUILD = "no_build"  # no load_inline / load call seen: its CUDA (if any) runs some other way
    FAILED = "failed"  # the build process failed otherwise (timed out, died, the import raised)
    SKIPPED = "skipped"  # no GPU: CUDA submissions are built and run on a CUDA device


class CudaRan(ValueEnum):
    """Whether a CUDA submission's own CUDA ran (cases and illusion `cuda_ran`)."""

    YES = "yes"  # a function of a library load_inline / load returned was called
    NO = "no"  # its builds failed, or what they built was never called: the answer is PyTorch's
    UNKNOWN = "unknown"  # nothing the harness can count (no load_inline call, or a library of torch ops)


NEVER_RAN: dict[BuildStatus, str] = {
    BuildStatus.COMPILE_FAILED: "build failed",
    BuildStatus.LOAD_FAILED: "load failed",
    BuildStatus.NOT_CALLED: "never called",
}
"""Why a CUDA submission's CUDA never ran, by the status that says so."""

ONLY_PYTORCH_RAN = "ran none of the submission's own CUDA"
"""The words in a sanitizer row's reason when its case was not run because it computed with PyTorch's
kernels alone (`engine/sanitizer.py`): those are the harness's, so the tools would watch no kernel of
the submission. `analysis/uncertainty.py` counts the rows by them."""


def stages(status: str | None) -> tuple[bool | None, bool | None]:
    """(compiled, loaded) as a build status tells them; None where it cannot."""
    if status in (BuildStatus.LOADED, BuildStatus.BUILT, BuildStatus.NOT_CALLED):
        return True, True
    if status == BuildStatus.COMPILE_FAILED:
        return False, False
    if status == BuildStatus.LOAD_FAILED:
        return True, False
    return None, None


def cuda_ran(status: str | None) -> CudaRan | None:
    """Whether a case (or a submission) with this build status ran its CUDA; None for no status."""
    if status is None:
        return None
    if status == BuildStatus.BUILT:
        return CudaRan.YES
    return CudaRan.NO if status in NEVER_RAN else CudaRan.UNKNOWN


def error_text(output: str) -> str:
    """A failed build's words a reader needs: the exception's own line and the compiler's error lines,
    else the tail of its output."""
    lines = output.splitlines()
    raised = [ln for ln in lines if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt)\b", ln)][-1:]
    compiler = [ln for ln in lines if "error:" in ln or "error :" in ln][:40]
    text = "\n".join(raised + [ln for ln in compiler if ln not in raised]) or "\n".join(lines[-30:])
    return text[-ERROR_CHARS:]


def exception_error(exc: BaseException) -> str:
    """`error_text` of a build's exception, its type named (a `load_inline` that raised)."""
    return error_text(f"{type(exc).__name__}: {exc}")
