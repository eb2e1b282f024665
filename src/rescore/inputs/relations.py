"""Sizes that keep the relations the benchmark's own sizes have and its reference needs (`Relation`:
`b` equals `a`, or `a` divides `b`): each drawn size that breaks one is moved to the nearest size that
keeps it, so that a case is one the problem allows (worker/size_relations.py finds the relations)."""

from __future__ import annotations

import math
from collections.abc import Iterable

from rescore.model.schema import Relation


def followers(relations: Iterable[Relation]) -> set[str]:
    """Sizes set by an equality: they follow another size and are never varied or shrunk alone."""
    return {r.b for r in relations if r.kind == "equal"}


def satisfy(sizes: dict[str, int], relations: tuple[Relation, ...]) -> dict[str, int]:
    """`sizes` with each related size moved to keep its relations: equal to its `a`, or the multiple
    of the least common multiple of its divisors nearest to its drawn value. Sizes a relation sets
    may in turn be another's `a`: passes repeat until nothing moves (the relations are acyclic)."""
    sizes = dict(sizes)
    targets: dict[str, list[Relation]] = {}
    for r in relations:
        if r.a in sizes and r.b in sizes:
            targets.setdefault(r.b, []).append(r)
    for _ in range(len(targets) + 1):
        moved = False
        for b, rs in targets.items():
            equal = [r for r in rs if r.kind == "equal"]
            if equal:
                value = sizes[equal[0].a]
            else:
                step = math.lcm(*(max(1, sizes[r.a]) for r in rs))
                value = step * max(1, round(sizes[b] / step))
            if value != sizes[b]:
                sizes[b], moved = value, True
        if not moved:
            break
    return sizes
