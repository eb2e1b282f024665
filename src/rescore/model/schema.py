"""Op schemas: which sizes a problem has, the range each may take, which of them a reduction runs
over, and the value domain of each input. Explicit in the corpus; inferred for dumps without one
(`worker/problem_schema.py` reads both from a loaded problem module: this module is plain data).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

DOMAINS = ("real", "positive", "unit")


@dataclass(frozen=True)
class Dim:
    name: str
    default: int
    lo: int
    hi: int


@dataclass(frozen=True)
class OpSchema:
    dims: tuple[Dim, ...]
    reduction: tuple[str, ...] = ()
    domains: dict[int, str] = field(default_factory=dict)  # input position -> domain
    max_elements: int | None = None
    inferred: bool = False
    family: str = ""
    linear: bool = False  # each output a sum of inputs (sum, mean, scan): see oracle.tolerance terms_slack

    def defaults(self) -> dict[str, int]:
        return {d.name: d.default for d in self.dims}

    def reduction_length(self, sizes: dict[str, int]) -> int:
        n = 1
        for name in self.reduction:
            n *= int(sizes.get(name, 1))
        return n


def largest_numel(shapes: list[tuple[int, ...] | None]) -> int:
    best = 0
    for shape in shapes:
        if shape is not None:
            n = 1
            for s in shape:
                n *= s
            best = max(best, n)
    return best


def largest_in_json(shapes: object) -> int:
    """Elements of the largest tensor of a case, from its `shapes` column (JSON), 0 if unknown."""
    return largest_numel(json.loads(shapes)) if isinstance(shapes, str) and shapes else 0
