"""Keeps the harness honest while candidate code shares its process: snapshots of the functions and
state the judging relies on, taken before the candidate loads, compared and restored after every
call into it.

A candidate that patches `torch.allclose`, replaces a rescore function through `sys.modules`, turns
off the NaN fill of fresh memory or re-binds the problem's sizes is undone before anything is judged,
and the change is reported (a finding). Only identities are compared (cheap: a few thousand dict
lookups per call, and only in the namespaces whose dict's version tag moved: `dict_versions.py`),
plus deep copies of the rescore modules' own tables (tolerances, profiles).
"""

from __future__ import annotations

import builtins
import copy
import copyreg
import hashlib
import json
import math
import operator
import os
import pickle
import sys
import traceback
import types
from typing import Any

import numpy
import torch

from rescore.worker.dict_versions import tag_of
from rescore.worker.placement import to_host

_MISSING = object()
_CACHES = frozenset({"__slotnames__"})  # added to classes by copyreg when they are first pickled


def _spaces_of_harness() -> list[tuple[str, Any, bool]]:
    """(label, namespace, strict) for every namespace the harness's judging depends on.

    Strict namespaces (classes, rescore modules) count an added attribute as a patch, since it can
    shadow an inherited method or a builtin; library modules gain attributes legitimately (lazy
    submodules), so there only changed and deleted attributes count."""
    import multiprocessing.connection as mpc
    import multiprocessing.reduction as mpr

    import numpy

    spaces: list[tuple[str, Any, bool]] = [
        ("torch", torch, False),
        ("torch.Tensor", torch.Tensor, True),
        ("torch.nn.Module", torch.nn.Module, True),
        ("torch.nn.functional", torch.nn.functional, False),
        ("torch.testing", torch.testing, False),
        ("torch.linalg", torch.linalg, False),
        ("torch.cuda", torch.cuda, False),
        ("numpy", numpy, False),
        ("builtins", builtins, False),
        ("math", math, False),
        ("json", json, False),
        ("hashlib", hashlib, False),
        ("copy", copy, False),
        ("pickle", pickle, False),
        ("copyreg", copyreg, False),
        ("os", os, False),
        ("os.path", os.path, False),
        ("traceback", traceback, False),
        ("multiprocessing.connection", mpc, False),
        ("multiprocessing.connection.Connection", mpc.Connection, True),
        ("multiprocessing.reduction", mpr, False),
    ]
    try:
        import torch.testing._comparison as cmp

        spaces.append(("torch.testing._comparison", cmp, False))
    except ImportError:  # pragma: no cover
        pass
    for name, module in sorted(sys.modules.items()):
        if module is None or not (name == "rescore" or name.startswith("rescore.")):
            continue
        spaces.append((name, module, True))
        for attr, value in vars(module).items():
            if isinstance(value, type) and value.__module__ == name and not value.__dict__.get("volatile"):
                spaces.append((f"{name}.{attr}", value, True))
    return spaces


def _ns(obj: Any) -> dict:
    return obj.__dict__ if isinstance(obj, type) else vars(obj)


def _set(obj: Any, name: str, value: Any) -> None:
    if value is _MISSING:
        try:
            delattr(obj, name)
        except (AttributeError, TypeError):
            pass
    else:
        try:
            setattr(obj, name, value)
        except (AttributeError, TypeError):
            object.__setattr__(obj, name, value)


