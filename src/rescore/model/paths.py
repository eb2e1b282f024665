"""Every folder and file rescore reads or writes besides a run's results: the caches (each from its
environment variable where it has one, read at call time, so that a test or the sandbox can set it)
and the package's own data. Relative cache folders are relative to the working directory."""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # src/rescore
SRC_ROOT = PACKAGE_ROOT.parent  # the folder that holds rescore/: a child process's PYTHONPATH
CORPUS_ROOT = PACKAGE_ROOT / "corpus" / "ops"  # the built-in corpus, one folder per op
SHARD_COSTS = PACKAGE_ROOT / "corpus" / "shard_costs.json"  # seconds per submission, from a CPU run
SHARD_COSTS_CUDA = PACKAGE_ROOT / "corpus" / "shard_costs.cuda.json"  # the same from a GPU run
SHARD_MEMORY_CUDA = PACKAGE_ROOT / "corpus" / "shard_memory.cuda.json"  # GiB of device memory per submission
PUBLISHED_DIR = PACKAGE_ROOT.parents[1] / "config" / "published"  # the preprints' printed tables

CACHE = Path(".rescore-cache")
MODULE_CACHE = CACHE / "modules"  # content-addressed copies of sources a worker imports
GENERATED_DIR = CACHE / "generated"  # sources generated at ingest (other formats in KernelBench form)
CUDA_CACHE_DEFAULT = CACHE / "torch_extensions"
FAILURE_STORE_DEFAULT = CACHE / "failures"
RESULT_CACHE_DEFAULT = CACHE / "results"


def cuda_cache_root(root: str | os.PathLike | None = None) -> Path:
    """The CUDA builds' root folder: `root`, else $RESCORE_CUDA_CACHE, else .rescore-cache/torch_extensions."""
    return Path(root or os.environ.get("RESCORE_CUDA_CACHE") or CUDA_CACHE_DEFAULT).resolve()


def shard_memory_file() -> Path:
    """The device memory each submission reserved in a GPU run: $RESCORE_SHARD_MEMORY, else the package's."""
    return Path(os.environ.get("RESCORE_SHARD_MEMORY") or SHARD_MEMORY_CUDA)


def failure_store_root() -> Path:
    """Where `rescore check` keeps each submission's failures: $RESCORE_FAILURE_STORE, else .rescore-cache/failures."""
    return Path(os.environ.get("RESCORE_FAILURE_STORE", FAILURE_STORE_DEFAULT))


def result_cache_root() -> Path:
    """Where the check shards and the sanitizer keep what they measured (`engine/result_cache.py`):
    $RESCORE_RESULT_CACHE, else .rescore-cache/results."""
    return Path(os.environ.get("RESCORE_RESULT_CACHE") or RESULT_CACHE_DEFAULT)


def static_cache_dir() -> Path:
    """The static study's cache: $RESCORE_STATIC_CACHE, else ~/.cache/rescore/static."""
    env = os.environ.get("RESCORE_STATIC_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "rescore" / "static"


def triton_cache_default() -> Path:
    """Triton's own cache folder, which a worker is given when the environment names none."""
    return Path.home() / ".triton" / "cache"
