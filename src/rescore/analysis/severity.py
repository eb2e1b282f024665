"""Severity tiers of a flagged submission: how ordinary the inputs it fails on are.

Read from its failing cases (a flagging outcome, in a dtype it claims), each described by its row of
the cases table: at the benchmark's own sizes or not (those of the problem's fixed-check rows; the
fixed check itself and the `fixed` strategy's cases are), special values or not (SPECIAL_VALUES),
strided or contiguous inputs (`layout`), and a wrong answer (WRONG) or none (a crash, a build
failure, a timeout). An *ordinary* input has normal values and contiguous layout. The tier is the
first of TIERS that holds:

1. `benchmark_sizes`: it fails an ordinary input at the benchmark's own sizes.
2. `other_sizes`: it gives a wrong answer on an ordinary input at other sizes.
3. `special_values`: it fails on special values: with a wrong answer, or with none where no ordinary
   input at other sizes goes unanswered too (when one does, its sizes explain the failure).
4. `non_contiguous`: the same, on strided views.
5. `shape_specialised`: it answers no ordinary input at some other sizes, and is never wrong on one.

A submission no case flags gets a tier only when its own CUDA never ran (`cuda_never_ran`: the
cases' `cuda_ran` is no, worker/usage.py): its answers are right, so it is neither wrong nor an
illusion, and the headline verdict is unchanged; but they are PyTorch's, and so is any speed-up
it claims. A flagged submission keeps the tier of its failures, whether its CUDA ran or not (the
`cuda_ran` column beside it says so).

A case whose row records no input (the worker died before answering, outside the fixed check and
the `fixed` strategy), or whose problem has no fixed-check row with sizes to compare with, says
nothing; a submission none of whose failing cases says anything is `unattributed`. `declined` never
flags, so a refusal never gives a tier.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pandas as pd

from rescore.model.builds import CudaRan
from rescore.model.outcomes import FLAGGING, Outcome

TIERS = ("benchmark_sizes", "other_sizes", "special_values", "non_contiguous", "shape_specialised")
UNATTRIBUTED = "unattributed"
CUDA_NEVER_RAN = "cuda_never_ran"  # not flagged, but its own CUDA never ran (see the module's docstring)
ALL_TIERS = (*TIERS, UNATTRIBUTED, CUDA_NEVER_RAN)

WRONG: frozenset[str] = frozenset(
    {Outcome.MISMATCH.value, Outcome.NONFINITE.value, Outcome.BAD_OUTPUT.value, Outcome.MUTATED_INPUT.value}
)
"""Outcomes that are an answer, and a wrong one; the rest of FLAGGING is no answer at all."""

SPECIAL_VALUES: frozenset[str] = frozenset({"special", "nan_few", "nan_sprinkled", "huge", "tiny"})
"""Value classes (inputs/values.py) that hold NaN or Inf, or magnitudes near the ends of a dtype's
range (`huge` is N(0, 1e4), `tiny` N(0, 1e-6)). Every other class is normal values: normals,
shifted, scaled by 100 or 1e-3, signed, near-constant, integers, or the benchmark's own draw."""


@dataclass(frozen=True)
class FailingCase:
    """What the tiers need to know of one failing case."""

    at_benchmark: bool  # at the benchmark's own sizes
    special: bool  # special values
    strided: bool  # non-contiguous inputs
    answered: bool  # a wrong answer (else no answer at all)

    @property
    def ordinary(self) -> bool:
        return not (self.special or self.strided)


def benchmark_sizes(cases: pd.DataFrame) -> dict[str, dict]:
    """problem_id -> the benchmark's own sizes: those its fixed-check rows ran at."""
    fixed = cases[(cases["oracle"] == "fixed") & cases["sizes"].notna()] if "sizes" in cases else cases.iloc[0:0]
    return {pid: json.loads(sizes) for pid, sizes in zip(fixed["problem_id"], fixed["sizes"])}


def describe(row: dict, own_sizes: dict | None) -> FailingCase | None:
    """One failing case row as the tiers read it; None when the row does not say what its input was."""
    fixed = row.get("oracle") == "fixed" or row.get("strategy") == "fixed"
    sizes = row.get("sizes")
    if not fixed and (not isinstance(sizes, str) or own_sizes is None):
        return None
    values = row.get("values") if isinstance(row.get("values"), str) else "native"
    layout = row.get("layout") if isinstance(row.get("layout"), str) else "contiguous"
    return FailingCase(
        at_benchmark=fixed or json.loads(sizes) == own_sizes,
        special=values in SPECIAL_VALUES,
        strided=layout != "contiguous",
        answered=row.get("outcome") in WRONG,
    )


def tier(cases: list[FailingCase]) -> str:
    """The tier of a submission with these (described) failing cases; see the module's docstring."""
    if not cases:
        return UNATTRIBUTED
    ordinary = [c for c in cases if c.ordinary]
    if any(c.at_benchmark for c in ordinary):
        return "benchmark_sizes"
    if any(c.answered for c in ordinary):
        return "other_sizes"
    unanswered_elsewhere = bool(ordinary)  # what is left of them: no answer, at other sizes

    def by_input(c: FailingCase) -> bool:
        return c.answered or c.at_benchmark or not unanswered_elsewhere

    if any(c.special and by_input(c) for c in cases):
        return "special_values"
    if any(c.strided and by_input(c) for c in cases):
        return "non_contiguous"
    return "shape_specialised"


def severity(flagged_tier: str | None, cuda_ran: str | None) -> str | None:
    """A submission's tier: that of its failures when it is flagged, else `cuda_never_ran` when its
    own CUDA never ran, else None."""
    if flagged_tier is not None:
        return flagged_tier
    return CUDA_NEVER_RAN if cuda_ran == CudaRan.NO else None


def submission_tier(rows: pd.DataFrame, own_sizes: dict | None) -> str | None:
    """The tier of a submission from its case rows (in claimed dtypes); None when none of them fails."""
    failing = rows[rows["outcome"].isin(FLAGGING)]
    if failing.empty:
        return None
    described = [describe(r, own_sizes) for r in failing.to_dict("records")]
    return tier([c for c in described if c is not None])
