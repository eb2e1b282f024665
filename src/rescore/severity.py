"""Severity tiers of a flagged submission: how ordinary the inputs it fails on are.

Each failing case (a flagging outcome, in a dtype the submission claims) falls in exactly one tier,
decided from its row of the cases table, in this order:

1. `special_values`: its value class is NaN, Inf or an extreme magnitude (SPECIAL_VALUES).
2. `non_contiguous`: its inputs are strided views (`layout` other than contiguous).
3. `benchmark_sizes`: its sizes are the benchmark's own (those of the problem's fixed-check rows),
   or it is the fixed check itself, or a case of the `fixed` strategy.
4. `other_sizes`: a wrong answer (WRONG) at other sizes.
5. `shape_specialised`: no answer at all (a crash, a build failure, a timeout) at other sizes.

A submission's tier is the most severe tier among its failing cases, in the order of TIERS (a
wrong answer on the benchmark's own sizes first, a loud failure at other sizes last). A case that
records no input (the worker died before answering, and the case is neither the fixed check nor
of the `fixed` strategy), or whose problem has no fixed-check row with sizes to compare with, is
`unattributed`; a submission is `unattributed` only when none of its failing cases is attributed.
`declined` never flags, so a refusal never gives a tier.
"""

from __future__ import annotations

import json

import pandas as pd

from rescore.outcomes import FLAGGING, Outcome

TIERS = ("benchmark_sizes", "other_sizes", "special_values", "non_contiguous", "shape_specialised")
UNATTRIBUTED = "unattributed"
ALL_TIERS = (*TIERS, UNATTRIBUTED)

WRONG: frozenset[str] = frozenset(
    {Outcome.MISMATCH.value, Outcome.NONFINITE.value, Outcome.BAD_OUTPUT.value, Outcome.MUTATED_INPUT.value}
)
"""Outcomes that are an answer, and a wrong one; the rest of FLAGGING is no answer at all."""

SPECIAL_VALUES: frozenset[str] = frozenset({"special", "nan_few", "nan_sprinkled", "huge", "tiny"})
"""Value classes (inputs/values.py) that hold NaN or Inf, or magnitudes near the ends of a dtype's
range (`huge` is N(0, 1e4), `tiny` N(0, 1e-6)). Every other class is ordinary values: normals,
shifted, scaled by 100 or 1e-3, signed, near-constant, integers, or the benchmark's own draw."""


def benchmark_sizes(cases: pd.DataFrame) -> dict[str, dict]:
    """problem_id -> the benchmark's own sizes: those its fixed-check rows ran at."""
    fixed = cases[(cases["oracle"] == "fixed") & cases["sizes"].notna()] if "sizes" in cases else cases.iloc[0:0]
    return {pid: json.loads(sizes) for pid, sizes in zip(fixed["problem_id"], fixed["sizes"])}


def case_tier(row: dict, own_sizes: dict | None) -> str:
    """The tier of one failing case row (see the module's docstring)."""
    fixed = row.get("oracle") == "fixed" or row.get("strategy") == "fixed"
    sizes = row.get("sizes")
    if not isinstance(sizes, str) and not fixed:
        return UNATTRIBUTED
    values = row.get("values") if isinstance(row.get("values"), str) else "native"
    layout = row.get("layout") if isinstance(row.get("layout"), str) else "contiguous"
    if values in SPECIAL_VALUES:
        return "special_values"
    if layout != "contiguous":
        return "non_contiguous"
    if fixed:
        return "benchmark_sizes"
    if own_sizes is None:
        return UNATTRIBUTED
    if json.loads(sizes) == own_sizes:
        return "benchmark_sizes"
    return "other_sizes" if row.get("outcome") in WRONG else "shape_specialised"


def submission_tier(rows: pd.DataFrame, own_sizes: dict | None) -> str | None:
    """The most severe tier among the failing rows (cases in claimed dtypes); None when none fails."""
    failing = rows[rows["outcome"].isin(FLAGGING)]
    if failing.empty:
        return None
    tiers = {case_tier(r, own_sizes) for r in failing.to_dict("records")}
    return next((t for t in TIERS if t in tiers), UNATTRIBUTED)