class Snapshot:
    """Attribute identities of some namespaces, and deep copies of the plain tables among them."""

    def __init__(self, spaces: list[tuple[str, Any, bool]], deep: bool = False):
        self.spaces = [(label, obj, strict, dict(_ns(obj))) for label, obj, strict in spaces]
        # Each namespace as at the last look: the fast path of `restore` (what the snapshot allows),
        # and faster still, its dict's version tag then (None where tags are not read).
        self.fast = [(tuple(saved), tuple(saved.values())) for _, _, _, saved in self.spaces]
        self.tags = [tag_of(_ns(obj)) for _, obj, _, _ in self.spaces]
        self.tables: list[tuple[str, Any, Any]] = []
        self.objects: list[tuple[str, Any, dict]] = []
        if deep:
            for label, obj, _, saved in self.spaces:
                if not isinstance(obj, types.ModuleType) or not label.startswith("rescore"):
                    continue
                for name, value in saved.items():
                    if isinstance(value, (dict, list, set)) and not name.startswith("__"):
                        try:
                            self.tables.append((f"{label}.{name}", value, copy.deepcopy(value)))
                        except Exception:  # noqa: BLE001 - an uncopyable table is only identity-checked
                            pass
                    elif _is_plain_instance(value):
                        self.objects.append((f"{label}.{name}", value, dict(vars(value))))

    def restore(self) -> list[str]:
        """Put back every changed attribute; returns their names (empty when nothing changed)."""
        changed: list[str] = []
        for i, ((label, obj, strict, saved), (keys, values), tag) in enumerate(zip(self.spaces, self.fast, self.tags)):
            if tag is not None and tag.unchanged():
                continue  # not touched since the last look
            version = tag.now() if tag is not None else None  # read first: a change from here on moves it again
            current = _ns(obj)
            if tuple(current) == keys and all(map(operator.is_, current.values(), values)):
                if tag is not None:
                    tag.seen = version  # changed and changed back (or set to the same object)
                continue  # as at the last look (compared in C: same names in the same order, same objects)
            for name, value in saved.items():
                if current.get(name, _MISSING) is not value:
                    changed.append(f"{label}.{name}")
                    _set(obj, name, value)
            if strict:
                for name in [n for n in list(current) if n not in saved and n not in _CACHES]:
                    if not isinstance(current[name], types.ModuleType):
                        changed.append(f"{label}.{name}")
                        _set(obj, name, _MISSING)
            if _as_saved(current, saved, strict):
                # What differs from the snapshot now is allowed (a library module's new attribute, a
                # class's pickling cache, an order changed by a restore): the next look compares with
                # this, and anything else that changes still sends it through the full comparison.
                self.fast[i] = (tuple(current), tuple(current.values()))
                if tag is not None:
                    tag.seen = tag.now()  # after the restore's own writes
        for label, table, saved in self.tables:
            try:
                same = bool(table == saved)
            except Exception:  # noqa: BLE001
                same = False
            if not same:
                changed.append(label)
                _refill(table, copy.deepcopy(saved))
        for label, obj, saved in self.objects:
            current = vars(obj)
            if current.keys() != saved.keys() or any(current[k] is not v for k, v in saved.items()):
                changed.append(label)
                current.clear()
                current.update(saved)
        return changed


def _as_saved(current: Any, saved: dict, strict: bool) -> bool:
    """Whether a namespace holds every saved attribute as saved (and, when strict, nothing else that
    counts): the state `Snapshot.restore` leaves when its restore took."""
    if any(current.get(name, _MISSING) is not value for name, value in saved.items()):
        return False
    return not strict or all(
        n in saved or n in _CACHES or isinstance(v, types.ModuleType) for n, v in current.items())


def _is_plain_instance(value: Any) -> bool:
    return (
        hasattr(value, "__dict__")
        and not isinstance(value, (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType))
        and type(value).__module__.startswith("rescore")
    )


def _refill(table: Any, saved: Any) -> None:
    if isinstance(table, dict):
        table.clear()
        table.update(saved)
    elif isinstance(table, list):
        table[:] = saved
    elif isinstance(table, set):
        table.clear()
        table.update(saved)


UNREADABLE = "unreadable"  # a float32 matmul precision torch refuses to report (see _matmul_precision)


def _matmul_precision() -> str:
    """torch's float32 matmul precision; UNREADABLE where torch refuses to report it, after a mix of
    the legacy TF32 flags and the per-backend settings (restored to the harness's like any change)."""
    try:
        return torch.get_float32_matmul_precision()
    except RuntimeError:
        return UNREADABLE


def torch_state() -> dict[str, Any]:
    """The global torch state the harness restores after every call into candidate code, by name."""
    from torch.utils import deterministic

    return {
        "deterministic": (
            torch.are_deterministic_algorithms_enabled(),
            torch.is_deterministic_algorithms_warn_only_enabled(),
        ),
        "fill_uninitialized_memory": deterministic.fill_uninitialized_memory,
        "default_dtype": torch.get_default_dtype(),
        "default_device": str(torch.get_default_device()),
        "num_threads": torch.get_num_threads(),
        "float32_matmul_precision": _matmul_precision(),
        "cuda_matmul_tf32": torch.backends.cuda.matmul.allow_tf32,
        "cuda_matmul_reduced": (
            torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
            torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
        ),
        "cudnn": (
            torch.backends.cudnn.enabled,
            torch.backends.cudnn.allow_tf32,
            torch.backends.cudnn.deterministic,
            torch.backends.cudnn.benchmark,
        ),
        "torch_function_modes": torch._C._len_torch_function_stack(),
        "torch_dispatch_modes": torch._C._len_torch_dispatch_stack(),
        "sys.settrace": sys.gettrace(),
        "sys.setprofile": sys.getprofile(),
    }


