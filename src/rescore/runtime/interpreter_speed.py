"""A faster Triton interpreter launch (CPU runs), with the same semantics.

Before every launch, and again on every call of a `@triton.jit` helper inside a kernel, the
interpreter re-patches `triton.language` (`_patch_lang`): it lists every member of `tl`,
`tl.tensor`, `tl.math` and the descriptor class with `inspect.getmembers` (a `dir()`, a sort and
a getattr per name) to find the builtins to wrap. Those lists never change, yet the scan was about a
third of the interpreter's time on kernels that call helpers in a loop (layernorm, attention).

`install()` makes the scan once per class or module and keeps the (name, builtin) pairs. A pair is
patched only while the attribute still holds that builtin, which is exactly what the scan found:
inside a launch, where the attributes already hold the interpreter's wrappers, nothing is patched
again, as before.

It keeps the Triton-to-numpy dtype of each Triton dtype: the interpreter's `_get_np_dtype` built a
17-entry dict on each of its calls (several per operation), and the answer never changes.

It also turns off the interpreter's integer-overflow sanitizer when debug mode is off. Every 32-bit
integer add, sub and mul then also ran in int64 and compared against the int32 range, only to feed a
`device_assert`, which does nothing without debug mode (the compiled path drops the same dead ops).
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any


def install() -> bool:
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
