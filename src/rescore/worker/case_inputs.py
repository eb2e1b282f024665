"""A fuzz case's inputs: its CaseSpec (sizes, value class, layout) drawn from its strategy and seed
or taken from an explicit trigger, the inputs the problem's own factories make at those sizes and
refilled with the case's values, and the copies the candidate gets.

Every random draw is seeded by a named sub-seed of the case's seed (`get_inputs`, `fill`, `retry`,
`held`, the decoys'): renaming one changes every `inputs_hash`.
"""

from __future__ import annotations

import functools
import hashlib
import random
import types
import weakref
from dataclasses import replace

import torch

from rescore.inputs.layout import apply_layout
from rescore.inputs.relations import followers
from rescore.inputs.seeds import sub_seed
from rescore.inputs.shapes import fit_budget
from rescore.inputs.strategies import CaseSpec, get_strategy
from rescore.inputs.values import LARGE_DRAW, fill
from rescore.model.schema import OpSchema, largest_numel
from rescore.oracle.reference import seed_generators
from rescore.oracle.tolerance import torch_dtype
from rescore.worker.integrity import hash_tensor
from rescore.worker.placement import lowp
from rescore.worker.problem_sizes import DerivationFails, bound_sizes, input_shapes, inputs_on_meta


def draw(problem: types.ModuleType, schema: OpSchema, budget: int, strategy: str, seed: int, dtype: str,
         override: dict | None = None) -> CaseSpec:
    """The CaseSpec of a case: from its strategy and seed, or from an explicit trigger."""
    if override:
        sizes = dict(schema.defaults())
        sizes.update(override.get("sizes") or {})
        return CaseSpec(
            strategy,
            seed,
            override.get("dtype", dtype),
            sizes,
            override.get("values", "normal"),
            override.get("layout", "contiguous"),
        )
    numel = functools.partial(largest_input, problem)
    return get_strategy(strategy).draw(schema, dtype, seed, numel, size_budget(schema, budget))


def size_budget(schema: OpSchema, budget: int) -> int:
    """Elements of the largest input a drawn case may hold: the run's budget, or the problem's."""
    return min(budget, schema.max_elements or budget)


def largest_input(problem: types.ModuleType, sizes: dict) -> int:
    """Elements of the largest input the problem's get_inputs() makes at these sizes (0 where a name
    the problem derives from them cannot be computed: making the inputs then rejects the case)."""
    try:
        return largest_numel(input_shapes(problem, sizes))
    except DerivationFails:
        return 0


def fitted_to_budget(problem: types.ModuleType, schema: OpSchema, budget: int) -> dict | None:
    """The benchmark's sizes fitted to the fuzz budget (as a held draw fits its sizes), where the
    benchmark's largest input is past it; None where it is not (a draw may then exceed the benchmark),
    and where `shapes_on_meta` gives no shapes (inputs that cannot be made on the meta device, or not
    all floating): fitting would draw them for real at each size it tries, seconds a draw at a
    billion elements."""
    sizes, limit = dict(schema.defaults()), size_budget(schema, budget)
    if shapes_on_meta(problem, sizes) is None:
        return None
    numel = functools.partial(largest_input, problem)
    if numel(sizes) <= limit:
        return None
    return fit_budget(sizes, schema, numel, limit)


def held_draw(problem: types.ModuleType, schema: OpSchema, budget: int, strategy: str, seed: int,
              dtype: str) -> CaseSpec:
    """A strategy's draw with every size but one (chosen by the seed; the sizes it relates to follow
    it) put back to the benchmark's own, then fitted to the element budget: what is left to try once
    the reference has rejected every free draw."""
    spec = draw(problem, schema, budget, strategy, seed, dtype)
    sizes = dict(schema.defaults())
    free = sorted(set(sizes) - followers(schema.relations))
    varied = random.Random(seed).choice(free) if free else None
    if varied is not None:
        sizes[varied] = spec.sizes.get(varied, sizes[varied])
    numel = functools.partial(largest_input, problem)
    return replace(spec, sizes=fit_budget(sizes, schema, numel, size_budget(schema, budget)))


def make_inputs(problem: types.ModuleType, schema: OpSchema, device: str, spec: CaseSpec, *,
                draws: bool = False, recorded: bool = True) -> tuple[list, list]:
    """(inputs at float64 holding the dtype-rounded values, init inputs) for one case.

    Where the case's value class replaces every value `get_inputs()` makes, its shapes come from the
    meta device (`shapes_on_meta`): the problem's own random draw, thrown away, was most of a case's
    inputs (about 1.6 ms a call for 389K elements on an H100's host), and for a 2^31-element trigger
    it took about 11 s on one core. The values are exactly the draw's (the fill has its own
    generator); the init inputs are taken so only where making them draws nothing from the global
    generators (`init_without_draws`). `draws`: a call of the candidate follows with no reseed between
    (a decoy after the model was built), so the generators must advance as the problem's draw
    advances them: it then draws as it always did, a trigger past values.LARGE_DRAW elements
    excepted. `recorded` False: values no case row pins, drawn faster (`values.fill`) and returned
    at the case's dtype, not widened to float64 (a decoy's values are rounded to it before any use)."""
    tdtype = torch_dtype(spec.dtype)
    seed = sub_seed(spec.seed, "get_inputs")
    with bound_sizes(problem, spec.sizes):
        seed_generators(device, seed)
        base = shapes_on_meta(problem, spec.sizes) if spec.values != "native" else None
        init = None
        if base is not None and past_large_draw(spec, base):
            init = problem.get_init_inputs()
        elif base is not None and not draws:
            init = init_without_draws(problem, device)
        if init is None:
            seed_generators(device, seed)
            base = problem.get_inputs()
            init = problem.get_init_inputs()
    gen = torch.Generator().manual_seed(sub_seed(spec.seed, "fill"))
    inputs = []
    for i, x in enumerate(base):
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            if spec.values != "native":
                x = fill(tuple(x.shape), spec.values, gen, tdtype, schema.domains.get(i, "real"), recorded)
            x = x.to(tdtype).to(torch.float64) if recorded else x.to(tdtype)
        inputs.append(x)
    return inputs, init


