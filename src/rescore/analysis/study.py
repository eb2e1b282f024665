"""Study tables derived from the `cases` table: nothing is aggregated away before this point."""

from __future__ import annotations

import json
import math

import pandas as pd

from rescore.analysis import robustness
from rescore.analysis.cuda_usage import submission_cuda
from rescore.analysis.severity import ALL_TIERS, benchmark_sizes, describe, severity, submission_tier, tier
from rescore.model.evidence import classify, counts_in_headline, kind_of
from rescore.model.failures import FIRST_FAILURE_ORDER, failure_id
from rescore.model.outcomes import (
    FLAGGING,
    FixedVerdict,
    FuzzVerdict,
    Outcome,
    fixed_verdict,
    fuzz_verdict,
    refused,
    stopped_early,
)
from rescore.model.records import LABELS, claims_dtype
from rescore.model.schema import largest_in_json

GPU_ONLY_CLASSES = frozenset({"int32_offset_overflow", "race_nonatomic"})
"""Bug classes only a GPU can show: the interpreter runs program instances one after another (no
race) and its sizes stay far below 2**31 elements (no 32-bit offset overflow). Under the
interpreter such a variant computes correctly, so a study whose cases ran on the CPU leaves them
out of recall: flagging one there would flag correct arithmetic."""
OVERFLOW_ELEMENTS = 2**31  # a 32-bit element offset overflows only in a tensor at least this large


UNLABELLED = "unlabelled"  # the study tables' label for a submission labelled neither correct nor buggy


def study_label(labels: pd.Series) -> pd.Series:
    """`correct` and `buggy` as they are, any other label (unknown, missing) as UNLABELLED."""
    return labels.where(labels.isin(LABELS), UNLABELLED)


def labels_note(buggy: int, correct: int, unlabelled: int) -> str:
    """What a study row cannot say, from how many buggy, correct and unlabelled kernels it counts
    ("" when it lacks nothing): recall needs buggy kernels, false positives need controls."""
    parts = []
    if not buggy:
        parts.append("recall needs labels: no submission here is labelled buggy")
    if not correct:
        parts.append("false-positive rates need labels: no submission here is labelled correct")
    if unlabelled and (buggy or correct):
        parts.append("recall and false positives count labelled submissions only")
    if unlabelled:
        parts.append(f"flag rates count the {unlabelled} unlabelled submissions")
    return "; ".join(parts)


def observable(df: pd.DataFrame) -> pd.DataFrame:
    """The rows (cases with `device`, `bug_class` and, where known, `shapes`) whose bug can show
    where and at the size the case ran: no GPU-only class on the CPU, and a 32-bit offset overflow
    only in a case with a tensor of 2**31 elements or more (a fuzz budget of 2**20 never draws one;
    only the variant's trigger does). Recall counts a bug only on cases that could expose it."""
    gpu_only = (df["device"] == "cpu") & df["bug_class"].isin(GPU_ONLY_CLASSES)
    overflow = df["bug_class"] == "int32_offset_overflow"
    if "shapes" in df.columns:
        big = df["shapes"].where(overflow).map(largest_in_json) >= OVERFLOW_ELEMENTS
    else:
        big = pd.Series(False, index=df.index)
    return df[~(gpu_only | (overflow & ~big))]


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """95% Wilson score interval for k successes in n trials ((nan, nan) when n == 0)."""
    if n <= 0:
        return (math.nan, math.nan)
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # the interval holds p; rounding put the lower end at 2e-19 for 0 of 1229 (a negative error bar)
    return (0.0 if k == 0 else min(p, centre - half), 1.0 if k == n else max(p, centre + half))


def evaluation_fuzz(cases: pd.DataFrame) -> pd.DataFrame:
    return cases[(cases["oracle"] == "fuzz") & (cases["purpose"] == "evaluation")]


