"""A problem module at other sizes: its size names re-bound for the duration of a block, with every
name the module derives from them (`groups = in_channels`) re-evaluated from its own assignment, in
source order (model/derivations.py), and the shapes its factories and its Model make there.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import types
import weakref
from pathlib import Path

import torch

from rescore.model.derivations import Assignment, following, top_level_assignments
from rescore.oracle.reference import ReferenceRejects


class DerivationFails(ReferenceRejects):
    """A name the problem derives from the varied sizes cannot be computed at them (the sizes are
    outside the problem's domain, as when its reference refuses them): the case draws again."""


@functools.lru_cache(maxsize=8)
def _assignments(name: str, file: str) -> tuple[tuple[Assignment, types.CodeType], ...]:
    """The module's top-level assignments with their compiled values (cached by the module's name,
    which is its content hash: a worker re-binds one problem's sizes thousands of times)."""
    del name  # the cache key: the module's content
    try:
        source = Path(file).read_text(encoding="utf-8", errors="surrogateescape")
    except OSError:
        return ()
    return tuple((a, compile(ast.fix_missing_locations(ast.Expression(a.value)), file, "eval"))
                 for a in top_level_assignments(source))


def derived_values(module: types.ModuleType, sizes: dict[str, int]) -> dict[str, object]:
    """The value of every name the module derives from `sizes` (with the sizes themselves), from the
    module's own assignments executed in order with the varied names bound; the names that follow
    no varied size keep their module value. Raises DerivationFails when an assignment raises."""
    file = getattr(module, "__file__", None)
    codes = dict(_assignments(module.__name__, file)) if file else {}
    namespace = dict(vars(module))
    namespace.update({name: int(value) for name, value in sizes.items()})
    moved = set(sizes)
    for assignment in following(codes, sizes):  # a varied size's drawn value stands
        code = codes[assignment]
        try:
            value = eval(code, namespace)  # noqa: S307 - the problem's own top-level expression
            bound = _unpack(assignment.targets, value)
        except Exception as exc:  # noqa: BLE001
            raise DerivationFails(f"the problem's `{assignment.text}` fails at sizes {sizes}: "
                                  f"{type(exc).__name__}: {exc}"[:300]) from exc
        namespace.update(bound)
        moved |= set(assignment.targets)
    return {name: namespace[name] for name in moved}


def _unpack(targets: tuple[str, ...], value: object) -> dict[str, object]:
    if len(targets) == 1:
        return {targets[0]: value}
    values = list(value)  # type: ignore[call-overload]
    if len(values) != len(targets):
        raise ValueError(f"{len(values)} values for {len(targets)} names")
    return dict(zip(targets, values))


@contextlib.contextmanager
def bound_sizes(module: types.ModuleType, sizes: dict[str, int]):
    """Re-bind a problem module's sizes, and the names it derives from them, for the block."""
    values = derived_values(module, sizes)
    missing = object()
    saved = {name: getattr(module, name, missing) for name in values}
    try:
        for name, value in values.items():
            setattr(module, name, value)
        yield module
    finally:
        for name, value in saved.items():
            if value is missing:
                delattr(module, name)
            else:
                setattr(module, name, value)


def inputs_at(module: types.ModuleType, sizes: dict[str, int]) -> list:
    """`get_inputs()` at these sizes on the meta device (no memory is touched); drawn for real, from
    seed 0, by a factory that cannot run on meta."""
    return _inputs_at(module, sizes)[0]


def _inputs_at(module: types.ModuleType, sizes: dict[str, int]) -> tuple[list, bool]:
    """`inputs_at`, and whether they were made on the meta device."""
    made = inputs_on_meta(module, sizes)
    if made is not None:
        return made, True
    with bound_sizes(module, sizes):
        torch.manual_seed(0)
        return list(module.get_inputs()), False


# What `get_inputs()` made on the meta device, per problem module and sizes (all integers): a case's
# draw asks for its shapes two or three times (fitting its sizes to the element budget), its inputs and
# decoys for the tensors, about 0.1-0.2 ms each, as much as a small kernel's call. Kept only where every
# item is a tensor or an immutable scalar (a list handed to the candidate could be changed by it);
# inputs made for real are not kept: their draw re-seeds torch's generator each time.
_ON_META: weakref.WeakKeyDictionary[types.ModuleType, dict[tuple, list]] = weakref.WeakKeyDictionary()
_IMMUTABLE = (torch.Tensor, int, float, bool, str, type(None))


def inputs_on_meta(module: types.ModuleType, sizes: dict) -> list | None:
    """`get_inputs()` at these sizes on the meta device; None where it cannot run there."""
    key = tuple(sorted(sizes.items())) if all(isinstance(v, int) for v in sizes.values()) else None
    known = _ON_META.setdefault(module, {})
    if key is not None and key in known:
        return list(known[key])
    with bound_sizes(module, sizes):
        try:
            with torch.device("meta"):
                made = list(module.get_inputs())
        except Exception:  # noqa: BLE001 - a factory that cannot run on meta
            return None
    if key is not None and all(isinstance(x, _IMMUTABLE) for x in made):
        known[key] = list(made)
    return made


def input_shapes(module: types.ModuleType, sizes: dict[str, int]) -> list[tuple[int, ...] | None]:
    """Shapes of `get_inputs()` at these sizes (`inputs_at`)."""
    return [tuple(t.shape) if isinstance(t, torch.Tensor) else None for t in _inputs_at(module, sizes)[0]]


def param_shapes(module: types.ModuleType, sizes: dict[str, int]) -> list[tuple[int, ...]]:
    """Shapes of the reference Model's parameters and buffers at these sizes (on the meta device)."""
    with bound_sizes(module, sizes):
        try:
            with torch.device("meta"):
                model = module.Model(*module.get_init_inputs())
        except Exception:
            return []
    return [tuple(p.shape) for p in list(model.parameters()) + list(model.buffers())]