def _put_torch_state(name: str, value: Any) -> None:
    from torch.utils import deterministic

    if name == "deterministic":
        torch.use_deterministic_algorithms(value[0], warn_only=value[1])
    elif name == "fill_uninitialized_memory":
        deterministic.fill_uninitialized_memory = value
    elif name == "default_dtype":
        torch.set_default_dtype(value)
    elif name == "default_device":
        torch.set_default_device(None if value == "cpu" else value)
    elif name == "num_threads":
        torch.set_num_threads(value)
    elif name == "float32_matmul_precision":
        torch.set_float32_matmul_precision(value)
    elif name == "cuda_matmul_tf32":
        torch.backends.cuda.matmul.allow_tf32 = value
    elif name == "cuda_matmul_reduced":
        m = torch.backends.cuda.matmul
        m.allow_fp16_reduced_precision_reduction, m.allow_bf16_reduced_precision_reduction = value
    elif name == "cudnn":
        b = torch.backends.cudnn
        b.enabled, b.allow_tf32, b.deterministic, b.benchmark = value
    elif name == "torch_function_modes":
        while torch._C._len_torch_function_stack() > value:
            torch._C._pop_torch_function_stack()
    elif name == "torch_dispatch_modes":
        from torch.utils._python_dispatch import _pop_mode

        while torch._C._len_torch_dispatch_stack() > value:
            _pop_mode()
    elif name == "sys.settrace":
        sys.settrace(value)
    elif name == "sys.setprofile":
        sys.setprofile(value)


# The order `Harness.put` writes numerics flags in: the legacy TF32 flags before the precision that
# would otherwise override them.
_PUT_ORDER = ("cuda_matmul_tf32", "cuda_matmul_reduced", "cudnn", "float32_matmul_precision")


class Harness:
    """The harness's namespaces and global torch state, as they were before any candidate loaded."""

    def __init__(self) -> None:
        self.snapshot = Snapshot(_spaces_of_harness(), deep=True)
        self.state = torch_state()
        self.modules = {n: m for n, m in sys.modules.items() if m is not None and _harness_module(n)}

    def put(self, values: dict[str, Any]) -> bool:
        """Set global torch state by name (a submission's own numerics flags, before its call); False,
        with the harness's state back, when torch does not end in exactly that state. torch keeps the
        float32 matmul precision both as the legacy TF32 flags and as per-backend settings, and
        refuses to read it back after some orders of writes: the flags are tried first, then the
        precision, and the other way round."""
        names = [n for n in _PUT_ORDER if n in values] + [n for n in values if n not in _PUT_ORDER]
        for order in (names, names[::-1]):
            for name in order:
                try:
                    _put_torch_state(name, values[name])
                except Exception:  # noqa: BLE001 - judged by reading the state back
                    pass
            now = torch_state()
            if all(now[name] == value for name, value in values.items()):
                return True
        self.restore()
        return False

    def restore(self, now: dict[str, Any] | None = None) -> list[str]:
        """Undo whatever a candidate changed; returns what it had changed. `now`: the global torch
        state as just read (`torch_state`), else read here."""
        changed = []
        now = torch_state() if now is None else now
        for name, value in self.state.items():
            if now[name] is not value and now[name] != value:
                changed.append(name)
                try:
                    _put_torch_state(name, value)
                except Exception:  # noqa: BLE001 - best effort; the finding is recorded anyway
                    pass
        for name, module in self.modules.items():
            if sys.modules.get(name) is not module:
                changed.append(f"sys.modules[{name!r}]")
                sys.modules[name] = module
        return changed + self.snapshot.restore()


_HARNESS_ROOTS = ("rescore", "torch", "numpy", "triton", "multiprocessing", "pickle", "copyreg")


def _harness_module(name: str) -> bool:
    parts = name.split(".")
    return parts[0] in _HARNESS_ROOTS and (parts[0] == "rescore" or len(parts) <= 2)


def problem_snapshot(problem: types.ModuleType) -> Snapshot:
    """The problem module's globals and the classes it defines (its Model), before a candidate call."""
    spaces: list[tuple[str, Any, bool]] = [(problem.__name__, problem, True)]
    for attr, value in vars(problem).items():
        if isinstance(value, type) and value.__module__ == problem.__name__:
            spaces.append((f"{problem.__name__}.{attr}", value, True))
    return Snapshot(spaces)


