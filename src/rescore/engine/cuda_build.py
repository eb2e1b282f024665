"""Builds every CUDA (load_inline) submission before the GPU stage, on every CPU core, once.

A check worker that meets a CUDA submission compiles it at import, one at a time, while the GPU
waits; a dump of hundreds of such kernels spends most of its GPU time in nvcc. Here each distinct
source is imported in a process of its own (which runs its `load_inline`), many at a time, with
TORCH_EXTENSIONS_DIR set to a folder named by the hash of the source. Different sources that pick
the same extension name never share a build folder, and a source built once is never built again:
a second run finds the folder's `build.json` and compiles nothing. The check worker reuses the
builds by calling `activate(source)` before importing a CUDA submission: a `load_inline` call whose
sources, functions and flags are those of a library the prebuild compiled imports that library
directly, whatever the extension's `name` (a submission that names it after `id(self)` asks for a new
name on every instance). A library a worker builds itself (a `load_inline` inside `__init__`, which
importing alone never reaches) is recorded in the folder the same way (`calls/`), so every later
instance, and every later worker, imports it instead of building it again. Going through
torch's own build instead runs ninja, which rebuilds whenever a file looks newer than the library (a
cache copied to another machine, say): on the H200 every CUDA submission spent about 75 s in its
worker before its first case, the time of a cold build, with the prebuild's cache in place.

Every build is recorded (`results/cuda_builds.parquet`): seconds, ok, and the compiler's error. On a
machine without a GPU every CUDA submission is recorded `skipped`.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd

from rescore.model.paths import CUDA_CACHE_DEFAULT, cuda_cache_root
from rescore.model.records import Submission, content_hash

log = logging.getLogger("rescore")

DEFAULT_ROOT = CUDA_CACHE_DEFAULT
MARKER = "build.json"
COLUMNS = [
    "submission_id",
    "name",
    "dump",
    "source_hash",
    "status",
    "ok",
    "cached",
    "seconds",
    "error",
    "extensions",
    "build_dir",
]
ERROR_CHARS = 4000


def cache_root(root: str | os.PathLike | None = None) -> Path:
    """The builds' root folder: `root`, else $RESCORE_CUDA_CACHE, else .rescore-cache/torch_extensions."""
    return cuda_cache_root(root)


def extensions_dir(source: str, root: str | os.PathLike | None = None) -> Path:
    """The TORCH_EXTENSIONS_DIR of one submission source: a folder of its own, named by its hash."""
    return cache_root(root) / content_hash(source)


def activate(source: str, root: str | os.PathLike | None = None) -> Path:
    """Point torch's JIT builds at this source's folder before importing a CUDA submission.

    Also forgets the extension names earlier submissions in this process loaded: torch would
    otherwise rename a reused name to `<name>_v1` and build it again, outside the prebuilt folder;
    and routes `load_inline` through `_load_inline_prebuilt`. Touches no file (a sandboxed worker
    allows writes there only afterwards); torch creates the folder when it builds."""
    global _ACTIVE
    folder = extensions_dir(source, root)
    os.environ["TORCH_EXTENSIONS_DIR"] = str(folder)
    _ACTIVE = folder
    try:
        from torch.utils import cpp_extension

        versioner = getattr(cpp_extension, "JIT_EXTENSION_VERSIONER", None)
        if versioner is not None and isinstance(getattr(versioner, "entries", None), dict):
            versioner.entries.clear()
        if not getattr(cpp_extension.load_inline, "_rescore_prebuilt", False):
            cpp_extension.load_inline = _load_inline_prebuilt(cpp_extension.load_inline)
    except ImportError:  # pragma: no cover - torch is a dependency
        pass
    return folder


_ACTIVE: Path | None = None  # the folder `activate` pointed at last
# Arguments that change no byte of the library's code: `name` only names the module (the library is
# imported under the name it was built with), the others where and how loudly it is built.
_NOT_PART_OF_THE_BUILD = {"name", "verbose", "build_directory", "keep_intermediates"}
CALLS = "calls"  # in a source's folder: one JSON per library a check worker built, named by its fingerprint
_BUILT: dict[tuple[str, str], tuple[str, str]] = {}  # (folder, fingerprint) -> (build dir, module name)


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


