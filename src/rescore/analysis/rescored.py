"""Benchmarks re-scored: per dump, how many submissions the benchmark calls correct, how many rescore's
copy of its check reproduces, how many fuzzing flags, the illusion rate among the claimed-correct
(with a 95% Wilson interval), how severe those illusions are (severity.py), and how many of them are
on degenerate problems (`rescore.engine.degenerate`: a null candidate passes the benchmark's check).

Illusions and flags are the headline's (the illusion table's `fuzz_verdict`: model/evidence.py); the
robustness findings are counted apart, per kind, beside the illusions counting everything.
"""

from __future__ import annotations

import json

import pandas as pd

from rescore.analysis.severity import ALL_TIERS, CUDA_NEVER_RAN
from rescore.analysis.study import wilson
from rescore.model.builds import CudaRan
from rescore.model.evidence import ROBUSTNESS_KINDS
from rescore.model.outcomes import FLAGGING, FixedVerdict, FuzzVerdict

OUTCOME_COLUMNS = tuple(f"first_{o}" for o in sorted(FLAGGING))


def rescored_table(
    illusion: pd.DataFrame, submissions: pd.DataFrame, degenerate: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Per dump (and `all`): claimed vs reproduced vs fuzz-flagged, and the illusion rate.

    The illusion rate is over the claimed-correct submissions that fuzzing could run: those the
    benchmark calls correct (its `claimed_verdict`; in a dump without claims, rescore's copy of its
    check stands in, `basis` = fixed) that fuzzing flags. First-failure outcomes of the illusions
    are counted per outcome; diagnoses too, where the illusion table has a diagnosis column; every
    flagged submission is counted by its confirmed cause (`by_cause`, else its value pattern); and
    so are their severity tiers (severity.py: `tier_<tier>` illusions, with a 95% Wilson interval
    on their share of the claimed-correct that fuzzing could run, `tier_<tier>_lo` / `_hi`;
    `tier_cuda_never_ran` counts those claimed-correct that pass but never ran their own CUDA).
    `cuda_never_ran` counts every CUDA submission whose CUDA never ran, flagged or not, of the
    `cuda_known` whose cases say."""
    subs = submissions.copy()
    for col in ("claimed_verdict", "ingest_error", "problem_id"):
        if col not in subs.columns:
            subs[col] = None
    keep = [
        c
        for c in ("submission_id", "fixed_verdict", "fuzz_verdict", "first_failure_outcome", "severity", "cuda_ran",
                  "fuzz_verdict_all", "robustness_kinds", "robustness_in_headline")
        if c in illusion
    ]
    diag_col = next((c for c in ("first_failure_diagnosis", "diagnosis") if c in illusion.columns), None)
    if diag_col:
        keep.append(diag_col)
    if "cause" in illusion.columns:
        keep.append("cause")
    df = subs[["submission_id", "dump", "problem_id", "claimed_verdict", "ingest_error"]].merge(
        illusion[keep].drop_duplicates("submission_id"), on="submission_id", how="left"
    )
    df["has_claim"] = df["claimed_verdict"].notna()
    claims_by_dump = df.groupby("dump")["has_claim"].any()
    df["basis"] = df["dump"].map(lambda d: "claimed" if claims_by_dump.get(d, False) else "fixed")
    df["believed_correct"] = [
        (c == "correct") if b == "claimed" else (f == FuzzVerdict.PASS)
        for c, f, b in zip(df["claimed_verdict"], df["fixed_verdict"], df["basis"])
    ]
    degenerate_ids = set()
    if degenerate is not None and not degenerate.empty:
        degenerate_ids = set(degenerate.loc[degenerate["degenerate"].fillna(False).astype(bool), "problem_id"])
    rows = [
        _summary(dump, g, diag_col, degenerate_ids, degenerate is not None) for dump, g in df.groupby("dump", sort=True)
    ]
    if df["dump"].nunique() > 1:
        rows.append(_summary("all", df, diag_col, degenerate_ids, degenerate is not None))
    return pd.DataFrame(rows)


def _summary(dump: str, g: pd.DataFrame, diag_col: str | None, degenerate_ids: set, have_degenerate: bool) -> dict:
    ok = g[g["ingest_error"].isna()]
    fuzzed = ok["fuzz_verdict"].isin([FuzzVerdict.PASS, FuzzVerdict.FLAGGED, FuzzVerdict.DECLINED])
    believed = ok[ok["believed_correct"] & fuzzed]
    illusions = believed[believed["fuzz_verdict"] == FuzzVerdict.FLAGGED]
    k, n = len(illusions), len(believed)
    lo, hi = wilson(k, n)
    bases = sorted(set(g["basis"]))
    claimed_correct = ok["claimed_verdict"] == "correct"
    row = {
        "dump": dump,
        "n_submissions": len(g),
        "ingest_errors": int(g["ingest_error"].notna().sum()),
        "claimed_known": int(ok["has_claim"].sum()),
        "claimed_correct": int(claimed_correct.sum()),
        "reproduced_correct": int((ok["fixed_verdict"] == FixedVerdict.PASS).sum()),
        "claimed_correct_reproduced": int((claimed_correct & (ok["fixed_verdict"] == FixedVerdict.PASS)).sum()),
        "fixed_skipped": int((ok["fixed_verdict"] == FixedVerdict.SKIPPED).sum() + ok["fixed_verdict"].isna().sum()),
        "fuzz_evaluated": int(fuzzed.sum()),
        "fuzz_flagged": int((ok["fuzz_verdict"] == FuzzVerdict.FLAGGED).sum()),
        "basis": bases[0] if len(bases) == 1 else "mixed",
        "illusion_n": n,
        "illusion_k": k,
        "illusion_rate": k / n if n else float("nan"),
        "illusion_lo": lo,
        "illusion_hi": hi,
        "on_degenerate": int(believed["problem_id"].isin(degenerate_ids).sum()) if have_degenerate else None,
    }
    counts = illusions["first_failure_outcome"].value_counts() if "first_failure_outcome" in illusions else {}
    for col in OUTCOME_COLUMNS:
        row[col] = int(counts.get(col.removeprefix("first_"), 0))
    tiers = illusions["severity"].value_counts() if "severity" in illusions else None
    for tier in ALL_TIERS:
        if tier == CUDA_NEVER_RAN:  # never an illusion: counted among all the claimed-correct fuzzing could run
            count = int(believed["severity"].eq(tier).sum()) if "severity" in believed else None
        else:
            count = None if tiers is None else int(tiers.get(tier, 0))
        lo, hi = wilson(count, n) if count is not None else (None, None)
        row.update({f"tier_{tier}": count, f"tier_{tier}_lo": lo, f"tier_{tier}_hi": hi})
    if diag_col:
        diag = illusions[diag_col].fillna("").replace("", "none").value_counts()
        row["by_diagnosis"] = json.dumps({str(k): int(v) for k, v in sorted(diag.items())})
    else:
        row["by_diagnosis"] = None
    row["by_cause"] = _by_cause(ok[ok["fuzz_verdict"] == FuzzVerdict.FLAGGED], diag_col)
    ran = ok["cuda_ran"] if "cuda_ran" in ok else pd.Series(dtype=object)
    row["cuda_known"] = int(ran.notna().sum())  # CUDA submissions whose cases say whether their CUDA ran
    row["cuda_never_ran"] = int(ran.eq(CudaRan.NO).sum())  # flagged or not
    row.update(_robustness(ok, believed))
    return row


def _robustness(ok: pd.DataFrame, believed: pd.DataFrame) -> dict:
    """The robustness findings counted apart from the headline: submissions with any finding, with one
    whose headline passes, per kind; and the illusions counting every case (`illusion_all_*`)."""
    if "robustness_kinds" not in ok:
        return {}
    kinds = ok["robustness_kinds"].fillna("").map(lambda text: set(filter(None, text.split(","))))
    out = {
        "robustness_in_headline": bool(ok.get("robustness_in_headline", pd.Series(dtype=bool)).fillna(False).any()),
        "robustness_flagged": int(kinds.map(bool).sum()),
        "robustness_only": int((kinds.map(bool) & (ok["fuzz_verdict"] == FuzzVerdict.PASS)).sum()),
    }
    for kind in ROBUSTNESS_KINDS:
        out[f"robustness_{kind}"] = int(kinds.map(lambda found, k=kind.value: k in found).sum())
    k = int((believed["fuzz_verdict_all"] == FuzzVerdict.FLAGGED).sum())
    lo, hi = wilson(k, len(believed))
    out.update(illusion_all_k=k, illusion_all_rate=k / len(believed) if len(believed) else float("nan"),
               illusion_all_lo=lo, illusion_all_hi=hi)
    return out


def _by_cause(flagged: pd.DataFrame, diag_col: str | None) -> str | None:
    """Flagged submissions counted by the cause an experiment confirmed; one no experiment explained
    is counted by its value pattern, as `pattern:<diagnosis>`."""
    if "cause" not in flagged:
        return None
    causes = flagged["cause"].fillna("")
    if diag_col:
        pattern = "pattern:" + flagged[diag_col].fillna("").replace("", "none")
        causes = causes.where(causes != "", pattern)
    counts = causes.replace("", "pattern:none").value_counts()
    return json.dumps({str(k): int(v) for k, v in sorted(counts.items())})
