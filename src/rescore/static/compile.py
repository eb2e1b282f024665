"""Compile captured Triton launches offline for sm_90 and sm_80 and measure the result.

Why: static numbers need the PTX and cubin a GPU would run, without a GPU. Each distinct captured
launch goes through `triton.compile(ASTSource(...), target=GPUTarget("cuda", arch, 32))` in a
worker without TRITON_INTERPRET, then `ptxas -v` on the PTX gives registers, spills, stack frame
and static shared memory. The interpreter accepts code the compiler rejects; such a kernel is a
`compile_error` with the compiler's message, never an exception. Artifacts (PTX, cubin, ptxas log,
result) live in a cache folder keyed by the content hash of the kernel's source and launch.

Triton API notes (read from the 3.6.0 and 3.7.1 sources): both take ASTSource(fn, signature,
constexprs=None, attrs=None) with signature {arg name: type string, constexpr args "constexpr"}
(3.7 raises TypeError on non-str keys), constexprs {(arg index,): value} and attrs {(arg index,):
[["tt.divisibility", 16]]}; an int equal to 1 is a constexpr, never an attribute, and
KernelParam / the launcher's specialisation rules are the same. They differ in two places:
3.6's launcher passes constexpr values through parse_attr too (a constexpr *string* containing
"D" would get a divisibility attribute; 3.7 skips constexprs), and 3.7's make_cubin adds
`--regAllocOptLevel=2` to ptxas (run_ptxas mirrors whichever the installed make_cubin uses).
rescore builds attrs for non-constexpr arguments only, as 3.7 does. 3.0-3.2 took `constants=`
and an AttrsDescriptor instead: not supported.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from rescore.model.outcomes import Outcome, RunStatus
from rescore.runtime.modules import file_digest, load_file
from rescore.static import cache, emulated_cuda
from rescore.static.launches import emulates_cuda, launch_spec, specialise
from rescore.static.metrics import kernel_metrics
from rescore.static.worker import run_jobs

COMPILE_VERSION = 2  # 2: ptx_registers
ARCHS: tuple[int, ...] = (90, 80)
# per-block opt-in shared memory and register file, as the driver would check them at load
SHARED_LIMIT = {80: 166912, 86: 101376, 89: 101376, 90: 232448}
REGISTER_FILE = 65536


def _jit_function(obj: Any) -> Any:
    """Unwrap autotune / heuristics wrappers down to the JITFunction."""
    from triton.runtime.jit import JITFunction

    seen = 0
    while not isinstance(obj, JITFunction) and hasattr(obj, "fn") and seen < 8:
        obj, seen = obj.fn, seen + 1
    if not isinstance(obj, JITFunction):
        raise LookupError(f"{obj!r} is not a triton.jit function")
    return obj


def find_kernel(module: Any, launch: dict) -> Any:
    """The JITFunction a launch came from, looked up by its file and qualified name."""
    import sys

    owner = module
    if Path(getattr(module, "__file__", "")).resolve() != Path(launch["file"]):
        owner = next(
            (
                m
                for m in list(sys.modules.values())
                if getattr(m, "__file__", None) and Path(m.__file__).resolve() == Path(launch["file"])
            ),
            module,
        )
    if "<locals>" in launch["qualname"]:
        raise LookupError(f"kernel {launch['qualname']} is defined inside a function; only module-level kernels")
    obj = owner
    for part in launch["qualname"].split("."):
        obj = getattr(obj, part)
    return _jit_function(obj)


def _decode(value: Any) -> Any:
    if isinstance(value, dict) and "__dtype__" in value:
        import triton.language as tl

        return tl.dtype(value["__dtype__"])
    return value


def specialise_for(fn: Any, launch: dict) -> list[dict]:
    """Re-specialise a launch's argument facts with the installed Triton's own parameter flags."""
    facts = {p["name"]: p["fact"] for p in launch["params"]}
    out = []
    for kp in fn.params:
        constexpr = bool(kp.is_constexpr)
        spec = specialise(
            facts[kp.name],
            constexpr=constexpr,
            annotation="" if constexpr else (getattr(kp, "annotation_type", "") or ""),
            specialize=not kp.do_not_specialize,
            align=not getattr(kp, "do_not_specialize_on_alignment", False),
        )
        out.append({"name": kp.name, **spec})
    return out


def make_source(fn: Any, signature: dict, constexprs: dict, attrs: dict) -> Any:
    """ASTSource for the installed Triton from name-keyed signature / constexprs / attrs."""
    from triton.compiler import ASTSource

    accepted = inspect.signature(ASTSource.__init__).parameters
    if "constexprs" not in accepted:
        raise RuntimeError(f"unsupported triton ASTSource API {list(accepted)} (need 3.3 or later)")
    names = list(fn.arg_names)
    cx = {(names.index(n),): _decode(v) for n, v in constexprs.items()}
    at = {(names.index(n),): [["tt.divisibility", 16]] for n in attrs}
    return ASTSource(fn, {n: signature[n] for n in names}, cx, at)


@functools.cache
def ptxas_binary(arch: int) -> str:
    """The ptxas Triton itself uses for `arch` (bundled), else the one on PATH."""
    try:
        from triton.backends.nvidia import compiler as nv

        getter = nv.get_ptxas
        tool = getter(arch) if inspect.signature(getter).parameters else getter()
        path = getattr(tool, "path", None) or (tool[0] if isinstance(tool, tuple) else None)
        if path and os.path.exists(path):
            return str(path)
    except Exception:
        pass
    found = shutil.which("ptxas")
    if not found:
        raise FileNotFoundError("no ptxas: neither Triton's bundled one nor one on PATH")
    return found


@functools.cache
def ptxas_flags() -> tuple[str, ...]:
    """The flags Triton's make_cubin passes that change code generation."""
    flags = ["-lineinfo"]
    try:
        from triton.backends.nvidia.compiler import CUDABackend

        if "regAllocOptLevel" in inspect.getsource(CUDABackend.make_cubin):
            flags.append("--regAllocOptLevel=2")
    except Exception:
        pass
    return tuple(flags)