def tensor_buffer(t: torch.Tensor):
    """The values of a tensor as a flat uint8 numpy array in row-major order, whatever its strides
    (a view of a dense CPU tensor: no copy; hashlib reads it as a buffer)."""
    flat = t.detach().cpu().reshape(-1)  # a view when the tensor is dense, else a copy
    if flat.stride(0) != 1:  # a one-element tensor keeps any stride, and a byte view needs 1
        flat = flat.clone(memory_format=torch.contiguous_format)
    return flat.view(torch.uint8).numpy()


# Tensors past this size are hashed in chunks on all cores (hashlib lets go of the GIL): a 2^31-element
# trigger holds 16 GiB at float64, a minute of hashing on one core. Below it, one plain hash.
HASH_CHUNK_BYTES = 1 << 26


def hash_tensor(h, t: torch.Tensor) -> None:
    """Feed a tensor's shape, dtype and bytes to hash object `h`. Past HASH_CHUNK_BYTES the bytes go
    in as the digests of fixed 64 MiB chunks (the same algorithm), so the result does not depend on
    the number of threads."""
    h.update(f"{tuple(t.shape)}{t.dtype}".encode())
    if not t.numel():
        return
    buf = tensor_buffer(t)
    if buf.nbytes <= HASH_CHUNK_BYTES:
        h.update(buf)
        return
    from concurrent.futures import ThreadPoolExecutor

    def one(start: int) -> bytes:
        return hashlib.new(h.name, buf[start : start + HASH_CHUNK_BYTES]).digest()

    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        h.update(b"".join(pool.map(one, range(0, buf.nbytes, HASH_CHUNK_BYTES))))


def digest(tensors: list | None) -> str:
    """A hash of the devices, shapes, dtypes and bytes of some tensors (what `seal` keeps past
    SEAL_COPY_BYTES), the GPU's copied to the host with one wait for all."""
    tensors = [t for t in tensors or [] if isinstance(t, torch.Tensor)]
    h = hashlib.sha256()  # twice blake2b's speed where the CPU has SHA instructions (x86 since 2017)
    for t, host in zip(tensors, to_host(tensors)):
        h.update(str(t.device).encode())
        hash_tensor(h, host)
    return h.hexdigest()


# Up to this many bytes `seal` keeps a copy of the tensors' bytes; past it, a digest of them (a
# 2^31-element trigger's inputs hold 16 GiB at float64).
SEAL_COPY_BYTES = 1 << 26


def seal(tensors: list | None) -> tuple | str:
    """What the candidate must not change (the harness's copies of a case's inputs, the reference's
    outputs), taken before it runs so that a write into it shows after (`broken`): each tensor's
    device, shape, dtype and bytes up to SEAL_COPY_BYTES in all, else their `digest`. A copy and a
    comparison cost a fifth of SHA-256 over the same bytes. Immutable, and held by the caller only:
    copies as tensors, or any object that holds them, would be found and overwritten by the very walk
    of `gc.get_objects()` that overwrites the inputs."""
    tensors = [t for t in tensors or [] if isinstance(t, torch.Tensor)]
    if sum(t.numel() * t.element_size() for t in tensors) > SEAL_COPY_BYTES:
        return digest(tensors)
    return tuple((*_identity(t), tensor_buffer(h).tobytes()) for t, h in zip(tensors, to_host(tensors)))


def _identity(t: torch.Tensor) -> tuple[str, tuple, str]:
    """What a seal keeps of a tensor besides its bytes: its device, shape and dtype."""
    return str(t.device), tuple(t.shape), str(t.dtype)


def broken(tensors: list | None, sealed: tuple | str) -> bool:
    """Whether any of the tensors now holds other bytes, or another shape or dtype, than `seal` saw.
    Bytes kept by `seal` are compared in place, not copied again (a copy of a benchmark-sized case's
    12 MB of inputs took longer than the comparison, in fresh memory)."""
    if isinstance(sealed, str):
        return digest(tensors) != sealed
    tensors = [t for t in tensors or [] if isinstance(t, torch.Tensor)]
    return len(tensors) != len(sealed) or any(
        _identity(t) != kept[:3] or not _same_bytes(tensor_buffer(h), kept[3])
        for t, h, kept in zip(tensors, to_host(tensors), sealed))


def _same_bytes(buf: numpy.ndarray, kept: bytes) -> bool:
    """Whether a tensor's bytes (`tensor_buffer`) are `kept`, compared in 8-byte words where they divide."""
    if buf.nbytes != len(kept):
        return False
    word = numpy.uint64 if buf.nbytes % 8 == 0 else numpy.uint8
    return bool(numpy.array_equal(buf.view(word), numpy.frombuffer(kept, dtype=word)))
