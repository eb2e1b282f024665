"""A flagged case's identity: its stable id, and which of a submission's failures counts as its first."""

from __future__ import annotations

import hashlib


def failure_id(row: dict) -> str:
    text = f"{row['submission_id']}|{row['oracle']}|{row['strategy']}|{row['seed']}|{row['dtype']}"
    return hashlib.sha256(text.encode()).hexdigest()[:12]


# A submission's first failure: the illusion table's first failing input, and the one shrunk.
FIRST_FAILURE_ORDER = ["strategy", "dtype", "case_index"]
