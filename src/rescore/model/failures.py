"""A flagged case's identity: its stable id, and which of a submission's failures counts as its first."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping


def failure_id(row: dict) -> str:
    text = f"{row['submission_id']}|{row['oracle']}|{row['strategy']}|{row['seed']}|{row['dtype']}"
    return hashlib.sha256(text.encode()).hexdigest()[:12]


# A submission's first failure: the illusion table's first failing input, and the one shrunk.
FIRST_FAILURE_ORDER = ["strategy", "dtype", "case_index"]


def first_failure_key(row: Mapping) -> tuple:
    """A row's place in FIRST_FAILURE_ORDER (strategy, dtype, case index), for rows without them too
    (`min(rows, key=first_failure_key)` is the first failure)."""
    keys = []
    for name in FIRST_FAILURE_ORDER:
        value = row.get(name)
        number = isinstance(value, (int, float)) and value == value  # NaN is no number here
        keys.append((0, value, "") if number else (1, 0, str(value or "")))
    return tuple(keys)
