"""Bounds checks for the Triton interpreter (CPU runs).

Under `TRITON_INTERPRET=1` a kernel's loads and stores go straight to host addresses. A kernel that
forgets a mask then reads or writes past its tensors: reads return whatever lies there, and writes
corrupt the heap, so the worker dies later (`double free or corruption`), often in another case,
and every case of that kernel costs a fresh process. On a GPU the same bug is an illegal address
(a crash) or, within the allocation's slack, silently wrong values.

`install()` wraps the interpreter's memory operations: before each masked load, store or atomic,
the active addresses are checked against the storages of the launch's tensor arguments, and an
address outside all of them raises `OutOfBounds` instead. The launch then fails like any kernel
error (a `crash` whose reason names the access), and the worker lives on.
"""

from __future__ import annotations

import numpy as np


class OutOfBounds(RuntimeError):
    """A kernel under the interpreter touched memory outside every tensor argument of its launch."""


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


def install() -> bool:
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
