"""The faster interpreter launch (runtime/interpreter.py) computes what the interpreter computed and
leaves triton.language as it found it."""

from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl
from triton.runtime import interpreter as interp

from rescore.runtime import interpreter


@triton.jit
def _twice(x):
    return x * 2


@triton.jit
def _sum_of_twice(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for _ in range(3):  # a helper called in a loop: the case the memoized scan is for
        acc += _twice(tl.load(x_ptr + offs, mask=mask, other=0.0))
    tl.store(out_ptr + offs, acc, mask=mask)


def test_a_kernel_with_a_helper_computes_the_same_and_triton_language_is_restored():
    assert interpreter.install_fast_launch() and interpreter.install_fast_launch()  # once per process, idempotent
    assert getattr(interp._patch_builtin, "_rescore_memo", False)
    names = ("load", "store", "arange", "zeros", "program_id")
    before = {n: getattr(tl, n) for n in names}
    for n in (1000, 7):
        x = torch.randn(n)
        out = torch.full((n,), float("nan"))
        _sum_of_twice[(triton.cdiv(n, 256),)](x, out, n, BLOCK=256)
        torch.testing.assert_close(out, 6 * x)
    assert {n: getattr(tl, n) for n in names} == before  # every patch undone after each launch


def test_the_memoized_dtype_table_and_the_dead_overflow_check():
    interpreter.install_fast_launch()
    assert interp._get_np_dtype(tl.float32) == np.dtype(np.float32)
    assert interp._get_np_dtype(tl.block_type(tl.float16, [4])) == np.dtype(np.float16)
    assert interp._get_np_dtype(tl.pointer_type(tl.float32)) == np.dtype(np.uint64)
    assert interp._get_np_dtype(tl.bfloat16) == np.dtype(np.uint16)  # as the interpreter stores it
    options = interp.interpreter_builder.options
    assert options.debug is False and options.sanitize_overflow is False  # it only fed a no-op assert


def test_a_scalar_held_in_a_one_element_array_indexes_as_an_int(monkeypatch):
    """Triton 3.6's interpreter did `int(self.handle.data)`, which NumPy 2.4 refuses for a 1-d array
    of one element (every `range(0, n, BLOCK)` over a runtime n failed); the compat patch squeezes."""
    class Scope:
        def set_attr(self, obj, name, value):
            setattr(obj, name, value)

    def _patch_lang_tensor(tensor, scope):  # the form of Triton 3.6
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data))

    class Tensor:
        def __init__(self, data):
            self.handle = type("Handle", (), {"data": data})()

    monkeypatch.setattr(interp, "_patch_lang_tensor", _patch_lang_tensor)
    assert interpreter.install_numpy_compat()
    interp._patch_lang_tensor(Tensor, Scope())
    assert range(0, 10, 1)[Tensor(np.array([7], dtype=np.int32))] == 7
    assert Tensor(np.array(5, dtype=np.int64)).__index__() == 5
    assert not interpreter.install_numpy_compat()  # installed once