def _load_inline_prebuilt(original):
    """`load_inline`, importing the library already built for a call of the same content when there
    is one (the prebuild's, or one a worker built for this source: same folder, same build key, same
    fingerprint, library present); anything else builds as usual, and is remembered."""

    def load_inline(*args, **kwargs):
        library = _prebuilt_library(original, args, kwargs)
        if library is not None:
            from torch.utils import cpp_extension

            path, module_name, is_python_module = library
            return cpp_extension._import_module_from_library(module_name, str(path), is_python_module)
        result = original(*args, **kwargs)
        _remember(original, args, kwargs)
        return result

    load_inline._rescore_prebuilt = True
    load_inline.__wrapped__ = original
    return load_inline


def _built_calls(folder: Path) -> list[tuple[str, str, str]]:
    """(build dir name, fingerprint, module name) of every library recorded for this source's folder
    under the current build key: the prebuild's (`build.json`), then the workers' (`calls/`)."""
    key = build_key()
    found: list[tuple[str, str, str]] = []
    try:
        record = json.loads((folder / MARKER).read_text())
        if record.get("ok") and record.get("key") == key:
            found += [tuple(c) for c in record.get("calls") or [] if len(c) == 3]
    except (OSError, ValueError):
        pass
    for path in sorted((folder / CALLS).glob("*.json")):
        try:
            call = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if call.get("key") == key:
            found.append((call.get("name"), path.stem, call.get("module")))
    return found


def _prebuilt_library(original, args: tuple, kwargs: dict) -> tuple[Path, str, bool] | None:
    """(folder, module name, is_python_module) of an already built library for this call, or None."""
    from torch.utils import cpp_extension

    if _ACTIVE is None or not hasattr(cpp_extension, "_import_module_from_library"):
        return None
    try:
        bound = inspect.signature(original).bind(*args, **kwargs)
    except TypeError:
        return None
    if bound.arguments.get("build_directory"):
        return None
    fingerprint = call_fingerprint(original, args, kwargs)
    is_python_module = bool(bound.arguments.get("is_python_module", True))
    known = _BUILT.get((str(_ACTIVE), fingerprint))
    candidates = [known] if known else []
    candidates += [(str(_ACTIVE / d), m) for d, f, m in _built_calls(_ACTIVE) if f == fingerprint and d and m]
    for folder, module_name in candidates:
        if (Path(folder) / f"{module_name}.so").is_file():
            return Path(folder), module_name, is_python_module
    return None


def _remember(original, args: tuple, kwargs: dict) -> None:
    """Record the library `load_inline` just built in the active folder, by its fingerprint: in this
    process, and as `calls/<fingerprint>.json` for the workers after it (written whole, then renamed)."""
    from torch.utils import cpp_extension

    fingerprint = call_fingerprint(original, args, kwargs)
    try:
        bound = inspect.signature(original).bind(*args, **kwargs)
    except TypeError:
        return
    if _ACTIVE is None or fingerprint is None or bound.arguments.get("build_directory"):
        return
    name = str(bound.arguments.get("name"))
    versioner = getattr(cpp_extension, "JIT_EXTENSION_VERSIONER", None)
    version = versioner.get_version(name) if versioner is not None else None
    module_name = name if not version else f"{name}_v{version}"
    if not (_ACTIVE / name / f"{module_name}.so").is_file():
        return  # built somewhere else (TORCH_EXTENSIONS_DIR changed by the candidate): not ours to record
    _BUILT[(str(_ACTIVE), fingerprint)] = (str(_ACTIVE / name), module_name)
    try:
        folder = _ACTIVE / CALLS
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{fingerprint}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps({"name": name, "module": module_name, "key": build_key()}))
        os.replace(tmp, folder / f"{fingerprint}.json")
    except OSError:  # a read-only cache: this process still reuses it
        pass


def recorded_failure(source: str, root: str | os.PathLike | None = None) -> str | None:
    """The compiler error the prebuild recorded for this source (None: built, or never tried).

    Lets a check worker record `compile_error` without compiling a known-bad source a second time."""
    try:
        record = json.loads((extensions_dir(source, root) / MARKER).read_text())
    except (OSError, ValueError):
        return None
    if record.get("ok") or record.get("transient") or record.get("key") != build_key():
        return None
    return f"load_inline build failed (prebuild): {record.get('error') or ''}"


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


def _cached(folder: Path, key: dict) -> dict | None:
    """The recorded build of this folder, when it is still valid (same key, its library still there)."""
    try:
        record = json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return None
    if record.get("key") != key:
        return None
    if record.get("ok") and record.get("extensions") and (not any(folder.rglob("*.so")) or "calls" not in record):
        return None  # the library is gone, or an older build recorded no calls for the workers to match
    if not record.get("ok") and record.get("transient"):
        return None
    return record


