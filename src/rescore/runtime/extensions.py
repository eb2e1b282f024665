"""The identity of a CUDA (load_inline) build: where a source's libraries live and what they depend on.

Shared by the parent (the prebuild stage, `engine/cuda_build.py`, and the sandbox, which passes the
cache folder to its workers) and the worker (`worker/prebuilt.py`, which imports what the prebuild
compiled). Each distinct source gets a folder of its own under the cache root, named by the hash of
the source; a folder's `build.json` (MARKER) records the prebuild's outcome, its `calls/` the
libraries workers built themselves. A record counts only under the same `build_key()`: changing
what that dict holds rebuilds every cached build.
"""

from __future__ import annotations

import hashlib
import inspect
import os
from pathlib import Path

from rescore.model.paths import cuda_cache_root
from rescore.model.records import content_hash

MARKER = "build.json"
CALLS = "calls"  # in a source's folder: one JSON per library a check worker built, named by its fingerprint
# Arguments that change no byte of the library's code: `name` only names the module (the library is
# imported under the name it was built with), the others where and how loudly it is built.
_NOT_PART_OF_THE_BUILD = {"name", "verbose", "build_directory", "keep_intermediates"}


def cache_root(root: str | os.PathLike | None = None) -> Path:
    """The builds' root folder: `root`, else $RESCORE_CUDA_CACHE, else .rescore-cache/torch_extensions."""
    return cuda_cache_root(root)


def extensions_dir(source: str, root: str | os.PathLike | None = None) -> Path:
    """The TORCH_EXTENSIONS_DIR of one submission source: a folder of its own, named by its hash."""
    return cache_root(root) / content_hash(source)


def call_fingerprint(fn, args: tuple, kwargs: dict) -> str | None:
    """A hash of one `load_inline` call's content (sources, functions, flags; not its `name`): equal
    fingerprints build equal libraries. None when the arguments do not fit the function."""
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except TypeError:
        return None
    bound.apply_defaults()
    items = sorted((k, v) for k, v in bound.arguments.items() if k not in _NOT_PART_OF_THE_BUILD)
    return hashlib.sha256(repr(items).encode()).hexdigest()[:32]


def build_key() -> dict:
    """What a build depends on besides its source: a change in any of these rebuilds it."""
    import platform

    import torch

    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "arch_list": os.environ.get("TORCH_CUDA_ARCH_LIST"),
        "cxx": os.environ.get("CXX"),
        "fingerprint": "content",  # calls are matched by content, not name: older records are rebuilt
        "constructs": 1,  # a source that builds nothing at import is also instantiated (its __init__ builds)
    }
