"""Results already measured, reused when nothing that decides them has changed.

A check shard's result for one submission (its case rows, its shrunk failure), a problem's null
candidates, a compute-sanitizer run and a submission's timing are each stored under a key that
hashes everything that decides them: the submission or problem as ingested (source, path, what the
dump says of it), the run's settings, rescore's own code (every file of the package) and the machine
(python, torch, triton, the GPU's model and driver). A second run with any of them changed measures
again; one with none changed (`rm -rf results`, a new figure, one more dump) reads the stored rows
instead of spending the GPU on them again.

What is never stored: a submission with a harness fault among its cases (rescore's own fault, which
another run may not have), a sanitizer run that did not finish and a timing that did not measure. On
a GPU whose model nvidia-smi cannot tell, nothing is stored or read: the key could not tell two GPUs
apart.

Entries are compressed pickles (an eighth of their size: the built-in corpus's 216 submissions take
4 MB) under `.rescore-cache/results/` ($RESCORE_RESULT_CACHE; config `result_cache: false` turns it
off; deleting the folder loses nothing but time), each written whole (a temporary file, then a
rename), so shards that write at once never read half an entry; one that cannot be read is a miss,
logged.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import pickle
import platform
import tempfile
import zlib
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rescore.engine.shards import CACHED_AT_INGEST
from rescore.model.paths import PACKAGE_ROOT
from rescore.model.records import Problem, Submission
from rescore.runtime.device import gpu_identity, installed_versions

log = logging.getLogger("rescore")

SUBMISSION = "submission"  # a check shard's rows for one submission
NULLS = "nulls"  # one problem's row of the degenerate-problems table
SANITIZER = "sanitizer"  # one (tool, case) run's rows under compute-sanitizer
TIMING = "timing"  # one submission's row of the timing table
PLANNING_ONLY = (CACHED_AT_INGEST,)  # keys of a submission's `extra` that decide no result


@functools.cache
def code_hash() -> str:
    """A hash of every file of the rescore package (sources and data): any change to rescore's
    code measures again."""
    h = hashlib.sha256()
    for path in sorted(PACKAGE_ROOT.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            h.update(str(path.relative_to(PACKAGE_ROOT)).encode())
            h.update(b"\0")
            h.update(path.read_bytes())
            h.update(b"\0")
    return h.hexdigest()


def machine(device: str, gpu: str | None = None) -> dict | None:
    """What of the machine decides a result: python, torch, triton, the device, and on a GPU its model;
    None on a GPU nvidia-smi cannot name (then nothing is cached)."""
    found = {"python": platform.python_version(), **installed_versions(), "device": device, "arch": platform.machine()}
    if device == "cuda":
        found["gpu"] = gpu_identity(gpu)
        if found["gpu"] is None:
            return None
    return found


def submission_identity(sub: Submission) -> dict:
    """The submission as ingested (its problem's too), paths included: the replay commands in its rows
    name them. Less what only deals the shards out (whether the build cache held its CUDA C source
    when the dump was read: true in every run after the first)."""
    found = asdict(sub)
    found["extra"] = {k: v for k, v in found["extra"].items() if k not in PLANNING_ONLY}
    return found


def problem_identity(dump: str, problem: Problem) -> dict:
    """A problem as ingested, and its dump."""
    return {"dump": dump, "problem": asdict(problem)}


class ResultCache:
    """The stored results of one kind of run: `get` and `put` by a key `key` makes from what decides them.
    `root` None (or a machine that cannot be named) is a cache that finds nothing and keeps nothing."""

    def __init__(self, root: str | os.PathLike | None, settings: dict, device: str, gpu: str | None = None) -> None:
        found = machine(device, gpu) if root is not None else None
        if root is not None and found is None:
            log.warning("results cache off: nvidia-smi does not name the GPU (CUDA_VISIBLE_DEVICES=%s), so a result "
                        "measured on one GPU could be read on another; every submission is run", gpu)
        self.root = Path(root) if found is not None else None
        self._scope = {"code": code_hash(), "machine": found, "settings": settings}
        self.hits = 0

    @property
    def enabled(self) -> bool:
        return self.root is not None

    def key(self, kind: str, identity: Any) -> str:
        """The entry's name: a hash of `kind`, what the result is of, and the cache's scope."""
        text = json.dumps({"kind": kind, "of": identity, **self._scope}, sort_keys=True, default=str)
        return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()

    def _path(self, kind: str, key: str) -> Path:
        assert self.root is not None
        return self.root / kind / key[:2] / f"{key}.pkl.z"

    def get(self, kind: str, identity: Any) -> Any | None:
        """The stored value for `identity`, or None (nothing stored, the cache off, an unreadable entry)."""
        if self.root is None:
            return None
        path = self._path(kind, self.key(kind, identity))
        if not path.exists():
            return None
        try:
            value = pickle.loads(zlib.decompress(path.read_bytes()))
        except Exception as exc:  # noqa: BLE001 - a damaged entry is a miss, never a stopped shard
            log.warning("results cache: %s could not be read (%s: %s); measured again", path, type(exc).__name__, exc)
            return None
        self.hits += 1
        return value

    def put(self, kind: str, identity: Any, value: Any) -> None:
        """Store `value` for `identity`; a refused write is logged, and the run goes on without it."""
        if self.root is None:
            return
        path = self._path(kind, self.key(kind, identity))
        tmp = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            with os.fdopen(fd, "wb") as f:
                f.write(zlib.compress(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL), 6))
            os.replace(tmp, path)
        except OSError as exc:
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)
            log.warning("results cache: could not write %s (%s); the next run measures this again", path, exc)
