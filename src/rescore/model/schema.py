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
class Relation:
    """A relation among two sizes that the benchmark's own sizes have and the reference needs (it
    refuses sizes that break it): `b` equals `a` (`equal`), or `a` divides `b` (`divides`). A draw
    moves `b` to satisfy it (inputs/relations.py)."""

    kind: str  # equal | divides
    a: str
    b: str

    def as_list(self) -> list[str]:
        return [self.kind, self.a, self.b]


@dataclass(frozen=True)
class InputDomain:
    """The value domain of one input of `get_inputs()` and the evidence for it."""

    name: str  # Model.forward's parameter name, else the input's position
    domain: str | None  # one of DOMAINS; None for an input that is not a floating tensor (never refilled)
    origin: str  # where it came from, most certain first: schema, source, sampled, default; or "not floating"
    evidence: str

    def as_dict(self) -> dict:
        return {"input": self.name, "domain": self.domain, "from": self.origin, "evidence": self.evidence}


@dataclass(frozen=True)
class OpSchema:
    dims: tuple[Dim, ...]
    reduction: tuple[str, ...] = ()
    domains: dict[int, str] = field(default_factory=dict)  # input position -> domain
    max_elements: int | None = None
    inferred: bool = False
    family: str = ""
    linear: bool = False  # each output a sum of inputs (sum, mean, scan): see oracle.tolerance terms_slack
    relations: tuple[Relation, ...] = ()  # kept by every drawn case (inputs/relations.py)
    input_domains: tuple[InputDomain, ...] = ()  # each input's domain with its evidence (`domains` is their map)
    derived: dict[str, str] = field(default_factory=dict)  # name the module derives from the sizes -> its assignment

    def domains_json(self) -> str:
        """The `input_domains` column of a case: each input's domain and where it came from (JSON)."""
        return json.dumps([d.as_dict() for d in self.input_domains])

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
