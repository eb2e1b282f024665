"""Import a problem or submission file as a fresh module under a name no other file can take.

Why: corpus files share names (every op has a problem.py), and a submission must not see a module
cached from another one; the name is derived from the path and the content.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def file_digest(path: str | Path) -> str:
    """sha256 of a file's bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def load_module(path: str | Path, role: str = "module") -> ModuleType:
    """Execute `path` as a new module named `rescore_static_<role>_<hash>` and return it.

    The file's folder goes on sys.path first, so a submission can import a sibling helper.
    Exceptions raised by the file's own top-level code propagate to the caller.
    """
    path = Path(path).resolve()
    digest = hashlib.sha256(str(path).encode() + b"\0" + path.read_bytes()).hexdigest()[:16]
    name = f"rescore_static_{role}_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module