def _error_text(stderr: str) -> str:
    """The exception's own line and the compiler's error lines (what a reader needs), else the tail."""
    lines = stderr.splitlines()
    raised = [ln for ln in lines if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt)\b", ln)][-1:]
    compiler = [ln for ln in lines if "error:" in ln or "error :" in ln][:40]
    text = "\n".join(raised + [ln for ln in compiler if ln not in raised]) or "\n".join(lines[-30:])
    return text[-ERROR_CHARS:]


def build_one(
    source: str, root: Path, key: dict, timeout_s: float, max_jobs: int, problem_source: str | None = None
) -> dict:
    """Import one source in a fresh process with its own TORCH_EXTENSIONS_DIR; record the outcome.
    With its problem's source, a source that builds nothing at import is also instantiated as the
    benchmark does (ModelNew(*get_init_inputs())), so a `load_inline` in `__init__` is built here,
    many at a time, rather than in the first case of a check shard."""
    folder = root / content_hash(source)
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
        error = None if ok else _error_text(proc.stderr or proc.stdout)
        if proc.returncode < 0:
            transient, error = True, f"the build process died (signal {-proc.returncode}): {error}"
        try:
            printed = json.loads(proc.stdout.strip().splitlines()[-1]) if ok else {}
        except (ValueError, IndexError, AttributeError):
            printed = {}
        extensions, calls = printed.get("extensions", []), printed.get("calls", [])
        construct_error = printed.get("construct_error")
    except subprocess.TimeoutExpired:
        ok, extensions, calls, transient, construct_error = False, [], [], True, None
        error = f"the build took longer than {timeout_s:.0f} s and was stopped"
    record = {
        "ok": ok,
        "error": error,
        "extensions": extensions,
        "calls": calls,
        "construct_error": construct_error,  # ModelNew(*get_init_inputs()) raised: the check stage says how
        "key": key,
        "transient": transient,
        "seconds": time.perf_counter() - start,
        "build_dir": str(folder),
    }
    (folder / MARKER).write_text(json.dumps(record, indent=1))
    return dict(record, status=_status(record), cached=False)


def _status(record: dict) -> str:
    if not record.get("ok"):
        return "failed"
    return "built" if record.get("extensions") else "no_build"


