"""Regression memory, as Hypothesis keeps its example database: the failures of a submission are
stored, and the next run of the same submission replays them first, so a known bug is re-confirmed
in one case. Stored per submission content hash, one JSON file each, under `model.paths.failure_store_root()`
($RESCORE_FAILURE_STORE, else `.rescore-cache/failures/`).
"""

from __future__ import annotations

import json
from pathlib import Path

from rescore.model.outcomes import FLAGGING
from rescore.model.paths import failure_store_root
from rescore.model.tables import write_text

KEEP = 8  # stored failures per submission


class FailureStore:
    """The stored failing cases of each submission, in one folder."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def _path(self, submission_id: str) -> Path:
        return self.root / f"{submission_id}.json"

    def fetch(self, submission_id: str) -> list[dict]:
        """The stored cases of a submission (strategy, seed, dtype, ...); [] when none or unreadable."""
        try:
            data = json.loads(self._path(submission_id).read_text())
        except (OSError, ValueError):
            return []
        return [c for c in data if isinstance(c, dict) and {"strategy", "seed", "dtype"} <= set(c)]

    def save(self, submission_id: str, rows: list[dict]) -> None:
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
        write_text(json.dumps(keep[:KEEP], indent=1), self._path(submission_id))


def default_store() -> FailureStore:
    """The store `rescore check` uses, at the folder the environment names now."""
    return FailureStore(failure_store_root())
