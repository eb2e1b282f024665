"""Content-addressed store for capture results and compiled artifacts.

Why: compiling a whole corpus for two architectures must fit in a CI run; a kernel is compiled
again only when its source, its launch or the toolchain changes. Keys are hashes of exactly those.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

from rescore.model.paths import static_cache_dir


def default_dir() -> Path:
    """$RESCORE_STATIC_CACHE, else ~/.cache/rescore/static."""
    return static_cache_dir()


def key(*parts: Any) -> str:
    """sha256 of the JSON of `parts` (sorted keys, so dict order does not matter)."""
    blob = json.dumps(parts, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def triton_version() -> str:
    """Installed triton version, read without importing triton (the import order matters)."""
    try:
        return metadata.version("triton")
    except metadata.PackageNotFoundError:
        return "none"


def write_atomic(path: Path, data: bytes | str) -> None:
    """Write through a temporary file and rename, so parallel workers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class Cache:
    """Folders `<root>/<kind>/<key[:2]>/<key>/`, each with a result.json and any artifacts."""

    def __init__(self, root: str | Path | None = None) -> None:
        self.root = Path(root) if root is not None else default_dir()

    def folder(self, kind: str, k: str) -> Path:
        return self.root / kind / k[:2] / k

    def get_json(self, kind: str, k: str) -> dict | None:
        path = self.folder(kind, k) / "result.json"
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None

    def put_json(self, kind: str, k: str, value: dict) -> Path:
        path = self.folder(kind, k) / "result.json"
        write_atomic(path, json.dumps(value, default=str))
        return path