def prebuild(
    subs: list[Submission],
    device: str,
    root: str | os.PathLike | None = None,
    jobs: int | None = None,
    timeout_s: float = 1800.0,
) -> pd.DataFrame:
    """Build every CUDA submission's extensions (each distinct source once, `jobs` at a time).

    One row per CUDA submission: status built | no_build (imported, but it builds nothing at import:
    it will build in the check stage) | failed | skipped (no GPU); `cached` when an earlier run's
    build (or failure) was reused and nothing was compiled."""
    cuda = [s for s in subs if s.language == "cuda" and not (s.extra or {}).get("ingest_error")]
    if device != "cuda":
        return _frame(
            [
                _row(
                    s,
                    {
                        "status": "skipped",
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
    max_jobs = max(1, (os.cpu_count() or 1) // jobs)
    key = build_key()
    log.info("prebuilding %d CUDA sources (%d submissions), %d at a time, in %s", len(sources), len(cuda), jobs, folder)
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        built = pool.map(lambda src: build_one(src, folder, key, timeout_s, max_jobs, problems[src]), sources)
        results = dict(zip(sources, built))
    return _frame([_row(s, results[s.source]) for s in cuda])


def _row(sub: Submission, result: dict) -> dict:
    return {
        "submission_id": sub.submission_id,
        "name": sub.name,
        "dump": sub.dump,
        "source_hash": content_hash(sub.source),
        "status": result.get("status"),
        "ok": result.get("ok"),
        "cached": bool(result.get("cached", False)),
        "seconds": float(result.get("seconds") or 0.0),
        "error": result.get("error"),
        "extensions": ",".join(result.get("extensions") or []),
        "build_dir": result.get("build_dir"),
    }


def _frame(rows: list[dict]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=COLUMNS)
    df["ok"] = df["ok"].astype("boolean")
    return df


def write_builds(
    manifests: list[str],
    device: str,
    out: str,
    jobs: int | None = None,
    root: str | None = None,
    timeout_s: float = 1800.0,
) -> pd.DataFrame:
    """The `cuda_prebuild` rule: build the CUDA submissions of every dump, write the builds table."""
    from rescore.model.records import submission_from_dict
    from rescore.model.tables import SCHEMAS, write_parquet
    from rescore.runtime.device import resolve_device

    subs = [submission_from_dict(d) for m in manifests for d in json.loads(Path(m).read_text())]
    df = prebuild(subs, resolve_device(device), root, jobs, timeout_s)
    write_parquet(df, out, "cuda_builds" if "cuda_builds" in SCHEMAS else None)
    failed = int((df["status"] == "failed").sum())
    log.info("CUDA builds: %s", df["status"].value_counts().to_dict())
    if failed:
        log.warning("%d CUDA submissions failed to build; see %s", failed, out)
    return df


def _import_for_build(path: str, problem: str | None = None) -> None:
    """(In the build process.) Import a submission, recording the extensions its load_inline builds;
    when the import builds nothing and the problem is given, instantiate ModelNew as the benchmark
    does (seed 42, the problem's init inputs): a `load_inline` in `__init__` is built then."""
    import importlib.util

    from torch.utils import cpp_extension

    built: list[str] = []
    calls: list[list[str]] = []  # [name, fingerprint, module name] of each load_inline, for the workers
    for fn_name in ("load_inline", "load"):
        original = getattr(cpp_extension, fn_name)

        def recording(*args, _original=original, _fn_name=fn_name, **kwargs):
            name = str(kwargs.get("name", args[0] if args else "?"))
            built.append(name)
            result = _original(*args, **kwargs)
            fingerprint = call_fingerprint(_original, args, kwargs) if _fn_name == "load_inline" else None
            if fingerprint is not None:
                version = cpp_extension.JIT_EXTENSION_VERSIONER.get_version(name)
                calls.append([name, fingerprint, name if not version else f"{name}_v{version}"])
            return result

        setattr(cpp_extension, fn_name, recording)
    spec = importlib.util.spec_from_file_location(f"rescore_prebuild_{Path(path).parent.name}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path}: cannot be imported")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    construct_error = None
    if not built and problem is not None and isinstance(getattr(module, "ModelNew", None), type):
        construct_error = _construct(module.ModelNew, problem)
    print(json.dumps({"extensions": built, "calls": calls, "construct_error": construct_error}))


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


def bench(subs: list[Submission], jobs: int | None = None, timeout_s: float = 1800.0, root: str | None = None) -> dict:
    """Cold then warm prebuild of these submissions in a fresh cache: what the cache saves."""
    folder = Path(root or tempfile.mkdtemp(prefix="rescore-cuda-bench-"))
    report: dict = {
        "cache": str(folder),
        "cores": os.cpu_count(),
        "jobs": jobs or os.cpu_count(),
        "cuda_submissions": sum(s.language == "cuda" for s in subs),
        "distinct_sources": len({s.source for s in subs if s.language == "cuda"}),
    }
    for phase in ("cold", "warm"):
        start = time.perf_counter()
        df = prebuild(subs, "cuda", folder, jobs, timeout_s)
        per = df.drop_duplicates("source_hash")
        built = per[(per["status"] == "built") & ~per["cached"]]["seconds"]
        report[phase] = {
            "wall_s": round(time.perf_counter() - start, 2),
            "status": {str(k): int(v) for k, v in per["status"].value_counts().items()},
            "compiled": int((~per["cached"] & (per["status"] != "skipped")).sum()),
            "build_s_median": round(float(built.median()), 2) if len(built) else None,
            "build_s_max": round(float(built.max()), 2) if len(built) else None,
        }
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rescore.engine.cuda_build", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    one = sub.add_parser("import", help="(internal) import one submission file to build its extensions")
    one.add_argument("path")
    one.add_argument("--problem", default=None, help="the problem file: instantiate ModelNew on its init inputs")
    b = sub.add_parser("bench", help="cold vs warm prebuild time of one dump's CUDA submissions")
    b.add_argument("--config", default="config/config.yaml")
    b.add_argument("--dump", required=True, help="a dump name under `dumps:` in the config")
    b.add_argument("--jobs", type=int, default=None)
    b.add_argument("--cache", default=None, help="cache folder (default: a fresh temporary folder)")
    b.add_argument("--timeout", type=float, default=1800.0)
    args = parser.parse_args(argv)
    if args.cmd == "import":
        _import_for_build(args.path, args.problem)
        return 0
    import yaml

    from rescore.ingest import read_dump

    spec = yaml.safe_load(Path(args.config).read_text())["dumps"][args.dump]
    report = bench(read_dump(args.dump, spec), args.jobs, args.timeout, args.cache)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
