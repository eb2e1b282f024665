"""The environment a worker starts in: the variables it keeps from the parent's, the folders it may
write (its scratch folder and the compilers' caches), a network namespace where the machine gives one.

Libraries write caches as a matter of course (cupy's kernel cache under ~/.cupy, numba's beside the
source or under ~/.cache, torch's extensions under ~/.cache/torch_extensions): each is pointed into
the worker's own scratch folder (HOME, XDG_CACHE_HOME, CUPY_CACHE_DIR, NUMBA_CACHE_DIR,
TORCH_EXTENSIONS_DIR), so writing there is no escape and no one else's cache is touched. Triton's
cache and the prebuilt CUDA libraries (RESCORE_CUDA_CACHE, created here before a worker starts) stay
shared: the check shards build them once for every worker (`engine/cuda_build.py`, `tests/test_prebuilt.py`).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path

from rescore.model.paths import SRC_ROOT, cuda_cache_root, triton_cache_default

KEEP_ENV = (
    "PATH",
    "LANG",
    "LC_ALL",
    "PYTHONPATH",
    "VIRTUAL_ENV",
    "CUDA_VISIBLE_DEVICES",
    "TRITON_CACHE_DIR",
    "TORCH_EXTENSIONS_DIR",
    "CUDA_HOME",
    "LD_LIBRARY_PATH",
    "OMP_NUM_THREADS",
    "NCCL_NVLS_ENABLE",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST",
    "NVSHMEM_DISABLE_NVLS",
    "TORCH_CUDA_ARCH_LIST",
    "CXX",
    "RESCORE_WORKER_MAX_MEMORY",
    "TORCHINDUCTOR_COMPILE_THREADS",
)


@functools.cache
def network_isolation() -> list[str]:
    """The command prefix that gives a worker a network namespace of its own, or [] where none can
    be made (not root and no user namespaces, or RESCORE_NETNS=0): the audit hook is then the guard."""
    if os.environ.get("RESCORE_NETNS", "1") in ("0", "off", "false") or not shutil.which("unshare"):
        return []
    for prefix in (["unshare", "--net"], ["unshare", "--map-root-user", "--net"]):
        try:
            ok = subprocess.run([*prefix, "true"], capture_output=True, timeout=10).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        if ok:
            return prefix
    return []


def cache_env(scratch: str) -> dict[str, str]:
    """The cache variables of a worker whose scratch folder is `scratch`: its own home, and each
    library's cache inside it (the folders are made here: a library may not create its parents)."""
    home = Path(scratch) / "home"
    caches = {
        "HOME": home,
        "XDG_CACHE_HOME": home / ".cache",
        "CUPY_CACHE_DIR": home / ".cupy" / "kernel_cache",
        "NUMBA_CACHE_DIR": home / ".cache" / "numba",
        "TORCH_EXTENSIONS_DIR": home / ".cache" / "torch_extensions",
    }
    for folder in caches.values():
        folder.mkdir(parents=True, exist_ok=True)
    return {name: str(folder) for name, folder in caches.items()}


def shared_caches() -> dict[str, str]:
    """The caches every worker shares, from the parent's environment and home: Triton's kernels, the
    driver's JIT cache (written by the driver itself, beyond the audit hook), the prebuilt CUDA
    libraries (Triton's and the libraries' folders are made here: the worker may write inside them,
    not create their parents)."""
    home = Path.home()
    cuda = cuda_cache_root()
    cuda.mkdir(parents=True, exist_ok=True)
    # Triton makes its cache folder, parents included, at its first compile: on a fresh machine
    # (~/.triton absent) the worker would mkdir ~/.triton, outside what it may write; made here.
    triton = Path(os.environ.get("TRITON_CACHE_DIR") or triton_cache_default())
    triton.mkdir(parents=True, exist_ok=True)
    return {
        "TRITON_CACHE_DIR": str(triton),
        "CUDA_CACHE_PATH": os.environ.get("CUDA_CACHE_PATH") or str(home / ".nv" / "ComputeCache"),
        "RESCORE_CUDA_CACHE": str(cuda),
    }


def writable_roots(scratch: str, env: dict[str, str]) -> list[str]:
    """Folders a worker may write to: its scratch folder (its home and caches inside), Triton's cache,
    torch's extensions folder where the parent names one outside it, the driver's JIT cache. The
    prebuilt CUDA library of the submission being loaded is allowed at load (`Guard.allow`)."""
    roots = [scratch, env.get("TRITON_CACHE_DIR") or str(triton_cache_default()),
             os.environ.get("TORCH_EXTENSIONS_DIR"), env.get("CUDA_CACHE_PATH")]
    return [str(Path(r).expanduser().absolute()) for r in roots if r]


def worker_env(scratch: str, gpu: str | None, extra: dict[str, str]) -> dict[str, str]:
    """The whole environment of a worker started in `scratch` (on CUDA device `gpu`, None: as inherited)."""
    env = {k: v for k, v in os.environ.items() if k in KEEP_ENV}
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["TMPDIR"] = scratch
    env["OMP_NUM_THREADS"] = "1"  # one core per worker (Snakemake sets it to the job's threads)
    env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")  # torch.compile in-process: no pool to sweep
    env.update(cache_env(scratch))
    if os.environ.get("TORCH_EXTENSIONS_DIR"):  # the parent's own choice stands
        env["TORCH_EXTENSIONS_DIR"] = os.environ["TORCH_EXTENSIONS_DIR"]
    env.update(shared_caches())
    env["RESCORE_WRITABLE"] = os.pathsep.join(writable_roots(scratch, env))
    src = str(SRC_ROOT)
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    env.update(extra)
    return env
