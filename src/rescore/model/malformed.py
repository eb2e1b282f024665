"""Bad input, named: a source file that cannot be a submission, and an intermediate table that cannot
be read. Each gets one message that names the file and says what is wrong with it, and the run goes
on (a submission becomes one error row; a corrupt intermediate is removed so it is rebuilt).
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

MAX_SOURCE_BYTES = 4 << 20  # a KernelBench submission is a few kB; 4 MiB is far beyond any real one
_CODING = re.compile(r"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")

log = logging.getLogger("rescore")


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


def check_tables(paths: list[str], table: str | None = None, remove: bool = True) -> None:
    """Read every intermediate table; raise one ValueError naming each unreadable one.

    With `remove`, the unreadable files are deleted first, so that running the workflow again
    rebuilds exactly them (Snakemake sees a missing output) instead of stopping on them forever."""
    from rescore.model.tables import read_parquet

    bad: list[str] = []
    for path in paths:
        try:
            read_parquet(path, table)
        except ValueError as exc:
            bad.append(str(exc))
            if remove:
                try:
                    os.unlink(path)
                except OSError:
                    pass
                log.error("%s", exc)
    if bad:
        again = " They were deleted: run the workflow again to rebuild them." if remove else ""
        raise ValueError(f"{len(bad)} intermediate table(s) could not be read.{again}\n" + "\n".join(bad))


def unreadable(path: str | os.PathLike) -> str | None:
    """Why a dump file or folder cannot be read (missing, a loop of symlinks, no permission), or None."""
    p = Path(path)
    try:
        if p.is_symlink():
            p.resolve(strict=True)
        if p.is_dir():
            next(iter(os.scandir(p)), None)
        else:
            with open(p, "rb") as fh:
                fh.read(1)
    except FileNotFoundError:
        return f"{p}: does not exist"
    except RuntimeError:
        return f"{p}: a loop of symbolic links"
    except OSError as exc:
        if exc.errno == 40:  # ELOOP
            return f"{p}: a loop of symbolic links"
        return f"{p}: cannot be read ({exc.strerror or exc})"
    return None
