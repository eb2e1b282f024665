"""What a candidate used to produce its answer: its own PyTorch ops, its Triton launches, the
functions of the CUDA libraries it built, and the problem's reference. A submission that claims a
kernel but computes with PyTorch is not wrong (its answer may well be right); it is reported as its
own finding, never as a correctness bug.
"""

from __future__ import annotations

import types
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from rescore.model.builds import BuildStatus, cuda_ran
from rescore.model.outcomes import Outcome

# aten ops that allocate, copy, cast or re-view memory: they compute nothing of the answer.
MOVEMENT = frozenset(
    """
    empty empty_like empty_strided new_empty new_empty_strided zeros zeros_like new_zeros ones ones_like
    new_ones full full_like new_full fill fill_ zero zero_ copy copy_ _copy_from _copy_from_and_resize
    _to_copy to clone contiguous detach detach_ alias view _unsafe_view reshape _reshape_alias expand
    expand_as view_as t transpose transpose_ permute squeeze squeeze_ unsqueeze unsqueeze_ select slice
    as_strided as_strided_ narrow split split_with_sizes unbind lift_fresh lift _local_scalar_dense
    resize_ set_ flatten unflatten arange rand randn randint normal_ uniform_ random_ item is_nonzero
    _has_compatible_shallow_copy_type sym_size sym_stride sym_numel sym_storage_offset
    """.split()
)


class OpRecorder(TorchDispatchMode):
    """Records the names of the aten ops run while it is active (no effect on what they compute)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: A002 - torch's signature
        self.ops.add(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


class Launches:
    """Counts Triton kernel launches (compiled or interpreted), through the classes' `run`."""

    count = 0
    installed = False
    volatile = True  # its count changes on every launch: not part of the harness's snapshot

    @classmethod
    def install(cls) -> None:
        if cls.installed:
            return
        try:
            from triton.runtime.jit import JITFunction
        except ImportError:  # pragma: no cover - triton missing
            return
        classes: list[Any] = [JITFunction]
        try:
            from triton.runtime.interpreter import InterpretedFunction

            classes.append(InterpretedFunction)
        except ImportError:  # pragma: no cover
            pass
        for klass in classes:
            original = klass.run

            def run(self, *args, _original=original, **kwargs):
                if not kwargs.get("warmup"):
                    Launches.count += 1
                return _original(self, *args, **kwargs)

            klass.run = run
        cls.installed = True


class ExtensionUse:
    """The CUDA libraries of the loaded submission (`load_inline` / `load`, through `prebuilt.py`):
    how many loaded, how many of them expose what no wrapper can count, each call that raised (its
    status and error), and the calls of their functions. Reset at every load."""

    volatile = True  # changes inside candidate calls: not part of the harness's snapshot
    loaded = 0
    opaque = 0  # libraries of torch ops (is_python_module=False) or of pybind classes: their calls are not counted
    failed: list[tuple[str, str]] = []  # (BuildStatus, its error's lines: builds.error_text) of each call that raised
    calls = 0

    @classmethod
    def reset(cls) -> None:
        cls.loaded, cls.opaque, cls.failed, cls.calls = 0, 0, [], 0


def _counting(fn):
    def call(*args, **kwargs):
        ExtensionUse.calls += 1
        return fn(*args, **kwargs)

    call._rescore_counted = True
    call.__name__, call.__doc__, call.__wrapped__ = getattr(fn, "__name__", "function"), fn.__doc__, fn
    return call


def counted(library: Any) -> Any:
    """What `load_inline` / `load` returned, each of its functions counting its calls in
    `ExtensionUse.calls` (the candidate gets these wrappers, so every call it makes is seen)."""
    if not isinstance(library, types.ModuleType):  # is_python_module=False: its functions are torch ops
        ExtensionUse.opaque += 1
        return library
    ExtensionUse.loaded += 1
    for name, value in list(vars(library).items()):
        if name.startswith("_") or getattr(value, "_rescore_counted", False):
            continue
        if isinstance(value, type):
            ExtensionUse.opaque += 1  # a pybind class: its methods run uncounted
        elif callable(value):
            setattr(library, name, _counting(value))
    return library


