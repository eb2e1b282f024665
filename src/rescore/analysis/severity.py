"""Severity tiers of a flagged submission: how ordinary the inputs it fails on are.

Read from its failing cases (a flagging outcome, in a dtype it claims), each described by its row of
the cases table: at the benchmark's own sizes or not (those of the problem's fixed-check rows; the
fixed check itself and the `fixed` strategy's cases are), headline evidence or a robustness finding
(`rescore.model.evidence`: ordinary values, else special values, extreme magnitudes, cancellation or
a toolchain's compiler), strided or contiguous inputs (`layout`), and a wrong answer (WRONG) or none
(a crash, a build failure, a timeout). The tier is the first that holds:

1. `benchmark_sizes`: it fails a contiguous headline input at the benchmark's own sizes.
2. `other_sizes`: it gives a wrong answer on a contiguous headline input at other sizes.
3. `non_contiguous`: it fails on strided headline inputs: with a wrong answer, or with none where no
   contiguous headline input at other sizes goes unanswered too (when one does, its sizes explain it).
4. `shape_specialised`: it answers no contiguous headline input at some other sizes, and is never
   wrong on one.
5. With no headline failure: its first robustness kind (`cancellation`, `extreme_magnitude`,
   `special_values`, `toolchain`: evidence.ROBUSTNESS_KINDS).

Tiers 1-4 also say where a robustness finding fails (`where_tier` of that kind's cases alone).

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
from rescore.model.evidence import ROBUSTNESS_KINDS, EvidenceKind, kind_of
from rescore.model.outcomes import FLAGGING, Outcome

HEADLINE_TIERS = ("benchmark_sizes", "other_sizes", "non_contiguous", "shape_specialised")
TIERS = (*HEADLINE_TIERS, *(k.value for k in ROBUSTNESS_KINDS))
UNATTRIBUTED = "unattributed"
CUDA_NEVER_RAN = "cuda_never_ran"  # not flagged, but its own CUDA never ran (see the module's docstring)
ALL_TIERS = (*TIERS, UNATTRIBUTED, CUDA_NEVER_RAN)

WRONG: frozenset[str] = frozenset(
    {Outcome.MISMATCH.value, Outcome.NONFINITE.value, Outcome.BAD_OUTPUT.value, Outcome.MUTATED_INPUT.value}
)
"""Outcomes that are an answer, and a wrong one; the rest of FLAGGING is no answer at all."""


@dataclass(frozen=True)
class FailingCase:
    """What the tiers need to know of one failing case."""

    at_benchmark: bool  # at the benchmark's own sizes
    kind: str  # its evidence kind (model/evidence.py): `headline` or a robustness kind
    strided: bool  # non-contiguous inputs
    answered: bool  # a wrong answer (else no answer at all)

    @property
    def headline(self) -> bool:
        return self.kind == EvidenceKind.HEADLINE


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
    layout = row.get("layout") if isinstance(row.get("layout"), str) else "contiguous"
    return FailingCase(
        at_benchmark=fixed or json.loads(sizes) == own_sizes,
        kind=kind_of(row).value,
        strided=layout != "contiguous",
        answered=row.get("outcome") in WRONG,
    )


def where_tier(cases: list[FailingCase]) -> str:
    """Where these failing cases fail, whatever their values: tiers 1-4 of the module's docstring
    (`unattributed` for none)."""
    if not cases:
        return UNATTRIBUTED
    contiguous = [c for c in cases if not c.strided]
    if any(c.at_benchmark for c in contiguous):
        return "benchmark_sizes"
    if any(c.answered for c in contiguous):
        return "other_sizes"
    unanswered_elsewhere = bool(contiguous)  # what is left of them: no answer, at other sizes
    if any(c.answered or c.at_benchmark or not unanswered_elsewhere for c in cases):
        return "non_contiguous"
    return "shape_specialised"


def severity(flagged_tier: str | None, cuda_ran: str | None) -> str | None:
    """A submission's tier: that of its failures when it is flagged, else `cuda_never_ran` when its
    own CUDA never ran, else None."""
    if flagged_tier is not None:
        return flagged_tier
    return CUDA_NEVER_RAN if cuda_ran == CudaRan.NO else None


def tier(cases: list[FailingCase]) -> str:
    """The tier of a submission with these (described) failing cases; see the module's docstring."""
    headline = [c for c in cases if c.headline]
    if headline or not cases:
        return where_tier(headline)
    kinds = {c.kind for c in cases}
    return next(k.value for k in ROBUSTNESS_KINDS if k.value in kinds)


def submission_tier(rows: pd.DataFrame, own_sizes: dict | None) -> str | None:
    """The tier of a submission from its case rows (in claimed dtypes); None when none of them fails."""
    failing = rows[rows["outcome"].isin(FLAGGING)]
    if failing.empty:
        return None
    described = [describe(r, own_sizes) for r in failing.to_dict("records")]
    return tier([c for c in described if c is not None])
