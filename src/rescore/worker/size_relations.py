"""The relations among a problem's sizes that its reference needs, found at load from the benchmark's
own sizes: two sizes equal there (in_features == out_features of a residual add), or one dividing
the other (num_groups divides the channels of a group norm).

A relation is kept only where the reference itself says it matters, on the meta device (shapes
only, no memory): it refuses the benchmark's sizes with one size moved so that this relation alone
breaks, and accepts them with that size moved keeping every relation. A problem whose reference
cannot run on the meta device (a numpy reference, data-dependent control flow) gets no relation;
its cases fall back on drawing again when the reference refuses (worker/case.py).
"""

from __future__ import annotations

import math
import time
import types
from collections.abc import Callable

import torch

from rescore.model.schema import Dim, Relation
from rescore.worker.problem_sizes import bound_sizes

# At most this many runs of the reference on the meta device at load (a probe each), and at most
# this many seconds of them: a reference whose Python is slow even without computing (loops over a
# size) leaves the later relations unfound rather than holding the load.
MAX_PROBES = 96
MAX_PROBE_S = 20.0


def accepts(module: types.ModuleType, sizes: dict[str, int]) -> bool:
    """Whether the problem builds its inputs and Model at these sizes and runs the Model on them,
    on the meta device (what shape checks the reference makes, without computing anything)."""
    try:
        with bound_sizes(module, sizes), torch.device("meta"):
            torch.manual_seed(0)
            inputs = module.get_inputs()
            model = module.Model(*module.get_init_inputs())
            with torch.no_grad():
                model(*inputs)
    except Exception:  # noqa: BLE001 - any refusal: the sizes are outside the problem's domain
        return False
    return True


def candidates(dims: tuple[Dim, ...], target: Dim) -> list[Relation]:
    """The relations the benchmark's own sizes give `target`: equal to an earlier size of the same
    value, then divided by each smaller size above 1 that divides it, smallest first."""
    before = dims[: dims.index(target)]
    equal = [Relation("equal", d.name, target.name) for d in before if d.default == target.default]
    divisors = sorted((d for d in dims if 1 < d.default < target.default and target.default % d.default == 0),
                      key=lambda d: d.default)
    return equal + [Relation("divides", d.name, target.name) for d in divisors]


def _nearest(value: int, fits: Callable[[int], bool]) -> int | None:
    """The value nearest `value` (not itself) that `fits`, or None."""
    for k in range(1, 2 * value + 64):
        for near in (value + k, value - k):
            if near >= 1 and fits(near):
                return near
    return None


def _move(value: int, step: int, divides: list[int], off: int | None = None) -> int | None:
    """The value nearest `value` that is a multiple of `step`, divides each of `divides`, and is no
    multiple of `off` (when given)."""
    return _nearest(value, lambda v: v % step == 0 and all(c % v == 0 for c in divides) and not (off and v % off == 0))


def _not_dividing(value: int, target: int) -> int | None:
    """The value above 1 nearest `value` that does not divide `target`."""
    return _nearest(value, lambda v: v > 1 and target % v != 0)


def infer_relations(module: types.ModuleType, dims: tuple[Dim, ...]) -> tuple[Relation, ...]:
    """The relations among `dims` the reference needs (see the module's docstring); none where the
    reference cannot run on the meta device at the benchmark's own sizes.

    Sizes are taken largest first, each with its candidate relations in turn. A size `b` moved off
    the relation (onto every relation already found for it: a multiple of the divisors it needs,
    dividing the sizes it must divide) is refused; moved along it (an equality's sizes together) it
    is accepted; and a divisor `a` moved to the nearest value that does not divide `b` is refused
    too (of two divisors of one value, only the one the reference needs is kept). A size that
    follows another by equality needs nothing more."""
    base = {d.name: d.default for d in dims}
    if len(dims) < 2 or not accepts(module, base):
        return ()
    needed: list[Relation] = []
    probes = 0
    began = time.monotonic()

    def refused(sizes: dict[str, int]) -> bool:
        nonlocal probes
        probes += 1
        return not accepts(module, dict(base, **sizes))

    def multiples(names: list[str]) -> list[int]:  # what these sizes must keep dividing
        return [base[r.b] for r in needed if r.kind == "divides" and r.a in names]

    for target in sorted(dims, key=lambda d: (-d.default, dims.index(d))):
        b, vb, step = target.name, target.default, 1
        for relation in candidates(dims, target):
            va = base[relation.a]
            if probes + 4 > MAX_PROBES or time.monotonic() - began > MAX_PROBE_S:
                return tuple(needed)
            if relation.kind == "divides" and step % va == 0:
                continue  # implied by the divisors already needed
            off = _move(vb, step, multiples([b]), va if relation.kind == "divides" else None)
            if off is None or not refused({b: off}):
                continue
            if relation.kind == "equal":
                tied = [d.name for d in dims if d.default == vb]
                along = _move(vb, step, multiples(tied))
                kept = {n: along for n in tied} if along else None
            else:
                along = _move(vb, math.lcm(step, va), multiples([b]))
                kept = {b: along} if along else None
            if kept is None or refused(kept):
                continue  # refused along the relation too: a size the problem pins, not this relation
            if relation.kind == "divides":
                other = _not_dividing(va, vb)
                if other is None or not refused({relation.a: other}):
                    continue  # another divisor of the same value is the one the reference needs
            needed.append(relation)
            if relation.kind == "equal":
                break
            step = math.lcm(step, va)
    return tuple(needed)
