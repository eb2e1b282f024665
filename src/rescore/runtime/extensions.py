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
    """A hash of one `load_inline` or `load` call's content (sources, functions, flags; not its `name`):
    equal fingerprints build equal libraries. `load`'s source files count by their bytes, not their
    paths: a submission that writes its sources into a new temporary folder at each import makes the
    same library every time. None when the arguments do not fit the function."""
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except TypeError:
        return None
    bound.apply_defaults()
    items = sorted((k, _files_read(v) if k == "sources" else v) for k, v in bound.arguments.items()
                   if k not in _NOT_PART_OF_THE_BUILD)
    return hashlib.sha256(repr(items).encode()).hexdigest()[:32]


def _files_read(sources) -> object:
    """`load`'s `sources` (a path or a list of them) as the hashes of the files' bytes, in order; a
    file that cannot be read keeps its path (its build fails, or differs, as torch's would)."""
    paths = [sources] if isinstance(sources, str | os.PathLike) else list(sources)
    hashes = []
    for path in paths:
        try:
            hashes.append(hashlib.sha256(Path(path).read_bytes()).hexdigest())
        except (OSError, TypeError):
            hashes.append(str(path))
    return hashes


def in_extensions_dir(fn, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """The call with its `build_directory` left out, so that torch builds where TORCH_EXTENSIONS_DIR
    says (the source's folder of the build cache) and a later import finds the library there; a
    library built in a folder of the submission's own (a new temporary one at each import) is built
    again by every worker that imports it. The arguments as given when they do not fit `fn`."""
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except TypeError:
        return args, kwargs
    if bound.arguments.get("build_directory") is None:
        return args, kwargs
    del bound.arguments["build_directory"]
    return (), dict(bound.arguments)


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
        # calls are matched by content, not name, `load`'s source files by their bytes: older records are rebuilt
        "fingerprint": "content, files' bytes",
        "constructs": 1,  # a source that builds nothing at import is also instantiated (its __init__ builds)
    }
