"""Builds every CUDA (load_inline) submission before the GPU stage, on every CPU core, once.

A check worker that meets a CUDA submission compiles it at import, one at a time, while the GPU
waits; a dump of hundreds of such kernels spends most of its GPU time in nvcc. Here each distinct
source is imported in a process of its own (which runs its `load_inline`), many at a time, with
TORCH_EXTENSIONS_DIR set to a folder named by the hash of the source. Different sources that pick
the same extension name never share a build folder, and a source built once is never built again:
a second run finds the folder's `build.json` and compiles nothing (the folder and the build's
identity: `runtime/extensions.py`). The check worker imports these builds instead of compiling them
(`worker/prebuilt.py`): through torch's own build, ninja rebuilds whenever a file looks newer than
the library (a cache copied to another machine, say), and on the H200 every CUDA submission spent
about 75 s in its worker before its first case, the time of a cold build, with the prebuild's cache
in place.

Every build is recorded (`results/cuda_builds/<dump>.parquet`): its status, seconds, and the
compiler's error. A `load_inline` call that fails is recorded with what failed (the compiler, or the
import of a library that compiled) even when the submission catches it and falls back to PyTorch,
as many do: its import then succeeds, and only this record says that its CUDA never built. Whether
a case called what did build is the check stage's to say (`worker/usage.py`); the gathered table
(`results/cuda_builds.parquet`, `analysis/cuda_usage.py`) joins the two. On a machine without a
GPU every CUDA submission is recorded `skipped`.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import logging
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd

from rescore.engine.gpus import shard_slot, worker_gpu
from rescore.model.builds import ERROR_CHARS, BuildStatus, error_text, exception_error, stages
from rescore.model.records import Submission, content_hash, read_manifests
from rescore.runtime.extensions import MARKER, build_key, cache_root, call_fingerprint, in_extensions_dir

log = logging.getLogger("rescore")

COLUMNS = [
    "submission_id",
    "name",
    "dump",
    "source_hash",
    "status",
    "ok",
    "compiled",
    "loaded",
    "called",
    "cached",
    "seconds",
    "error",
    "extensions",
    "build_dir",
]


def _cached(folder: Path, key: dict) -> dict | None:
    """The recorded build of this folder, when it is still valid (same key, its library still there)."""
    try:
        record = json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return None
    if record.get("key") != key:
        return None
    if "failures" not in record:
        return None  # recorded by an older rescore, which counted a build that failed and was caught as built
    if record.get("ok") and record.get("loaded") and (not any(folder.rglob("*.so")) or "calls" not in record):
        return None  # the library is gone, or an older build recorded no calls for the workers to match
    if not record.get("ok") and record.get("transient"):
        return None
    return record


def build_one(
    source: str, root: Path, key: dict, timeout_s: float, max_jobs: int, problem_source: str | None = None,
    gpu: str | None = None,
) -> dict:
    """Import one source in a fresh process with its own TORCH_EXTENSIONS_DIR; record the outcome.
    With its problem's source, a source that builds nothing at import is also instantiated as the
    benchmark does (ModelNew(*get_init_inputs())), so a `load_inline` in `__init__` is built here,
    many at a time, rather than in the first case of a check shard."""
    folder = root / content_hash(source)
    with _locked(folder.with_name(folder.name + ".lock")):  # check shards build side by side
        return _build_one(source, folder, key, timeout_s, max_jobs, problem_source, gpu)


@contextlib.contextmanager
def _locked(path: Path):
    """Hold an exclusive lock on `path` (another process building the same source waits, then finds
    its build cached)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _build_one(source: str, folder: Path, key: dict, timeout_s: float, max_jobs: int, problem_source: str | None,
               gpu: str | None) -> dict:
    cached = _cached(folder, key)
    if cached is not None:
        return dict(cached, status=_status(cached), cached=True, seconds=0.0)
    folder.mkdir(parents=True, exist_ok=True)
    module = folder / "submission.py"
    module.write_text(source, encoding="utf-8", errors="surrogateescape")
    command = [sys.executable, "-m", "rescore.engine.cuda_build", "import", str(module)]
    if problem_source is not None:
        problem = folder / "problem.py"
        problem.write_text(problem_source, encoding="utf-8", errors="surrogateescape")
        command += ["--problem", str(problem)]
    env = dict(os.environ, TORCH_EXTENSIONS_DIR=str(folder), MAX_JOBS=str(max_jobs), PYTHONUNBUFFERED="1")
    src = str(Path(__file__).resolve().parents[2])  # the folder that holds rescore/
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if gpu is not None:  # the test load's GPU (engine/gpus.py); the build itself is the compiler's
        env["CUDA_VISIBLE_DEVICES"] = gpu
    start = time.perf_counter()
    transient = False
    try:
        proc = subprocess.run(
            command,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            cwd=folder,
            start_new_session=True,
        )
        ok = proc.returncode == 0
        error = None if ok else error_text(proc.stderr or proc.stdout)
        if proc.returncode < 0:
            transient, error = True, f"the build process died (signal {-proc.returncode}): {error}"
        printed = _printed(proc.stdout)
        failures = printed.get("failures", [])
        if failures:  # the call that failed, caught by the submission or not: its own error
            error = failures[0][3]
    except subprocess.TimeoutExpired:
        ok, transient, printed, failures = False, True, {}, []
        error = f"the build took longer than {timeout_s:.0f} s and was stopped"
    record = {
        "ok": ok,
        "error": error,
        "extensions": printed.get("extensions", []),
        "loaded": printed.get("loaded", []),
        "failures": failures,  # [name, fingerprint, status, error] of each load_inline / load call that raised
        "calls": printed.get("calls", []),
        # ModelNew(*get_init_inputs()) raised: the check stage says how
        "construct_error": printed.get("construct_error"),
        "key": key,
        "transient": transient,
        "seconds": time.perf_counter() - start,
        "build_dir": str(folder),
    }
    (folder / MARKER).write_text(json.dumps(record, indent=1))
    return dict(record, status=_status(record), cached=False)


