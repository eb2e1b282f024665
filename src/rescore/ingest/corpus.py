"""The built-in corpus as a dump (optionally restricted to some ops or entries)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from rescore.corpus.catalog import load_corpus
from rescore.model.records import Submission


def read(name: str, spec: dict) -> list[Submission]:
    """The corpus entries (of `spec["ops"]` / `spec["entries"]` when given), labelled with this dump's name."""
    root = Path(spec["path"]) if spec.get("path") else None
    subs = load_corpus(root, ops=spec.get("ops"))
    if spec.get("entries"):
        wanted = set(spec["entries"])
        subs = [s for s in subs if s.name in wanted]
    return [replace(s, dump=name) for s in subs]
