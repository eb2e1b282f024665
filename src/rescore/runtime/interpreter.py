"""Patches to the Triton interpreter (`TRITON_INTERPRET=1`, CPU runs): bounds checks, a faster
launch with the same semantics, and Triton 3.6's NumPy compatibility.

Each `install_*` patches `triton.runtime.interpreter` once per process, and changes nothing when
this Triton lacks the functions it expects. The check worker installs all three (`install_all`);
the static study's capture child only the last two (it records launches, it does not judge them).

**Bounds checks** (`install_bounds_checks`). Under the interpreter a kernel's loads and stores go
straight to host addresses. A kernel that forgets a mask then reads or writes past its tensors:
reads return whatever lies there, and writes corrupt the heap, so the worker dies later (`double free
or corruption`), often in another case, and every case of that kernel costs a fresh process. On a
GPU the same bug is an illegal address (a crash) or, within the allocation's slack, silently wrong
values. Before each masked load, store or atomic, the active addresses are checked against the
storages of the launch's tensor arguments, and an address outside all of them raises `OutOfBounds`
instead. The launch then fails like any kernel error (a `crash` whose reason names the access), and
the worker lives on.

**Speed** (`install_fast_launch`). Before every launch, and again on every call of a `@triton.jit`
helper inside a kernel, the interpreter re-patches `triton.language` (`_patch_lang`): it lists every
member of `tl`, `tl.tensor`, `tl.math` and the descriptor class with `inspect.getmembers` (a `dir()`,
a sort and a getattr per name) to find the builtins to wrap. Those lists never change, yet the scan
was about a third of the interpreter's time on kernels that call helpers in a loop (layernorm,
attention). The scan is made once per class or module and the (name, builtin) pairs kept. A pair is
patched only while the attribute still holds that builtin, which is exactly what the scan found:
inside a launch, where the attributes already hold the interpreter's wrappers, nothing is patched
again, as before. It keeps the Triton-to-numpy dtype of each Triton dtype: the interpreter's
`_get_np_dtype` built a 17-entry dict on each of its calls (several per operation), and the answer
never changes. It also turns off the interpreter's integer-overflow sanitizer when debug mode is
off. Every 32-bit integer add, sub and mul then also ran in int64 and compared against the int32
range, only to feed a `device_assert`, which does nothing without debug mode (the compiled path
drops the same dead ops).

**Compatibility** (`install_numpy_compat`). Under the interpreter a scalar is a one-element array,
and Triton 3.6 turns it into a Python int with `int(array)`, which NumPy refuses for an array of one
dimension (2.4.6 does; older releases only warned). Every kernel with `for i in range(0, n, BLOCK)`
over a runtime `n` then fails with "only 0-dimensional arrays can be converted to Python scalars".
On the H200 image (triton 3.6) that was 206 of the static study's 388 launch captures. Triton 3.7
squeezes the array first; this does the same for older versions.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import numpy as np


class OutOfBounds(RuntimeError):
    """A kernel under the interpreter touched memory outside every tensor argument of its launch."""


def install_all() -> None:
    """The check worker's patches, in this order: the bounds checks (an unmasked access fails its
    launch instead of corrupting the worker), Triton 3.6's loop bounds from scalar tensors under a
    recent NumPy, and the interpreter's per-launch scan of triton.language done once."""
    install_bounds_checks()
    install_numpy_compat()
    install_fast_launch()


# -- bounds checks ---------------------------------------------------------------------------------


def _collect(value, name: str, out: list[tuple[int, int, str]]) -> None:
    if isinstance(value, (tuple, list)):
        for i, v in enumerate(value):
            _collect(v, f"{name}[{i}]", out)
    elif hasattr(value, "base") and hasattr(value, "block_shape"):  # a TensorDescriptor
        _collect(value.base, name, out)
    elif hasattr(value, "untyped_storage"):
        storage = value.untyped_storage()
        if storage.nbytes():
            out.append((storage.data_ptr(), storage.data_ptr() + storage.nbytes(), name))


def _check(ranges: list[tuple[int, int, str]], kind: str, ptrs, mask, itemsize: int) -> None:
    """Raise OutOfBounds when an active address of `ptrs` lies outside every (first, end, name) range."""
    if not ranges:
        return
    addr = np.asarray(ptrs.data).astype(np.uint64, copy=False)
    if mask is not None:
        addr = addr[np.broadcast_to(np.asarray(mask.data, dtype=bool), addr.shape)]
    else:
        addr = addr.reshape(-1)
    if not addr.size:
        return
    inside = np.zeros(addr.shape, dtype=bool)
    for lo, hi, _ in ranges:
        inside |= (addr >= np.uint64(lo)) & (addr + np.uint64(itemsize) <= np.uint64(hi))
    if inside.all():
        return
    bad = addr[~inside]
    lo, hi, name = min(ranges, key=lambda r: min(abs(int(bad[0]) - r[0]), abs(int(bad[0]) - r[1])))
    where = (f"{int(bad[0]) - hi} bytes past the end of `{name}`" if int(bad[0]) >= hi
             else f"{lo - int(bad[0])} bytes before the start of `{name}`")
    raise OutOfBounds(
        f"out-of-bounds {kind}: {bad.size} of {addr.size} active addresses lie outside every tensor argument "
        f"(the first {where}); a missing or wrong mask"
    )


