"""Which language a submission is written in, from its source text alone."""

from __future__ import annotations

import re


def detect_language(source: str) -> str:
    """triton | cuda | torch, from what the source uses."""
    if "load_inline" in source or "cpp_extension" in source:
        return "cuda"
    if re.search(r"@\s*triton\.(jit|autotune)", source):
        return "triton"
    return "torch"
