"""Dump adapters: one module per benchmark format, each yielding Submissions (with their Problems).

A new format is one module here with a `read(name, spec) -> list[Submission]` function, plus one
entry in ADAPTERS and one entry under `dumps:` in config/config.yaml.
"""

from __future__ import annotations

from collections.abc import Callable

from rescore.ingest import corpus, cudal1, gpuemu, kernelbench, pairs
from rescore.ingest.annotations import annotate
from rescore.model.records import Submission

Reader = Callable[[str, dict], list[Submission]]

ADAPTERS: dict[str, Reader] = {
    "corpus": corpus.read,
    "kernelbench": kernelbench.read,
    "gpuemu": gpuemu.read,
    "pairs": pairs.read,
    "cudal1": cudal1.read,
}


def read_dump(name: str, spec: dict) -> list[Submission]:
    """Every submission of a dump, with the labels and controls its spec gives (dumps.annotations)."""
    fmt = spec.get("format")
    if fmt not in ADAPTERS:
        raise ValueError(f"dump {name!r}: unknown format {fmt!r}; known: {sorted(ADAPTERS)}")
    return annotate(name, spec, ADAPTERS[fmt](name, spec))