@functools.cache
def ptxas_version(binary: str) -> str:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout
    m = re.search(r"release ([\d.]+)", out)
    return m.group(1) if m else "unknown"


def run_ptxas(ptx: str, arch: int) -> str:
    """`ptxas -v` on the PTX for the PTX's own .target; returns the info text, raises on failure."""
    m = re.search(r"^\s*\.target\s+(\w+)", ptx, re.M)
    gpu = m.group(1) if m else f"sm_{arch}"
    binary = ptxas_binary(arch)
    with tempfile.TemporaryDirectory(prefix="rescore-ptxas-") as tmp:
        src = Path(tmp) / "k.ptx"
        src.write_text(ptx)
        proc = subprocess.run(
            [binary, *ptxas_flags(), "-v", f"--gpu-name={gpu}", str(src), "-o", str(Path(tmp) / "k.cubin")],
            capture_output=True,
            text=True,
            timeout=300,
        )
    if proc.returncode != 0:
        raise RuntimeError(f"ptxas failed ({proc.returncode}): {proc.stderr.strip()[:3000]}")
    return proc.stderr + proc.stdout


def warm_worker(archs: Sequence[int] = ARCHS) -> None:
    """Do once, before forking, the work every compile repeats: hash Triton, find ptxas."""
    import triton.compiler.code_generator  # noqa: F401
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend
    from triton.runtime.cache import triton_key

    triton_key()
    ptxas_flags()
    for arch in archs:
        make_backend(GPUTarget("cuda", arch, 32)).hash()
        ptxas_version(ptxas_binary(arch))


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).strip()}"[:4000]


def run_compile(job: dict) -> dict:
    """Worker side: compile one launch for one arch, write artifacts into job["folder"].

    With job["emulate_cuda"] the submission is imported on the emulated CUDA device, as it was
    captured, so that a kernel defined only when CUDA is available is defined."""
    t0 = time.perf_counter()
    launch, arch, folder = job["launch"], int(job["arch"]), Path(job["folder"])
    row: dict = {"outcome": RunStatus.OK, "error": None}

    def done(outcome: str, error: str | None = None) -> dict:
        row.update(outcome=outcome, error=error, seconds=time.perf_counter() - t0)
        return row

    bad = [f"{p['name']}: {p['unsupported']}" for p in launch["params"] if p.get("unsupported")]
    if bad:
        return done(Outcome.SKIPPED, "argument rescore cannot specialise: " + "; ".join(bad))
    import triton
    from triton.backends.compiler import GPUTarget

    try:
        with emulated_cuda.emulated_cuda_device() if job.get("emulate_cuda") else nullcontext():
            module = load_file(job["submission"], "submission")
    except BaseException as exc:  # noqa: BLE001
        return done(Outcome.COMPILE_ERROR, "import submission: " + _error(exc))
    try:
        fn = find_kernel(module, launch)
    except (LookupError, AttributeError) as exc:
        return done(Outcome.SKIPPED, "kernel not reachable: " + _error(exc))
    try:
        params = specialise_for(fn, launch)
        signature, constexprs, attrs = launch_spec(params)
        src = make_source(fn, signature, constexprs, attrs)
    except (KeyError, ValueError) as exc:
        return done(Outcome.SKIPPED, "cannot rebuild the launch signature: " + _error(exc))
    row.update(
        signature=json.dumps(signature),
        constexprs=json.dumps(constexprs, default=str),
        attrs=json.dumps(sorted(attrs)),
    )
    options = {k: v for k, v in launch.get("options", {}).items() if k != "debug"}
    try:
        kernel = triton.compile(src, target=GPUTarget("cuda", arch, 32), options=options)
    except Exception as exc:  # CompilationError, MLIR pass failures, PTXASError, ...
        return done(Outcome.COMPILE_ERROR, _error(exc))
    ptx, cubin, md = kernel.asm["ptx"], kernel.asm.get("cubin", b""), kernel.metadata
    row.update(num_warps=md.num_warps, num_stages=md.num_stages, shared_dynamic=int(md.shared))
    try:
        info = run_ptxas(ptx, arch)
    except Exception as exc:
        return done(Outcome.COMPILE_ERROR, _error(exc))
    folder.mkdir(parents=True, exist_ok=True)
    cache.write_atomic(folder / "kernel.ptx", ptx)
    cache.write_atomic(folder / "kernel.cubin", cubin if isinstance(cubin, bytes) else bytes(cubin))
    cache.write_atomic(folder / "ptxas.txt", info)
    row.update(kernel_metrics(ptx, info, int(md.shared)))
    row.update(ptxas_version=ptxas_version(ptxas_binary(arch)))
    limit = SHARED_LIMIT.get(arch)
    if limit is not None and row["shared"] > limit:
        return done(Outcome.COMPILE_ERROR, f"out of resources: shared memory, required {row['shared']}, limit {limit}")
    if row["registers"] and row["registers"] * md.num_warps * 32 > REGISTER_FILE:
        threads = md.num_warps * 32
        return done(Outcome.COMPILE_ERROR, f"out of resources: {row['registers']} registers x {threads} threads")
    return done(RunStatus.OK)


