"""In the check worker: import the CUDA libraries the prebuild (or an earlier worker) compiled.

The worker calls `activate(source)` before importing a CUDA submission: a `load_inline` (or `load`)
call whose sources, functions and flags are those of a library already built for this source imports
that library directly, whatever the extension's `name` (a submission that names it after `id(self)`
asks for a new name on every instance) and wherever it asked to build it (a `build_directory` of its
own is left out: the build goes to the source's folder, `runtime/extensions.in_extensions_dir`). A
library a worker builds itself (a `load_inline` inside `__init__`, which importing alone never
reaches) is recorded in the source's folder (`calls/`), so every later instance, and every later
worker, imports it instead of building it again. Going through torch's own build instead runs ninja,
which rebuilds whenever a file looks newer than the library (a cache copied to another machine, say).

Every library `load_inline` (or `load`) returns goes back to the candidate with its functions
counting their calls, and every call that raises is recorded with what failed, the compiler or the
import (`usage.ExtensionUse`): a submission that catches a failed build and computes with PyTorch
is reported as never having run its CUDA. A call whose build the prebuild saw fail raises the
same error again without compiling it a second time.

The state (`PrebuiltState`) changes inside candidate calls (`load_inline` runs at the candidate's
import), so it lives in a `volatile` class: the harness snapshot (`integrity.py`) leaves it out
instead of resetting it after every call and recording a patch.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from rescore.model.builds import BuildStatus, exception_error
from rescore.runtime.extensions import CALLS, MARKER, build_key, call_fingerprint, extensions_dir, in_extensions_dir
from rescore.worker.usage import ExtensionUse, counted

if TYPE_CHECKING:
    from rescore.worker.turns import Turns


class PrebuiltState:
    """The folder `activate` pointed at last, and the libraries this process built or imported."""

    volatile = True  # integrity.py leaves it out of the harness snapshot: it changes inside candidate calls
    active: Path | None = None
    built: dict[tuple[str, str], tuple[str, str]] = {}  # (folder, fingerprint) -> (build dir, module name)
    turns: Turns | None = None  # the worker's (`executor.arm`): a build inside a call is the compiler's turn


@contextlib.contextmanager
def _compiler_turn() -> Iterator[None]:
    """A build or a library's import, inside a candidate's call when it comes from `forward` (a
    `load_inline` done on first use): the compiler's turn, which the call's limit does not count."""
    turns = PrebuiltState.turns
    if turns is not None:
        turns.compiling()
    try:
        yield
    finally:
        if turns is not None:
            turns.compiled()


def activate(source: str, root: str | os.PathLike | None = None) -> Path:
    """Point torch's JIT builds at this source's folder before importing a CUDA submission.

    Also forgets the extension names earlier submissions in this process loaded: torch would
    otherwise rename a reused name to `<name>_v1` and build it again, outside the prebuilt folder;
    and routes `load_inline` and `load` through `_prebuilt`. Touches no file (a sandboxed worker
    allows writes there only afterwards); torch creates the folder when it builds."""
    folder = extensions_dir(source, root)
    os.environ["TORCH_EXTENSIONS_DIR"] = str(folder)
    PrebuiltState.active = folder
    try:
        from torch.utils import cpp_extension

        versioner = getattr(cpp_extension, "JIT_EXTENSION_VERSIONER", None)
        if versioner is not None and isinstance(getattr(versioner, "entries", None), dict):
            versioner.entries.clear()
        for name in ("load_inline", "load"):
            if not getattr(getattr(cpp_extension, name), "_rescore_prebuilt", False):
                setattr(cpp_extension, name, _prebuilt(getattr(cpp_extension, name)))
    except ImportError:  # pragma: no cover - torch is a dependency
        pass
    return folder


def _prebuilt(original):
    """`load_inline` or `load`, importing the library already built for a call of the same content
    when there is one (the prebuild's, or one a worker built for this source: same folder, same build
    key, same fingerprint, library present); anything else builds as usual, in the source's folder
    (`in_extensions_dir`), and is remembered."""

    def load_prebuilt(*args, **kwargs):
        args, kwargs = in_extensions_dir(original, args, kwargs)
        failed = _failed_build(original, args, kwargs)
        if failed is not None:
            ExtensionUse.failed.append((BuildStatus.COMPILE_FAILED.value, failed))
            raise RuntimeError(failed)
        library = _prebuilt_library(original, args, kwargs)
        if library is not None:
            from torch.utils import cpp_extension

            path, module_name, is_python_module = library
            try:
                with _compiler_turn():
                    module = cpp_extension._import_module_from_library(module_name, str(path), is_python_module)
                return counted(module)
            except Exception as exc:
                ExtensionUse.failed.append((BuildStatus.LOAD_FAILED.value, exception_error(exc)))
                raise
        result = _recorded(original, args, kwargs)
        _remember(original, args, kwargs)
        return counted(result)

    load_prebuilt._rescore_prebuilt = True
    load_prebuilt.__wrapped__ = original
    return load_prebuilt


def _recorded(original, args: tuple, kwargs: dict):
    """Call torch's `load_inline` / `load`; a failure is recorded as the compiler's or the import's
    (its library was built: the import failed), then raised to the candidate as torch raised it."""
    try:
        with _compiler_turn():
            return original(*args, **kwargs)
    except Exception as exc:
        ExtensionUse.failed.append((_failed_stage(original, args, kwargs).value, exception_error(exc)))
        raise


def _failed_stage(original, args: tuple, kwargs: dict) -> BuildStatus:
    """compile_failed, or load_failed when the call's build folder holds a library (it compiled)."""
    try:
        bound = inspect.signature(original).bind(*args, **kwargs)
    except TypeError:
        return BuildStatus.COMPILE_FAILED
    folder = os.environ.get("TORCH_EXTENSIONS_DIR")  # where every call builds (`in_extensions_dir`)
    where = Path(folder) / str(bound.arguments.get("name")) if folder else None
    return BuildStatus.LOAD_FAILED if where and any(where.glob("*.so")) else BuildStatus.COMPILE_FAILED


