"""The value domain of each input a problem makes, and where it came from, most certain first:

1. `schema`: the explicit op schema names it (corpus `entries.yaml`; a gpuemu entry, whose inputs
   are real-valued unless its op schema names a domain);
2. `source`: the interval `get_inputs()`'s own expression bounds its values to (inputs/domains.py):
   `torch.randn` is real, `torch.rand` is in [0, 1), `.abs()` is from 0;
3. `sampled`: `get_inputs()` drawn over SAMPLE_SEEDS seeds at sizes grown until each input holds at
   least MIN_SIGN_ELEMENTS elements over them: restricted only when no draw held a negative value;
4. `default`: real, where nothing above could tell (a draw too small to show a sign restricts nothing).

An input is filled as |x| (`positive`) or in [0, 1) (`unit`) only on such evidence: a one-element
draw that happened to be positive once restricted a kernel's fuzzing to the half of its domain where
its bug could not show.
"""

from __future__ import annotations

import inspect
import types

import torch

from rescore.inputs.domains import describe, domain_of, source_intervals
from rescore.inputs.relations import satisfy
from rescore.inputs.shapes import fit_budget
from rescore.model.schema import Dim, InputDomain, OpSchema, Relation
from rescore.worker.problem_sizes import bound_sizes, inputs_at

SAMPLE_SEEDS = 4
MIN_SIGN_ELEMENTS = 4096  # elements of one input over all sampled seeds before its sign is trusted
SAMPLE_CAP = 1 << 20  # elements of the largest input of a sample (sizes shrink to it)


def input_names(module: types.ModuleType) -> list[str]:
    """Parameter names of Model.forward, in order (so a schema can name inputs)."""
    try:
        params = list(inspect.signature(module.Model.forward).parameters)
    except (TypeError, ValueError, AttributeError):
        return []
    return [p for p in params if p != "self"]