def _compile_key(submission: str | Path, launch: dict, arch: int, emulate: bool) -> str:
    kernel_file = launch.get("file") or submission
    try:
        kernel_digest = file_digest(kernel_file)
    except OSError:
        kernel_digest = None
    return cache.key(
        "compile",
        COMPILE_VERSION,
        cache.triton_version(),
        file_digest(submission),
        kernel_digest,
        launch["qualname"],
        launch["signature"],
        launch["constexprs"],
        launch["attrs"],
        launch.get("options", {}),
        [p["fact"] for p in launch["params"]],
        arch,
        *([emulated_cuda.DEVICE] if emulate else []),
    )


def _with_paths(res: dict, folder: Path) -> dict:
    out = dict(res)
    for name, col in (("kernel.ptx", "ptx_path"), ("kernel.cubin", "cubin_path")):
        out[col] = str(folder / name) if (folder / name).exists() else None
    return out


def compile_many(
    items: Sequence[tuple[str | Path, Sequence[dict]]],
    *,
    archs: Sequence[int] = ARCHS,
    parallel: int | None = None,
    timeout: float = 300.0,
    cache_dir: str | Path | None = None,
) -> list[list[dict]]:
    """Compile every (submission, captured launches) item for every arch, in parallel workers.

    Returns, per item, one row per (launch, arch): kernel, qualname, kernel_index, launches,
    arch, outcome (ok | compile_error | skipped | timeout | crash), error, the metrics of
    `metrics.kernel_metrics`, num_warps, num_stages, ptx_path, cubin_path, cached, seconds.
    """
    store = cache.Cache(cache_dir)
    out: list[list[dict]] = []
    todo: list[tuple[int, int, str, Path]] = []
    jobs: list[dict] = []
    for i, (sub, launches) in enumerate(items):
        rows = []
        emulate = bool(launches) and emulates_cuda(sub)
        for launch in launches:
            for arch in archs:
                base = {
                    "kernel": launch["kernel"],
                    "qualname": launch["qualname"],
                    "kernel_index": launch["index"],
                    "launches": launch.get("count", 1),
                    "arch": f"sm_{arch}",
                    "triton_version": cache.triton_version(),
                }
                k = _compile_key(sub, launch, arch, emulate)
                folder = store.folder("compile", k)
                hit = store.get_json("compile", k)
                if hit is not None:
                    rows.append({**base, **_with_paths(hit, folder), "cached": True})
                    continue
                rows.append(base)
                todo.append((i, len(rows) - 1, k, folder))
                jobs.append(
                    {
                        "submission": str(Path(sub).resolve()),
                        "launch": launch,
                        "arch": arch,
                        "folder": str(folder),
                        "emulate_cuda": emulate,
                    }
                )
        out.append(rows)
    env = {"TRITON_CACHE_DIR": str(store.root / "triton")}
    for (i, j, k, folder), res in zip(
        todo, run_jobs("compile", jobs, parallel=parallel, timeout=timeout, env=env), strict=True
    ):
        if res.get("outcome") in (RunStatus.OK, Outcome.COMPILE_ERROR, Outcome.SKIPPED):
            store.put_json("compile", k, res)
        out[i][j] = {**out[i][j], **_with_paths(res, folder), "cached": False}
    return out


def compile_launches(
    submission_path: str | Path,
    launches: Sequence[dict],
    *,
    archs: Sequence[int] = ARCHS,
    parallel: int | None = None,
    timeout: float = 300.0,
    cache_dir: str | Path | None = None,
) -> list[dict]:
    """Compile the captured launches of one submission (see compile_many)."""
    return compile_many(
        [(submission_path, launches)], archs=archs, parallel=parallel, timeout=timeout, cache_dir=cache_dir
    )[0]
