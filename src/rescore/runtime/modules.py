"""Import a problem or submission file as a fresh module under a name no other file can take.

Why: corpus files share names (every op has a problem.py), and a submission must not see a module
cached from another one (reference and candidate never share one either). Two entry points with one
core: `load_module` (the check worker: from source text, named by its content) and `load_file` (the
static study: from a file, named by its path and content, its folder on `sys.path` so a submission
can import a sibling helper; the worker gets no such change of `sys.path`).
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from rescore.model.paths import MODULE_CACHE
from rescore.model.records import content_hash


def _exec_fresh(file: Path, name: str, unloadable: str, sibling_imports: bool = False) -> ModuleType:
    """Execute `file` as a new module registered as `name` in sys.modules (removed again when its
    top-level code raises, which propagates). `unloadable`: the ImportError's text when no loader
    fits the file; `sibling_imports` puts the file's folder first on sys.path."""
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise ImportError(unloadable)
    module = importlib.util.module_from_spec(spec)
    if sibling_imports and str(file.parent) not in sys.path:
        sys.path.insert(0, str(file.parent))
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def load_module(source: str, path: str, kind: str) -> ModuleType:
    """Import `source` as a fresh module named `rescore_<kind>_<content hash>`.

    The module is imported from a real file, because Triton's `@jit` reads kernel source through
    `inspect`; when `path` does not hold exactly `source`, a content-addressed copy is written.
    """
    digest = content_hash(source)
    file = Path(path) if path else None
    if file is None or not file.is_file() or file.read_text(encoding="utf-8", errors="surrogateescape") != source:
        MODULE_CACHE.mkdir(parents=True, exist_ok=True)
        file = MODULE_CACHE / f"{kind}_{digest}.py"
        if not file.exists():
            file.write_text(source, encoding="utf-8", errors="surrogateescape")
    return _exec_fresh(file, f"rescore_{kind}_{digest}", f"{path}: cannot be imported as a Python module")


def file_digest(path: str | Path) -> str:
    """sha256 of a file's bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def load_file(path: str | Path, role: str = "module") -> ModuleType:
    """Execute `path` as a new module named `rescore_static_<role>_<hash>` and return it.

    The file's folder goes on sys.path first, so a submission can import a sibling helper.
    Exceptions raised by the file's own top-level code propagate to the caller.
    """
    path = Path(path).resolve()
    digest = hashlib.sha256(str(path).encode() + b"\0" + path.read_bytes()).hexdigest()[:16]
    return _exec_fresh(path, f"rescore_static_{role}_{digest}", f"cannot load {path}", sibling_imports=True)