def infer_domains(module: types.ModuleType, source: str, dims: tuple[Dim, ...], relations: tuple[Relation, ...],
                  explicit: dict[int, tuple[str, str]]) -> tuple[InputDomain, ...]:
    """Each input's domain with its evidence (see the module's docstring). `explicit`: input
    position -> (domain, why) from the op schema."""
    defaults = {d.name: d.default for d in dims}
    floating = _floating(module, defaults)
    names = input_names(module)
    constants = {k: v for k, v in vars(module).items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    read = source_intervals(source, constants) or []
    sampled: dict[int, InputDomain] | None = None
    found = []
    for i, kind in enumerate(floating):
        name = names[i] if i < len(names) else str(i)
        interval, text = read[i] if i < len(read) and len(read) == len(floating) else (None, "")
        if kind is not None:
            found.append(InputDomain(name, None, "not floating", kind))
        elif i in explicit:
            found.append(InputDomain(name, explicit[i][0], "schema", explicit[i][1]))
        elif interval is not None:
            found.append(InputDomain(name, domain_of(interval), "source",
                                     f"get_inputs(): {text} takes values in {describe(interval)}"[:300]))
        else:
            if sampled is None:
                sampled = _sample_domains(module, dims, relations, names)
            found.append(sampled.get(i) or InputDomain(name, "real", "default", "no sample could be drawn"))
    return tuple(found)


def _floating(module: types.ModuleType, sizes: dict[str, int]) -> list[str | None]:
    """Per input at these sizes: None for a floating tensor (the fuzzer refills it), else what it is."""
    return [None if isinstance(x, torch.Tensor) and x.is_floating_point()
            else f"a {x.dtype} tensor" if isinstance(x, torch.Tensor) else f"a {type(x).__name__}"
            for x in inputs_at(module, sizes)]


def _sample_sizes(module: types.ModuleType, dims: tuple[Dim, ...], relations: tuple[Relation, ...]) -> dict[str, int]:
    """Sizes at which every input's draws over SAMPLE_SEEDS seeds hold MIN_SIGN_ELEMENTS elements
    where the sizes allow it: the benchmark's own, doubled while an input that grows with them is
    too small, or shrunk to SAMPLE_CAP elements when the largest is past it."""
    schema = OpSchema(dims=dims, relations=relations)

    def numels(sizes: dict[str, int]) -> list[int]:
        with bound_sizes(module, sizes), torch.device("meta"):
            return [x.numel() for x in module.get_inputs() if isinstance(x, torch.Tensor) and x.is_floating_point()]

    sizes = {d.name: d.default for d in dims}
    try:
        before: list[int] | None = None
        for _ in range(20):
            counts = numels(sizes) or [0]
            # an input no size moves is left as it is
            growing = [c for i, c in enumerate(counts) if before is None or c > before[i]]
            if all(c * SAMPLE_SEEDS >= MIN_SIGN_ELEMENTS for c in growing) or 2 * max(counts) > SAMPLE_CAP or not sizes:
                break
            before, sizes = counts, satisfy({k: 2 * v for k, v in sizes.items()}, relations)
        if max(numels(sizes) or [0]) > SAMPLE_CAP:
            sizes = fit_budget(sizes, schema, lambda s: max(numels(s) or [0]), SAMPLE_CAP)
    except Exception:  # noqa: BLE001 - factories that cannot run on meta: sample at the benchmark's sizes
        return {d.name: d.default for d in dims}
    return sizes


def _sample_domains(module: types.ModuleType, dims: tuple[Dim, ...], relations: tuple[Relation, ...],
                   names: list[str]) -> dict[int, InputDomain]:
    """The domain of each floating input from SAMPLE_SEEDS draws of `get_inputs()` (see the
    module's docstring); {} when the factory fails at the sample's sizes."""
    sizes = _sample_sizes(module, dims, relations)
    seen: dict[int, list[float]] = {}  # position -> [elements, negatives, above one]
    try:
        for seed in range(SAMPLE_SEEDS):
            torch.manual_seed(seed)
            with bound_sizes(module, sizes):
                draw = module.get_inputs()
            for i, x in enumerate(draw):
                if isinstance(x, torch.Tensor) and x.is_floating_point():
                    finite = x[torch.isfinite(x)]
                    tally = seen.setdefault(i, [0, 0, 0])
                    tally[0] += finite.numel()
                    tally[1] += int((finite < 0).sum())
                    tally[2] += int((finite > 1).sum())
    except Exception:  # noqa: BLE001 - the caller records the default
        return {}
    found = {}
    for i, (n, negative, above) in seen.items():
        name = names[i] if i < len(names) else str(i)
        where = f"sampled {int(n)} elements over {SAMPLE_SEEDS} seeds at sizes {sizes}"
        if negative:
            found[i] = InputDomain(name, "real", "sampled", f"{where}: {int(negative)} negative")
        elif n < MIN_SIGN_ELEMENTS:
            found[i] = InputDomain(name, "real", "default",
                                   f"{where}: none negative, too few to restrict the domain (< {MIN_SIGN_ELEMENTS})")
        else:
            domain, seen_above = ("positive", "") if above else ("unit", ", none above 1")
            found[i] = InputDomain(name, domain, "sampled", f"{where}: none negative{seen_above}")
    return found


NAMED = "the op schema names it"  # why a domain holds that the schema gives without a note


def explicit_domains(spec: dict, names: list[str]) -> dict[int, tuple[str, str]]:
    """Input position -> (domain, why) of an explicit op schema's `inputs` (keyed by Model.forward's
    parameter name or by position; a value is a domain or `{domain, note}`)."""
    found = {}
    for key, value in (spec.get("inputs") or {}).items():
        domain = value.get("domain", "real") if isinstance(value, dict) else str(value)
        note = value.get("note", NAMED) if isinstance(value, dict) else NAMED
        index = names.index(key) if key in names else int(key) if str(key).isdigit() else None
        if index is not None:
            found[index] = (domain, str(note))
    return found


def domain_map(domains: tuple[InputDomain, ...]) -> dict[int, str]:
    """Input position -> domain, for the floating inputs (what `values.fill` reads)."""
    return {i: d.domain for i, d in enumerate(domains) if d.domain is not None}

