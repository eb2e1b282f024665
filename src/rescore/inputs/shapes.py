"""Shape samplers: how the sizes of a case are drawn from the schema's ranges, under an element budget."""

from __future__ import annotations

import math
import random
from collections.abc import Callable

from rescore.inputs.relations import followers, satisfy
from rescore.model.schema import OpSchema

NumelFn = Callable[[dict[str, int]], int]

BOUNDARY_SIZES = (
    1,
    2,
    3,
    5,
    7,
    15,
    17,
    31,
    33,
    63,
    65,
    127,
    129,
    255,
    257,
    511,
    513,
    1023,
    1025,
    2047,
    2049,
    4095,
    4097,
    8191,
    8193,
)


def _log_uniform(rng: random.Random, lo: int, hi: int) -> int:
    if hi <= lo:
        return lo
    return min(hi, max(lo, int(math.exp(rng.uniform(math.log(lo), math.log(hi + 1))))))


def _boundary(rng: random.Random, lo: int, hi: int, default: int) -> int:
    pool = [s for s in BOUNDARY_SIZES if lo <= s <= hi] + [lo, hi]
    pool += [s for s in (default - 1, default + 1) if lo <= s <= hi]
    return rng.choice(pool)


def _regular(rng: random.Random, lo: int, hi: int) -> int:
    pool = [1 << k for k in range(0, 31) if lo <= (1 << k) <= hi] or [lo]
    return rng.choice(pool)


def sample_sizes(kind: str, schema: OpSchema, rng: random.Random) -> dict[str, int]:
    """One draw of every size of the schema, moved to keep the schema's relations."""
    sizes: dict[str, int] = {}
    for dim in schema.dims:
        if kind == "fixed":
            sizes[dim.name] = dim.default
        elif kind == "boundary":
            sizes[dim.name] = _boundary(rng, dim.lo, dim.hi, dim.default)
        elif kind == "regular":
            sizes[dim.name] = _regular(rng, dim.lo, dim.hi)
        elif kind == "default":
            sizes[dim.name] = _log_uniform(rng, dim.lo, dim.hi)
        else:
            raise ValueError(f"unknown shape sampler {kind!r}")
    return satisfy(sizes, schema.relations)


def fit_budget(sizes: dict[str, int], schema: OpSchema, numel: NumelFn, budget: int) -> dict[str, int]:
    """Shrink the largest sizes until the largest tensor holds at most `budget` elements, keeping the
    schema's relations (a size that follows another is never shrunk alone; one whose halving the
    relations undo is left as it is)."""
    sizes = satisfy(dict(sizes), schema.relations)
    lows = {d.name: d.lo for d in schema.dims}
    fixed = followers(schema.relations)
    for _ in range(64):
        if numel(sizes) <= budget:
            return sizes
        shrinkable = [k for k, v in sizes.items() if v > lows.get(k, 1) and k not in fixed]
        if not shrinkable:
            return sizes
        name = max(shrinkable, key=lambda k: sizes[k])
        halved = dict(sizes, **{name: max(lows.get(name, 1), sizes[name] // 2 + (sizes[name] % 2 and sizes[name] > 2))})
        halved = satisfy(halved, schema.relations)
        if halved == sizes:
            fixed.add(name)
        sizes = halved
    return sizes


def draw_sizes(kind: str, schema: OpSchema, rng: random.Random, numel: NumelFn, budget: int) -> dict[str, int]:
    """Sizes for one case: a few draws that fit the budget as drawn, else the last draw shrunk to fit."""
    if kind == "fixed":
        return sample_sizes("fixed", schema, rng)
    sizes = {}
    for _ in range(8):
        sizes = sample_sizes(kind, schema, rng)
        if numel(sizes) <= budget:
            return sizes
    return fit_budget(sizes, schema, numel, budget)
