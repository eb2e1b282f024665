"""The op schema of a loaded problem module: an explicit one (corpus `entries.yaml`, a dump's op
schema) read against the module, or one inferred for a KernelBench problem that ships none; then the
relations among its sizes (worker/size_relations.py) and each input's domain with its evidence
(worker/input_domains.py).

Inference follows KernelBench's convention: sizes are module-level int literals read by `get_inputs()`
and `get_init_inputs()`. An int is a size when re-binding it changes the shape of an input or of a
parameter of `Model`; ints that change neither (a reduction axis, a flag) are left alone. A name the
module derives from another (`groups = in_channels`) is no size of its own: it follows the sizes it is
computed from (worker/problem_sizes.py).
"""

from __future__ import annotations

import types

from rescore.model.derivations import derived_names
from rescore.model.records import module_int_names
from rescore.model.schema import Dim, OpSchema
from rescore.worker.input_domains import domain_map, explicit_domains, infer_domains, input_names
from rescore.worker.problem_sizes import input_shapes, param_shapes
from rescore.worker.size_relations import infer_relations


def schema_from_spec(spec: dict, module: types.ModuleType) -> OpSchema:
    """An explicit schema (corpus `entries.yaml` or a dump's op schema) as an OpSchema (its dims;
    `build_schema` adds the relations and the input domains)."""
    dims = []
    for name, bounds in (spec.get("dims") or {}).items():
        default = int(getattr(module, name))
        if isinstance(bounds, dict):
            lo, hi = int(bounds.get("min", 1)), int(bounds.get("max", default))
        else:
            lo, hi = int(bounds[0]), int(bounds[-1])
        dims.append(Dim(name, default, lo, max(hi, lo)))
    return OpSchema(
        dims=tuple(dims),
        reduction=tuple(spec.get("reduction") or ()),
        max_elements=spec.get("max_elements"),
        inferred=False,
        family=str(spec.get("family", "")),
        linear=bool(spec.get("linear", False)),
    )


def infer_dims(module: types.ModuleType, size_names: list[str]) -> tuple[Dim, ...]:
    """The sizes of a KernelBench problem that ships no schema: the int names whose change moves a
    shape (each from 1 to twice the benchmark's own)."""
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
    return tuple(dims)


def build_schema(module: types.ModuleType, source: str, spec: dict | None) -> OpSchema:
    """The schema a problem is fuzzed with: the explicit one where the job has one, else the inferred
    one; with the names it derives from its sizes, the relations its reference needs among them and
    each input's domain (the explicit schema's where it names one)."""
    sizes = module_int_names(source)
    base = schema_from_spec(spec, module) if spec else OpSchema(dims=infer_dims(module, sizes), inferred=True)
    relations = infer_relations(module, base.dims)
    explicit = explicit_domains(spec or {}, input_names(module))
    domains = infer_domains(module, source, base.dims, relations, explicit)
    return OpSchema(
        dims=base.dims,
        reduction=base.reduction,
        domains=domain_map(domains),
        max_elements=base.max_elements,
        inferred=base.inferred,
        family=base.family,
        linear=base.linear,
        relations=relations,
        input_domains=domains,
        derived=derived_names(source, [d.name for d in base.dims]),
    )