def install_bounds_checks() -> bool:
    """Wrap the interpreter's memory operations (once per process). False when this Triton's
    interpreter does not have the expected hooks (then nothing is checked)."""
    try:
        from triton.runtime import interpreter as interp
    except ImportError:
        return False
    builder, grid = getattr(interp, "InterpreterBuilder", None), getattr(interp, "GridExecutor", None)
    needed = ("create_masked_load", "create_masked_store", "create_atomic_rmw", "create_atomic_cas")
    if builder is None or grid is None or not all(hasattr(builder, n) for n in needed):
        return False
    if getattr(builder, "_rescore_guarded", False):
        return True
    np_dtype = interp._get_np_dtype
    init_args = grid._init_args_hst

    def _init_args_hst(self, args_dev, kwargs):
        args_hst, kwargs_hst = init_args(self, args_dev, kwargs)
        ranges: list[tuple[int, int, str]] = []
        for name, value in zip(self.arg_names, args_hst):
            _collect(value, name, ranges)
        for name, value in kwargs_hst.items():
            _collect(value, name, ranges)
        interp.interpreter_builder.rescore_ranges = ranges  # the launch in progress (one at a time)
        return args_hst, kwargs_hst

    load, store = builder.create_masked_load, builder.create_masked_store
    rmw, cas = builder.create_atomic_rmw, builder.create_atomic_cas

    def create_masked_load(self, ptrs, mask, other, *args):
        _check(self.rescore_ranges, "load", ptrs, mask, np.dtype(np_dtype(ptrs.get_element_ty())).itemsize)
        return load(self, ptrs, mask, other, *args)

    def create_masked_store(self, ptrs, value, mask, *args):
        _check(self.rescore_ranges, "store", ptrs, mask, np.asarray(value.data).dtype.itemsize)
        return store(self, ptrs, value, mask, *args)

    def create_atomic_rmw(self, op, ptr, val, mask, *args):
        _check(self.rescore_ranges, "atomic", ptr, mask, np.asarray(val.data).dtype.itemsize)
        return rmw(self, op, ptr, val, mask, *args)

    def create_atomic_cas(self, ptr, cmp, val, *args):
        _check(self.rescore_ranges, "atomic", ptr, None, np.asarray(val.data).dtype.itemsize)
        return cas(self, ptr, cmp, val, *args)

    grid._init_args_hst = _init_args_hst
    builder.create_masked_load, builder.create_masked_store = create_masked_load, create_masked_store
    builder.create_atomic_rmw, builder.create_atomic_cas = create_atomic_rmw, create_atomic_cas
    builder.rescore_ranges = []
    builder._rescore_guarded = True
    return True


# -- a faster launch -------------------------------------------------------------------------------


def install_fast_launch() -> bool:
    """Memoize the builtin scan and the dtype table, and drop the dead overflow check (once per
    process). False when this Triton's interpreter does not have the expected functions (then nothing
    changes)."""
    try:
        import triton.language as tl
        from triton.runtime import interpreter as interp
    except ImportError:
        return False
    scan, patch_attr = getattr(interp, "_patch_builtin", None), getattr(interp, "_patch_attr", None)
    if scan is None or patch_attr is None:
        return False
    if getattr(scan, "_rescore_memo", False):
        return True
    try:
        if list(inspect.signature(scan).parameters) != ["pkg", "builder", "scope"]:
            return False
    except (TypeError, ValueError):
        return False
    is_builtin = tl.core.is_builtin
    found: dict[Any, list[tuple[str, Any]]] = {}

    def _patch_builtin(pkg, builder, scope):
        pairs = found.get(pkg)
        if pairs is None:
            pairs = [(name, member) for name, member in inspect.getmembers(pkg) if is_builtin(member)]
            if not pairs:  # scanned while patched (inside a launch): scan again next time
                return
            found[pkg] = pairs
        for name, member in pairs:
            if getattr(pkg, name, None) is member:
                patch_attr(pkg, name, member, builder, scope)

    _patch_builtin._rescore_memo = True
    interp._patch_builtin = _patch_builtin
    _memoize_np_dtype(interp, tl)
    builder = getattr(interp, "interpreter_builder", None)
    options = getattr(builder, "options", None)
    if dataclasses.is_dataclass(options) and not getattr(options, "debug", True):
        if getattr(options, "sanitize_overflow", False):
            builder.options = dataclasses.replace(options, sanitize_overflow=False)
    return True


def _memoize_np_dtype(interp, tl) -> None:
    """`_get_np_dtype` answered from a table filled by the original, one scalar dtype at a time."""
    original = getattr(interp, "_get_np_dtype", None)
    if original is None or getattr(original, "_rescore_memo", False):
        return
    known: dict[Any, Any] = {}
    pointer, block = tl.pointer_type, tl.block_type

    def _get_np_dtype(tt_dtype):
        scalar = tt_dtype.element_ty if isinstance(tt_dtype, block) else tt_dtype
        if isinstance(scalar, pointer):
            return original(scalar)  # the original's first, cheap test
        answer = known.get(scalar)
        if answer is None:
            answer = known[scalar] = original(scalar)
        return answer

    _get_np_dtype._rescore_memo = True
    interp._get_np_dtype = _get_np_dtype


# -- Triton 3.6 under a recent NumPy ---------------------------------------------------------------


def _index(self) -> int:
    return int(self.handle.data.squeeze())


def install_numpy_compat() -> bool:
    """Make the interpreter's scalar `__index__` accept one-element arrays (once per process).
    False when this Triton needs nothing or has no such function (then nothing changes)."""
    try:
        from triton.runtime import interpreter as interp
    except ImportError:
        return False
    original = getattr(interp, "_patch_lang_tensor", None)
    if original is None or getattr(original, "_rescore_compat", False):
        return False
    try:
        source = inspect.getsource(original)
    except (OSError, TypeError):
        return False
    if "int(self.handle.data))" not in source:  # Triton 3.7 and later squeeze already
        return False

    def _patch_lang_tensor(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", _index)

    _patch_lang_tensor._rescore_compat = True
    interp._patch_lang_tensor = _patch_lang_tensor
    return True