def past_large_draw(spec: CaseSpec, base: list) -> bool:
    """A trigger whose largest input is past values.LARGE_DRAW elements: its shapes come from the meta
    device even where the generators' state after the draw matters. Only a trigger goes past the fuzz
    budget (2^20 elements at most)."""
    return spec.strategy == "trigger" and max(x.numel() for x in base if isinstance(x, torch.Tensor)) > LARGE_DRAW


# Problems whose `get_inputs()` cannot give its shapes on the meta device (it fails there, or makes a
# tensor that is not floating, whose values are the problem's): they draw as usual from then on.
_DRAWS_ITS_OWN: weakref.WeakSet = weakref.WeakSet()


def shapes_on_meta(problem: types.ModuleType, sizes: dict) -> list | None:
    """`get_inputs()` on the meta device (`problem_sizes.inputs_on_meta`, remembered per sizes: a case
    and its decoys ask alike) where every tensor it makes is floating (values a case's value class
    replaces); None where it makes none, another kind, or cannot run there."""
    if problem in _DRAWS_ITS_OWN:
        return None
    base = inputs_on_meta(problem, sizes)
    tensors = [x for x in base or [] if isinstance(x, torch.Tensor)]
    if not tensors or any(not x.is_floating_point() for x in tensors):
        _DRAWS_ITS_OWN.add(problem)
        return None
    return base


# Problems whose `get_init_inputs()` draws from the global generators: asked once, their later cases
# draw as usual without making the init inputs a second time.
_INIT_DRAWS: weakref.WeakSet = weakref.WeakSet()


def init_without_draws(problem: types.ModuleType, device: str) -> list | None:
    """`get_init_inputs()`, or None where it draws from the global generators (it must then see them as
    the problem's own draw leaves them)."""
    if problem in _INIT_DRAWS:
        return None
    before = generator_states(device)
    init = problem.get_init_inputs()
    if all(torch.equal(a, b) for a, b in zip(before, generator_states(device))):
        return init
    _INIT_DRAWS.add(problem)
    return None


def generator_states(device: str) -> list[torch.Tensor]:
    """The global generators' states that `seed_generators` sets: the CPU's, and the device's."""
    states = [torch.default_generator.get_state()]
    if device == "cuda":
        states += [g.get_state() for g in torch.cuda.default_generators]
    return states


def candidate_inputs(values: list, layout: str) -> list:
    """Private copies of a case's inputs for the candidate, laid out as the case says."""
    return [
        apply_layout(x.clone(), layout)
        if isinstance(x, torch.Tensor) and x.is_floating_point()
        else (x.clone() if isinstance(x, torch.Tensor) else x)
        for x in values
    ]


def decoy_values(problem: types.ModuleType, schema: OpSchema, device: str, spec: CaseSpec, tdtype: torch.dtype,
                 name: str, *, draws: bool = False) -> list:
    """Inputs of the same sizes with other values (a second draw of the case's strategy, which no row
    records); `draws` as in `make_inputs`."""
    decoy = CaseSpec(spec.strategy, sub_seed(spec.seed, name), spec.dtype, spec.sizes, spec.values, spec.layout)
    return lowp(make_inputs(problem, schema, device, decoy, draws=draws, recorded=False)[0], tdtype, device)


def refill(tensors: list, values: list) -> None:
    """Write `values` into `tensors` in place (same objects, same addresses), where shapes agree."""
    with torch.no_grad():
        for t, v in zip(tensors, values):
            if isinstance(t, torch.Tensor) and isinstance(v, torch.Tensor) and t.shape == v.shape:
                t.copy_(v)


def snapshot(xs: list) -> list:
    """Copies of a case's tensors as they are now (what the candidate must not change)."""
    return [x.detach().clone() if isinstance(x, torch.Tensor) else x for x in xs]


def inputs_hash(inputs: list) -> str:
    """A hash of the exact input values (and shapes and dtypes) of a case."""
    h = hashlib.sha256()
    for x in inputs:
        if isinstance(x, torch.Tensor):
            hash_tensor(h, x)
        else:
            h.update(repr(x).encode())
    return h.hexdigest()[:16]