def claimed(cases: pd.DataFrame, submissions: pd.DataFrame) -> pd.Series:
    """Per case row, whether its dtype is one its submission claims (`problem.claims_dtype` on the
    submissions table's `dtypes` and `declines`): a case outside the claim judges nothing. Rows of
    submissions the table does not know (or tables without these columns), and rows without a
    dtype, count as claimed."""
    if "dtype" not in cases or "dtypes" not in submissions:
        return pd.Series(True, index=cases.index, dtype=bool)
    meta = submissions.drop_duplicates("submission_id").set_index("submission_id")
    dtypes = meta["dtypes"]
    declines = meta["declines"] if "declines" in meta else pd.Series(dtype=object)
    lists = {sid: tuple(d for d in (v if isinstance(v, str) else "").split(",") if d) for sid, v in dtypes.items()}
    refuses = {sid: v if isinstance(v, str) and v else None for sid, v in declines.items()}
    return pd.Series(
        [
            not isinstance(dtype, str) or sid not in lists or claims_dtype(lists[sid], refuses.get(sid), dtype)
            for sid, dtype in zip(cases["submission_id"], cases["dtype"])
        ],
        index=cases.index,
        dtype=bool,
    )


def failures_table(cases: pd.DataFrame, submissions: pd.DataFrame) -> pd.DataFrame:
    """Every flagged case, with what a reproducer needs (paths, trigger) and a stable id."""
    flagged = cases[cases["outcome"].isin(FLAGGING)].copy()
    if flagged.empty:
        return flagged.assign(failure_id=[], problem_path=[], source_path=[], trigger=[], label=[], bug_class=[],
                              evidence=[])
    flagged["evidence"] = [str(kind_of(r)) for r in flagged.to_dict("records")]
    meta = submissions.set_index("submission_id")[["problem_path", "source_path", "trigger", "label", "bug_class"]]
    flagged = flagged.join(meta, on="submission_id")
    flagged["failure_id"] = [failure_id(r) for r in flagged.to_dict("records")]
    return flagged.reset_index(drop=True)


def reproducer(row: dict, dump: str) -> dict:
    """One flagged case as a self-contained document (a row of `failures_table`, and its submission's
    dump): the submission, the case's inputs, the verdict, the environment and how to replay it."""
    return {
        "failure_id": row["failure_id"],
        "submission": {
            "name": row["name"],
            "submission_id": row["submission_id"],
            "path": row["source_path"],
            "problem_id": row["problem_id"],
            "problem_path": row["problem_path"],
            "label": row["label"],
            "bug_class": row["bug_class"],
            "dump": dump,
        },
        "case": {
            k: row.get(k)
            for k in (
                "oracle",
                "strategy",
                "purpose",
                "case_index",
                "seed",
                "dtype",
                "sizes",
                "shapes",
                "strides",
                "layout",
                "values",
                "inputs_hash",
            )
        },
        "verdict": {
            k: row.get(k)
            for k in (
                "outcome",
                "reason",
                "diagnosis",
                "cause",
                "cause_evidence",
                "max_abs_err",
                "max_rel_err",
                "err_ulp",
                "n_mismatch",
                "n_elements",
                "first_mismatch",
                "tolerance_policy",
                "atol",
                "rtol",
                "bound",
                "policy_ratios",
            )
        },
        "evidence": classify(row).as_dict(),  # headline, or which robustness finding (model/evidence.py)
        "environment": {"device": row.get("device"), "versions": row.get("versions")},
        "replay": row.get("replay"),
        "replay_by_id": f"rescore replay {row['failure_id']}",
    }


def _first_failure(group: pd.DataFrame) -> dict | None:
    bad = group[group["outcome"].isin(FLAGGING)]
    if bad.empty:
        return None
    r = bad.sort_values(FIRST_FAILURE_ORDER).iloc[0]
    return r.to_dict()