def _printed(stdout: str | None) -> dict:
    """The build process's record (its last line of output; printed even when the import raised)."""
    try:
        doc = json.loads((stdout or "").strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _status(record: dict) -> BuildStatus:
    """compile_failed / load_failed (the first call that raised, caught or not), failed (the process
    failed otherwise), loaded (compiled and imported; the check stage says whether it is called), or
    no_build (imported, but it builds nothing at import or construction)."""
    failures = [f for f in record.get("failures") or [] if len(f) == 4]
    if failures:
        return BuildStatus(failures[0][2])
    if not record.get("ok"):
        return BuildStatus.FAILED
    return BuildStatus.LOADED if record.get("loaded") else BuildStatus.NO_BUILD


def prebuild(
    subs: list[Submission],
    device: str,
    root: str | os.PathLike | None = None,
    jobs: int | None = None,
    timeout_s: float = 1800.0,
    gpus: int = 1,
    compile_jobs: int | None = None,
) -> pd.DataFrame:
    """Build every CUDA submission's extensions (each distinct source once, `jobs` at a time; the
    i-th source's test load on GPU slot i % gpus; `compile_jobs` compiles at a time in each build,
    ninja's MAX_JOBS: by default the machine's cores over the builds at a time).

    One row per CUDA submission: status loaded | compile_failed | load_failed | no_build (imported,
    but it builds nothing at import: it will build in the check stage) | failed | skipped (no GPU),
    with `compiled` and `loaded` as the status tells them; `cached` when an earlier run's build (or
    failure) was reused and nothing was compiled."""
    cuda = [s for s in subs if s.language == "cuda" and not (s.extra or {}).get("ingest_error")]
    if device != "cuda":
        return _frame(
            [
                _row(
                    s,
                    {
                        "status": BuildStatus.SKIPPED,
                        "ok": None,
                        "seconds": 0.0,
                        "error": "no GPU: CUDA submissions are built and run on a CUDA device",
                    },
                )
                for s in cuda
            ]
        )
    folder = cache_root(root)
    folder.mkdir(parents=True, exist_ok=True)
    sources = list(dict.fromkeys(s.source for s in cuda))
    problems = {}
    for s in cuda:
        problems.setdefault(s.source, s.problem.source)
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(sources) or 1))
    max_jobs = compile_jobs or max(1, (os.cpu_count() or 1) // jobs)
    key = build_key()
    log.info("prebuilding %d CUDA sources (%d submissions), %d at a time, in %s", len(sources), len(cuda), jobs, folder)
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        built = pool.map(lambda i, src: build_one(src, folder, key, timeout_s, max_jobs, problems[src],
                                                  worker_gpu(shard_slot(i, gpus))), range(len(sources)), sources)
        results = dict(zip(sources, built))
    return _frame([_row(s, results[s.source]) for s in cuda])


def _row(sub: Submission, result: dict) -> dict:
    compiled, loaded = stages(result.get("status"))
    return {
        "submission_id": sub.submission_id,
        "name": sub.name,
        "dump": sub.dump,
        "source_hash": content_hash(sub.source),
        "status": result.get("status"),
        "ok": result.get("ok"),
        "compiled": compiled,
        "loaded": loaded,
        "called": None,  # the check stage's to say (analysis/cuda_usage.py)
        "cached": bool(result.get("cached", False)),
        "seconds": float(result.get("seconds") or 0.0),
        "error": result.get("error"),
        "extensions": ",".join(result.get("extensions") or []),
        "build_dir": result.get("build_dir"),
    }


def _frame(rows: list[dict]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=COLUMNS)
    for col in ("ok", "compiled", "loaded", "called"):
        df[col] = df[col].astype("boolean")
    return df


def write_builds(
    manifests: list[str],
    device: str,
    out: str,
    jobs: int | None = None,
    root: str | None = None,
    timeout_s: float = 1800.0,
    gpus: int = 1,
    only: set[str] | None = None,
    compile_jobs: int | None = None,
) -> pd.DataFrame:
    """Build the CUDA submissions of the manifests (`only`: of these submission ids), write the builds
    table (a check shard builds its own submissions first: `stages.run_shard`); `compile_jobs` as in
    `prebuild`."""
    from rescore.model.tables import SCHEMAS, write_parquet
    from rescore.runtime.device import resolve_device

    subs = [s for s in read_manifests(manifests) if only is None or s.submission_id in only]
    df = prebuild(subs, resolve_device(device), root, jobs, timeout_s, gpus, compile_jobs)
    write_parquet(df, out, "cuda_builds" if "cuda_builds" in SCHEMAS else None)
    failed = int(df["status"].isin([BuildStatus.FAILED, BuildStatus.COMPILE_FAILED, BuildStatus.LOAD_FAILED]).sum())
    log.info("CUDA builds: %s", df["status"].value_counts().to_dict())
    if failed:
        log.warning("%d CUDA submissions failed to build or load (caught by the submission or not); see %s",
                    failed, out)
    return df


def _import_for_build(path: str, problem: str | None = None) -> None:
    """(In the build process.) Import a submission, recording the extensions its load_inline builds;
    when the import builds nothing and the problem is given, instantiate ModelNew as the benchmark
    does (seed 42, the problem's init inputs): a `load_inline` in `__init__` is built then."""
    import importlib.util

    from torch.utils import cpp_extension

    built: list[str] = []
    loaded: list[str] = []
    failures: list[list] = []  # [name, fingerprint, status, error] of each call that raised, caught or not
    calls: list[list[str]] = []  # [name, fingerprint, module name] of each library built, for the workers
    for fn_name in ("load_inline", "load"):
        original = getattr(cpp_extension, fn_name)

        def recording(*args, _original=original, **kwargs):
            # in the source's folder, where the workers look, whatever folder the submission names
            args, kwargs = in_extensions_dir(_original, args, kwargs)
            name = str(kwargs.get("name", args[0] if args else "?"))
            built.append(name)
            fingerprint = call_fingerprint(_original, args, kwargs)
            try:
                result = _original(*args, **kwargs)
            except Exception as exc:
                status = BuildStatus.LOAD_FAILED if _library_in(name) else BuildStatus.COMPILE_FAILED
                failures.append([name, fingerprint, status.value, exception_error(exc)])
                raise
            loaded.append(name)
            if fingerprint is not None:
                version = cpp_extension.JIT_EXTENSION_VERSIONER.get_version(name)
                calls.append([name, fingerprint, name if not version else f"{name}_v{version}"])
            return result

        setattr(cpp_extension, fn_name, recording)
    spec = importlib.util.spec_from_file_location(f"rescore_prebuild_{Path(path).parent.name}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path}: cannot be imported")
    module = importlib.util.module_from_spec(spec)
    construct_error = None
    try:
        spec.loader.exec_module(module)
        if not built and problem is not None and isinstance(getattr(module, "ModelNew", None), type):
            construct_error = _construct(module.ModelNew, problem)
    finally:  # also when the import raised: the parent reads which call failed, and how
        print(json.dumps({"extensions": built, "loaded": loaded, "failures": failures, "calls": calls,
                          "construct_error": construct_error}), flush=True)


def _library_in(name: str) -> bool:
    """(In the build process.) Whether extension `name`'s build folder holds a compiled library."""
    folder = os.environ.get("TORCH_EXTENSIONS_DIR")
    return bool(folder) and any((Path(folder) / name).glob("*.so"))


def _construct(model_new: type, problem: str) -> str | None:
    """Instantiate ModelNew on the problem's init inputs; the error text if that raises (the check
    stage records what it means: this only builds)."""
    import importlib.util

    import torch

    try:
        spec = importlib.util.spec_from_file_location("rescore_prebuild_problem", problem)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        torch.manual_seed(42)
        model_new(*module.get_init_inputs())
    except Exception as exc:  # the submission's or the problem's own error: not the build's
        return f"{type(exc).__name__}: {exc}"[:ERROR_CHARS]
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rescore.engine.cuda_build", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    one = sub.add_parser("import", help="(internal) import one submission file to build its extensions")
    one.add_argument("path")
    one.add_argument("--problem", default=None, help="the problem file: instantiate ModelNew on its init inputs")
    args = parser.parse_args(argv)
    _import_for_build(args.path, args.problem)
    return 0


if __name__ == "__main__":
    sys.exit(main())
