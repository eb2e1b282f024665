"""A source file that cannot be a submission or a problem, named: one message that names the file and
says what is wrong with it (the worker records it as the submission's error row, and the run goes on).
"""

from __future__ import annotations

import re

MAX_SOURCE_BYTES = 4 << 20  # a KernelBench submission is a few kB; 4 MiB is far beyond any real one
_CODING = re.compile(r"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")


def source_defect(source: str, path: str, what: str = "submission") -> str | None:
    """Why `source` (read with surrogateescape) cannot be imported as a Python module, or None.

    Syntax errors are left to the import, whose message already names the line."""
    name = path or f"the {what}"
    size = len(source.encode("utf-8", "surrogateescape"))
    if size > MAX_SOURCE_BYTES:
        return f"{name}: {size / (1 << 20):.1f} MiB, over the {MAX_SOURCE_BYTES >> 20} MiB limit for a {what} file"
    if not source.strip():
        return f"{name}: the {what} file is empty"
    if "\0" in source:
        return f"{name}: a binary file (it contains NUL bytes), not Python source"
    bad = next((i for i, c in enumerate(source) if "\udc80" <= c <= "\udcff"), None)
    if bad is not None and not any(_CODING.match(line) for line in source.splitlines()[:2]):
        line = source.count("\n", 0, bad) + 1
        byte = ord(source[bad]) - 0xDC00
        return f"{name}: not UTF-8 text (byte 0x{byte:02x} on line {line}) and no coding declaration"
    return None