def submission_diagnosis(fuzz: pd.DataFrame) -> str | None:
    """One line for a flagged submission: its most common failure pattern, or `growing_with_reduction`
    when it fails only at reduction lengths beyond every one it passed at."""
    bad = fuzz[fuzz["outcome"].isin(FLAGGING)]
    if bad.empty:
        return None
    good = fuzz[fuzz["outcome"] == Outcome.PASS]
    if (
        "reduction_len" in fuzz
        and len(good)
        and bad["reduction_len"].notna().all()
        and good["reduction_len"].notna().all()
    ):
        if bad["reduction_len"].max() > 1 and bad["reduction_len"].min() > good["reduction_len"].median():
            return "growing_with_reduction"
    kinds = bad["diagnosis"].dropna()
    kinds = kinds[kinds != ""]
    if kinds.empty:
        return bad["outcome"].mode().iloc[0]
    return str(kinds.mode().iloc[0])


def submission_cause(rows: pd.DataFrame, own_sizes: dict | None = None) -> tuple[str | None, str | None]:
    """(cause, evidence) of a flagged submission, by one rule: its failing rows (the fixed check and
    fuzz cases in claimed dtypes) ranked by the severity tier each alone falls in (severity.TIERS:
    the benchmark's own sizes first; rows that do not say what their input was last), then in
    FIRST_FAILURE_ORDER; the cause an experiment confirmed (worker/experiments.py) on the first of
    them that has one. Its worst failure's cause, not the majority of mixed labels. A submission
    wrong on an ordinary input at the benchmark's own sizes is never `shape_specialised`. (None,
    None) when no failing row has a cause (its `diagnosis` then says what the values show)."""
    if "cause" not in rows:
        return None, None
    bad = rows[rows["outcome"].isin(FLAGGING)]
    if bad.empty:
        return None, None
    described = [describe(r, own_sizes) for r in bad.to_dict("records")]
    rank = [ALL_TIERS.index(tier([c])) if c is not None else len(ALL_TIERS) for c in described]
    confirmed = bad.assign(tier_rank=rank).sort_values(["tier_rank", *FIRST_FAILURE_ORDER])
    confirmed = confirmed[confirmed["cause"].fillna("").ne("")]
    if tier([c for c in described if c is not None]) == "benchmark_sizes":
        confirmed = confirmed[confirmed["cause"] != "shape_specialised"]
    if confirmed.empty:
        return None, None
    first = confirmed.iloc[0]
    return str(first["cause"]), first.get("cause_evidence")


def headline_mask(rows: pd.DataFrame, robustness_in_headline: bool = False) -> pd.Series:
    """Per case row, whether it counts toward the headline verdict (`rescore.model.evidence`)."""
    if robustness_in_headline or rows.empty:
        return pd.Series(True, index=rows.index, dtype=bool)
    decisive = rows.reindex(columns=["outcome", "reason", "values"])  # all the rule reads
    return pd.Series([counts_in_headline(r) for r in decisive.to_dict("records")], index=rows.index, dtype=bool)


