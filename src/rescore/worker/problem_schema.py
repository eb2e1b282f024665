"""The op schema of a loaded problem module: an explicit one (corpus `entries.yaml`, a dump's op
schema) read against the module, or one inferred for a KernelBench problem that ships none.

Inference follows KernelBench's convention: sizes are module-level ints read by `get_inputs()` and
`get_init_inputs()`. An int is a size when re-binding it changes the shape of an input or of a
parameter of `Model`; ints that change neither (a reduction axis, a flag) are left alone.
"""

from __future__ import annotations

import contextlib
import inspect
import types

import torch

from rescore.model.schema import Dim, OpSchema


@contextlib.contextmanager
def bound_sizes(module: types.ModuleType, sizes: dict[str, int]):
    """Re-bind a problem module's size ints for the duration of the block."""
    saved = {name: getattr(module, name) for name in sizes if hasattr(module, name)}
    try:
        for name, value in sizes.items():
            setattr(module, name, int(value))
        yield module
    finally:
        for name, value in saved.items():
            setattr(module, name, value)


def input_shapes(module: types.ModuleType, sizes: dict[str, int]) -> list[tuple[int, ...] | None]:
    """Shapes of `get_inputs()` at these sizes, computed on the meta device (no memory is touched)."""
    with bound_sizes(module, sizes):
        try:
            with torch.device("meta"):
                inputs = module.get_inputs()
        except Exception:
            torch.manual_seed(0)
            inputs = module.get_inputs()
    return [tuple(t.shape) if isinstance(t, torch.Tensor) else None for t in inputs]


def param_shapes(module: types.ModuleType, sizes: dict[str, int]) -> list[tuple[int, ...]]:
    """Shapes of the reference Model's parameters and buffers at these sizes (on the meta device)."""
    with bound_sizes(module, sizes):
        try:
            with torch.device("meta"):
                model = module.Model(*module.get_init_inputs())
        except Exception:
            return []
    return [tuple(p.shape) for p in list(model.parameters()) + list(model.buffers())]


def schema_from_spec(spec: dict, size_names: list[str], module: types.ModuleType) -> OpSchema:
    """An explicit schema (corpus `entries.yaml` or a dump's op schema) as an OpSchema."""
    dims = []
    for name, bounds in (spec.get("dims") or {}).items():
        default = int(getattr(module, name))
        if isinstance(bounds, dict):
            lo, hi = int(bounds.get("min", 1)), int(bounds.get("max", default))
        else:
            lo, hi = int(bounds[0]), int(bounds[-1])
        dims.append(Dim(name, default, lo, max(hi, lo)))
    domains = {}
    names = _input_names(module)
    for key, value in (spec.get("inputs") or {}).items():
        domain = value.get("domain", "real") if isinstance(value, dict) else str(value)
        index = names.index(key) if key in names else int(key) if str(key).isdigit() else None
        if index is not None:
            domains[index] = domain
    return OpSchema(
        dims=tuple(dims),
        reduction=tuple(spec.get("reduction") or ()),
        domains=domains,
        max_elements=spec.get("max_elements"),
        inferred=False,
        family=str(spec.get("family", "")),
        linear=bool(spec.get("linear", False)),
    )


def infer_schema(module: types.ModuleType, size_names: list[str]) -> OpSchema:
    """Infer the sizes of a KernelBench problem that ships no schema."""
    base = {name: int(getattr(module, name)) for name in size_names if isinstance(getattr(module, name, None), int)}
    base_inputs = input_shapes(module, base)
    base_params = param_shapes(module, base)
    dims = []
    for name, value in base.items():
        if value < 1:
            continue
        probe = dict(base, **{name: value + 1})
        try:
            changed = input_shapes(module, probe) != base_inputs or param_shapes(module, probe) != base_params
        except Exception:
            changed = False
        if changed:
            dims.append(Dim(name, value, 1, max(2 * value, 2)))
    torch.manual_seed(0)
    with bound_sizes(module, base):
        sample = module.get_inputs()
    domains = {}
    for i, t in enumerate(sample):
        if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel() and bool((t >= 0).all()):
            domains[i] = "unit" if bool((t <= 1).all()) else "positive"
    return OpSchema(dims=tuple(dims), domains=domains, inferred=True)


def _input_names(module: types.ModuleType) -> list[str]:
    """Parameter names of Model.forward, in order (so a schema can name inputs)."""
    try:
        params = list(inspect.signature(module.Model.forward).parameters)
    except (TypeError, ValueError, AttributeError):
        return []
    return [p for p in params if p != "self"]
