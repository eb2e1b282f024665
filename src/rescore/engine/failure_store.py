"""Regression memory, as Hypothesis keeps its example database: the failures of a submission are
stored, and the next run of the same submission replays them first, so a known bug is re-confirmed
in one case. Stored per submission content hash under `.rescore-cache/failures/`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from rescore.model.outcomes import FLAGGING
from rescore.model.tables import write_text

DEFAULT_STORE = Path(os.environ.get("RESCORE_FAILURE_STORE", ".rescore-cache/failures"))
KEEP = 8  # stored failures per submission


def load(submission_id: str, store: Path | None = None) -> list[dict]:
    path = (store or DEFAULT_STORE) / f"{submission_id}.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    return [c for c in data if isinstance(c, dict) and {"strategy", "seed", "dtype"} <= set(c)]


def save(submission_id: str, rows: list[dict], store: Path | None = None) -> None:
    """Remember this run's failing fuzz cases (a few per submission), replacing older entries."""
    failing = [r for r in rows if r.get("oracle") == "fuzz" and r.get("outcome") in FLAGGING
               and r.get("purpose") != "regression"]
    if not failing:
        return
    seen, keep = set(), []
    for r in failing:
        key = (r["strategy"], r["dtype"])
        if key in seen:
            continue
        seen.add(key)
        keep.append({"strategy": r["strategy"], "seed": int(r["seed"]), "dtype": r["dtype"],
                     "case_index": int(r.get("case_index") or 0), "outcome": r["outcome"]})
    write_text(json.dumps(keep[:KEEP], indent=1), (store or DEFAULT_STORE) / f"{submission_id}.json")
