"""Seed derivation: every random choice comes from (master seed, problem, strategy, case index).

Seeds are keyed by the problem rather than the submission, so every submission of one problem (a
control and each of its seeded variants) sees the same inputs: recall and false positives are then
paired comparisons. Calibration and evaluation derive from different purposes and never share seeds.
"""

from __future__ import annotations

import hashlib

SEED_BITS = 62


def case_seed(master: int, problem_id: str, strategy: str, index: int, purpose: str = "evaluation") -> int:
    text = f"{master}|{problem_id}|{strategy}|{purpose}|{index}"
    digest = hashlib.sha256(text.encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << SEED_BITS) - 1)


def sub_seed(seed: int, salt: str) -> int:
    """A seed for one sub-choice of a case (sizes, values, layout, retry n), derived from the case seed."""
    digest = hashlib.sha256(f"{seed}|{salt}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << SEED_BITS) - 1)
