"""What every dump adapter shares: ingest-error rows, verdict and dtype spelling, stable problem ids,
and materialising generated sources as files (so `rescore replay PROBLEM KERNEL` works on them).

A malformed entry never stops an ingest: it becomes a Submission whose `extra["ingest_error"]` says
which file and which problem went wrong. Its problem source raises that message when imported, so a
runner that does not filter such rows records them `skipped` (never a verdict on a kernel).
"""

from __future__ import annotations

import ast
import logging
import os
import re
import tempfile
from pathlib import Path

from rescore.model.paths import GENERATED_DIR
from rescore.model.records import INGEST_ERROR, Problem, Submission, content_hash

log = logging.getLogger("rescore.ingest")


_VERDICTS = {
    "correct": "correct",
    "pass": "correct",
    "passed": "correct",
    "true": "correct",
    "1": "correct",
    "yes": "correct",
    "ok": "correct",
    "incorrect": "incorrect",
    "fail": "incorrect",
    "failed": "incorrect",
    "false": "incorrect",
    "0": "incorrect",
    "no": "incorrect",
    "wrong": "incorrect",
    "mismatch": "incorrect",
    "not_compiled": "not_compiled",
    "compile_error": "not_compiled",
    "compilation_error": "not_compiled",
    "not compiled": "not_compiled",
    "build_error": "not_compiled",
}
_DTYPES = {
    "float32": "float32",
    "fp32": "float32",
    "f32": "float32",
    "float": "float32",
    "float16": "float16",
    "fp16": "float16",
    "f16": "float16",
    "half": "float16",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
}


class BrokenSubmission(Submission):
    """A Submission that could not be read; its table row carries `ingest_error`.

    Only here until `Submission.row()` reads `extra["ingest_error"]` itself (see docs/dumps.md)."""

    def row(self) -> dict:
        row = super().row()
        row["ingest_error"] = self.extra.get("ingest_error")
        return row


def ingest_error(sub: Submission) -> str | None:
    """Why this submission could not be read (None when it could)."""
    return (sub.extra or {}).get("ingest_error")


def broken(
    dump: str, name: str, problem_id: str, where: str, error: str, source: str = "", problem_path: str = ""
) -> Submission:
    """An ingest-error row: `where` is the file at fault, `error` what is wrong with it."""
    message = f"{where}: {error}" if where else error
    log.warning("dump %s: %s (%s)", dump, message, name)
    problem_source = f"raise RuntimeError({(INGEST_ERROR + message)!r})\n"
    problem = Problem(problem_id=problem_id, source=problem_source, path=problem_path or where, op="")
    return BrokenSubmission(
        name=name,
        problem=problem,
        source=source or f"# ingest error: {message}\n",
        path=where,
        dump=dump,
        language="unknown",
        dtypes=(),
        extra={"ingest_error": message},
    )


def normalize_verdict(value) -> str | None:
    """The benchmark's verdict as correct / incorrect / not_compiled (None when absent)."""
    if value is None:
        return None
    if isinstance(value, float) and value != value:  # NaN from a table
        return None
    if isinstance(value, bool):
        return "correct" if value else "incorrect"
    text = str(value).strip().lower()
    if not text:
        return None
    return _VERDICTS.get(text, text)


def normalize_dtypes(values, default: tuple[str, ...] = ("float32",)) -> tuple[str, ...]:
    """A dump's dtype names (fp32, torch.float16, ...) as the fuzz dtypes rescore knows."""
    if not values:
        return default
    if isinstance(values, str):
        values = [values]
    out: list[str] = []
    for v in values:
        name = str(v).strip().lower().removeprefix("torch.").removeprefix("np.").removeprefix("numpy.")
        dtype = _DTYPES.get(name)
        if dtype and dtype not in out:
            out.append(dtype)
    return tuple(out) or default


def materialise(text: str, kind: str, root: Path | None = None) -> str:
    """Write a generated source once, content-addressed; returns its path (stable across runs)."""
    folder = Path(root) if root else GENERATED_DIR
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{kind}_{content_hash(text)}.py"
    if not path.exists():
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=folder)
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as fh:
            fh.write(text)
        os.replace(tmp, path)
    return str(path)


def top_level_names(source: str) -> set[str] | None:
    """Names a module defines at its top level (classes, functions, assignments); None on a syntax error."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def problem_defect(source: str) -> str | None:
    """Why a KernelBench-format problem source cannot be used (None when it can)."""
    try:
        ast.parse(source)
    except SyntaxError as exc:
        return f"syntax error at line {exc.lineno}: {exc.msg}"
    except ValueError as exc:
        return f"not Python source: {exc}"
    names = top_level_names(source) or set()
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if n not in names]
    return f"defines no {', '.join(missing)}" if missing else None


def slug(text: str) -> str:
    """A path- and id-safe spelling of a name."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", str(text)).strip("_") or "x"


class ProblemIds:
    """Stable problem ids: `base` for the first source seen under it, `base@<hash>` for any other."""

    def __init__(self) -> None:
        self._seen: dict[str, str] = {}

    def __call__(self, base: str, source: str) -> str:
        digest = content_hash(source)
        first = self._seen.setdefault(base, digest)
        return base if first == digest else f"{base}@{digest[:8]}"


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