def cuda_columns(row: dict, language: str, calls_before: int) -> dict:
    """The case row with `cuda_ran` and `cuda_build` (model/builds.py) for a CUDA submission whose
    candidate this case reached: whether a function of its libraries ran during the case (built
    and instantiated anew per case), else what stopped it (a build that failed, or a library
    nothing called; `cuda_build_error`: the failed build's error); a compile_error at load is its
    build's failure. Other rows are left as they are."""
    if language != "cuda" or row.get("outcome") == Outcome.SKIPPED:
        return row
    error = None
    if ExtensionUse.calls > calls_before:
        status = BuildStatus.BUILT
    elif ExtensionUse.failed:
        status, error = BuildStatus(ExtensionUse.failed[0][0]), ExtensionUse.failed[0][1]
    elif ExtensionUse.opaque:
        status = BuildStatus.LOADED
    elif ExtensionUse.loaded:
        status = BuildStatus.NOT_CALLED
    elif row.get("outcome") == Outcome.COMPILE_ERROR:
        status = BuildStatus.COMPILE_FAILED
    else:
        status = BuildStatus.NO_BUILD
    out = dict(row, cuda_build=status.value, cuda_ran=cuda_ran(status).value)
    if error:  # a build in the worker (at the first call, say) that the prebuild never saw: its words
        out["cuda_build_error"] = error
    return out


def compute_ops(ops: set[str]) -> set[str]:
    return {op for op in ops if op not in MOVEMENT}


def kernel_findings(language: str, reference_ops: set[str] | None, candidate_ops: set[str], launches: int) -> set[str]:
    """`torch_fallback` / `no_kernel` for one call of a submission that claims a kernel."""
    found: set[str] = set()
    if language not in ("triton", "cuda"):
        return found
    ref = compute_ops(reference_ops or set())
    if ref and ref <= compute_ops(candidate_ops):
        found.add("torch_fallback")
    if language == "triton" and launches == 0:
        found.add("no_kernel")
    return found


def _same_code(a: types.CodeType, b: types.CodeType) -> bool:
    """Same bytecode, names and constants (wherever the function was defined)."""
    if a.co_code != b.co_code or a.co_names != b.co_names or a.co_varnames != b.co_varnames:
        return False
    if len(a.co_consts) != len(b.co_consts):
        return False
    for x, y in zip(a.co_consts, b.co_consts):
        if isinstance(x, types.CodeType) and isinstance(y, types.CodeType):
            if not _same_code(x, y):
                return False
        elif type(x) is not type(y) or x != y:
            return False
    return True


def _forward_code(cls: type) -> types.CodeType | None:
    fn = cls.__dict__.get("forward")
    return getattr(fn, "__code__", None)


def reference_findings(candidate: types.ModuleType, problem: types.ModuleType) -> set[str]:
    """`inherits_reference` / `uses_reference`: how the candidate relates to the problem's Model."""
    found: set[str] = set()
    model = getattr(problem, "Model", None)
    new = getattr(candidate, "ModelNew", None)
    ref_code = _forward_code(model) if isinstance(model, type) else None
    if isinstance(new, type) and isinstance(model, type):
        for cls in new.__mro__:
            if cls is model:
                found.add("inherits_reference")
            elif cls is not new and ref_code is not None:
                code = _forward_code(cls)
                if code is not None and cls.__module__ != "torch.nn.modules.module" and _same_code(code, ref_code):
                    found.add("inherits_reference")
    found |= holds_reference(candidate, problem)
    return found


def holds_reference(candidate: types.ModuleType, problem: types.ModuleType) -> set[str]:
    """`uses_reference` when a global of the candidate is the problem module or something it defines."""
    name = problem.__name__
    for value in list(vars(candidate).values()):
        if value is problem or (
            not isinstance(value, types.ModuleType) and getattr(value, "__module__", None) == name
        ):
            return {"uses_reference"}
    return set()


def output_findings(outs: list, others: list, alias: str = "aliases_input") -> set[str]:
    """`tensor_subclass`, and `alias` when an output shares memory with one of `others` (the inputs,
    or the reference's own outputs: `reads_reference`)."""
    found: set[str] = set()
    storages = set()
    for x in others:
        if type(x) is torch.Tensor and x.device.type != "meta" and x.numel():
            try:
                storages.add(x.untyped_storage().data_ptr())
            except RuntimeError:
                pass
    for o in outs:
        if isinstance(o, torch.Tensor) and type(o) is not torch.Tensor:
            found.add("tensor_subclass")
        elif type(o) is torch.Tensor and o.device.type != "meta" and o.numel():
            try:
                if o.untyped_storage().data_ptr() in storages:
                    found.add(alias)
            except RuntimeError:
                pass
    return found
