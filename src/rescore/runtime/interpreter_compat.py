"""Triton 3.6's interpreter under a recent NumPy: a loop bound held in a scalar tensor breaks.

Under the interpreter a scalar is a one-element array, and Triton 3.6 turns it into a Python int
with `int(array)`, which NumPy refuses for an array of one dimension (2.4.6 does; older releases
only warned). Every kernel with `for i in range(0, n, BLOCK)` over a runtime `n` then fails with
"only 0-dimensional arrays can be converted to Python scalars". On the H200 image (triton 3.6)
that was 206 of the static study's 388 launch captures. Triton 3.7 squeezes the array first; this
does the same for older versions.
"""

from __future__ import annotations

import inspect


def _index(self) -> int:
    return int(self.handle.data.squeeze())


def install() -> bool:
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