def _failed_build(original, args: tuple, kwargs: dict) -> str | None:
    """The error of this call's build when the prebuild saw it fail to compile (same folder, same
    build key, same fingerprint), as torch words it; None otherwise."""
    active = PrebuiltState.active
    if active is None:
        return None
    try:
        record = json.loads((active / MARKER).read_text())
    except (OSError, ValueError):
        return None
    if record.get("key") != build_key():
        return None
    fingerprint = call_fingerprint(original, args, kwargs)
    for name, printed, stage, error in [f for f in record.get("failures") or [] if len(f) == 4]:
        if fingerprint is not None and printed == fingerprint and stage == BuildStatus.COMPILE_FAILED:
            return f"Error building extension '{name}' (rescore's prebuild; not compiled again): {error}"
    return None


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

    active = PrebuiltState.active
    if active is None or not hasattr(cpp_extension, "_import_module_from_library"):
        return None
    try:
        bound = inspect.signature(original).bind(*args, **kwargs)
    except TypeError:
        return None
    fingerprint = call_fingerprint(original, args, kwargs)
    is_python_module = bool(bound.arguments.get("is_python_module", True))
    known = PrebuiltState.built.get((str(active), fingerprint))
    candidates = [known] if known else []
    candidates += [(str(active / d), m) for d, f, m in _built_calls(active) if f == fingerprint and d and m]
    for folder, module_name in candidates:
        if (Path(folder) / f"{module_name}.so").is_file():
            return Path(folder), module_name, is_python_module
    return None


def _remember(original, args: tuple, kwargs: dict) -> None:
    """Record the library a `load_inline` or `load` just built in the active folder, by its fingerprint: in this
    process, and as `calls/<fingerprint>.json` for the workers after it (written whole, then renamed)."""
    from torch.utils import cpp_extension

    fingerprint = call_fingerprint(original, args, kwargs)
    try:
        bound = inspect.signature(original).bind(*args, **kwargs)
    except TypeError:
        return
    active = PrebuiltState.active
    if active is None or fingerprint is None:
        return
    name = str(bound.arguments.get("name"))
    versioner = getattr(cpp_extension, "JIT_EXTENSION_VERSIONER", None)
    version = versioner.get_version(name) if versioner is not None else None
    module_name = name if not version else f"{name}_v{version}"
    if not (active / name / f"{module_name}.so").is_file():
        return  # built somewhere else (TORCH_EXTENSIONS_DIR changed by the candidate): not ours to record
    PrebuiltState.built[(str(active), fingerprint)] = (str(active / name), module_name)
    try:
        folder = active / CALLS
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