def illusion_table(cases: pd.DataFrame, submissions: pd.DataFrame, robustness_in_headline: bool = False
                   ) -> pd.DataFrame:
    """Per submission: fixed verdict, fuzz verdict, failed/total, first failing input, illusion, and
    for a flagged one its severity tier (severity.py). Fuzz cases in dtypes the submission does not
    claim are left out: they judge nothing.

    `fuzz_verdict`, `illusion`, the case counts, the first failure, diagnosis, cause and severity are
    the HEADLINE's: they count headline evidence only (model/evidence.py), unless
    `robustness_in_headline`. The robustness findings are beside them (`robustness`: per kind its
    tier and evidence, analysis/robustness.py), and `fuzz_verdict_all`, `illusion_all` and
    `severity_all` count every case."""
    rows = []
    cases = cases.assign(in_claim=claimed(cases, submissions), _headline=headline_mask(cases, robustness_in_headline))
    own_sizes = benchmark_sizes(cases)
    by_sub = {k: g for k, g in cases.groupby("submission_id")}
    for sub in submissions.to_dict("records"):
        g = by_sub.get(sub["submission_id"], cases.iloc[0:0])
        fixed = g[g["oracle"] == "fixed"]
        every = evaluation_fuzz(g[g["in_claim"]])
        fuzz = every[every["_headline"]]
        own = own_sizes.get(sub.get("problem_id"))
        fixed_says = fixed_verdict(fixed["outcome"].iloc[0] if len(fixed) else Outcome.SKIPPED)
        ran = fuzz[~fuzz["outcome"].isin([Outcome.SKIPPED])]
        failed = int(ran["outcome"].isin(FLAGGING).sum())
        declined = int((ran["outcome"] == Outcome.DECLINED).sum())
        fuzz_says, all_says = fuzz_verdict(list(fuzz["outcome"])), fuzz_verdict(list(every["outcome"]))
        stopped = every[(every["outcome"] == Outcome.SKIPPED) & every["reason"].map(stopped_early).astype(bool)]
        refusals = (every["outcome"] == Outcome.SKIPPED) & every["reason"].map(refused).astype(bool)
        first = _first_failure(fuzz)
        claimed_fixed = fixed[fixed["in_claim"]]
        judged = pd.concat([claimed_fixed, fuzz])
        cause, evidence = submission_cause(judged, own)
        flagged_tier = submission_tier(judged, own) if fuzz_says == FuzzVerdict.FLAGGED else None
        severity_all = submission_tier(pd.concat([claimed_fixed, every]), own) if all_says == FuzzVerdict.FLAGGED \
            else None
        found = robustness.findings(every.to_dict("records"), own)
        cuda_ran, cuda_build = submission_cuda(g)
        first_input = None
        if first:
            first_input = json.dumps(
                {k: first.get(k) for k in ("strategy", "dtype", "seed", "sizes", "layout", "values")}, default=str
            )
        rows.append(
            {
                "submission_id": sub["submission_id"],
                "name": sub["name"],
                "dump": sub["dump"],
                "op": sub["op"],
                "language": sub["language"],
                "label": sub["label"],
                "bug_class": sub["bug_class"],
                "fixed_verdict": fixed_says,
                "fixed_reason": fixed["reason"].iloc[0] if len(fixed) else None,
                "fuzz_verdict": fuzz_says,
                "failed_cases": failed,
                "total_cases": int(len(ran)),
                "declined_cases": declined,
                "skipped_cases": int((every["outcome"] == Outcome.SKIPPED).sum()),
                # of those, never run: the submission's budget was spent, or it was settled (pacing.py)
                "stopped_cases": int(len(stopped)),
                "stopped_reason": stopped["reason"].iloc[0] if len(stopped) else None,
                # of those, stopped by the sandbox's refusal of a call (a write outside, a socket, a
                # process): not judged, never a failure; the refusal is in `findings`
                "refused_cases": int(refusals.sum()),
                "first_failure_outcome": first["outcome"] if first else None,
                "first_failing_input": first_input,
                "first_failure_replay": first.get("replay") if first else None,
                "illusion": bool(fixed_says == FixedVerdict.PASS and fuzz_says == FuzzVerdict.FLAGGED),
                "diagnosis": submission_diagnosis(fuzz),
                "cause": cause,
                "cause_evidence": evidence,
                "severity": severity(flagged_tier, cuda_ran),
                "cuda_ran": cuda_ran,  # CUDA submissions: yes | no | unknown (analysis/cuda_usage.py)
                "cuda_build": cuda_build,
                "robustness_in_headline": robustness_in_headline,
                "robustness_kinds": robustness.kinds_text(found),
                "robustness_failed_cases": sum(f["failed_cases"] for f in found),
                "robustness": robustness.as_json(found),
                "fuzz_verdict_all": all_says,
                "illusion_all": bool(fixed_says == FixedVerdict.PASS and all_says == FuzzVerdict.FLAGGED),
                "severity_all": severity(severity_all, cuda_ran),
            }
        )
    return pd.DataFrame(rows)
