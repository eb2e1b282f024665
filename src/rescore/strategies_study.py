"""Which test inputs find kernel bugs: recall and control false positives per strategy.

Every strategy is compared at the same budget (the first `seeds` cases per dtype). A bug class that
only a GPU can show (races, 32-bit offset overflow) is left out of recall when the cases ran on the
CPU, and the table says so.
"""

from __future__ import annotations

import pandas as pd

from rescore.outcomes import FLAGGING
from rescore.study import claimed, observable, wilson


def study_cases(cases: pd.DataFrame, submissions: pd.DataFrame, seeds: int | None = None) -> pd.DataFrame:
    """Evaluation fuzz cases of labelled submissions that ran (not skipped, not declined) in a dtype
    the submission claims, with labels."""
    meta = submissions.set_index("submission_id")[["label", "bug_class", "op", "language", "declines"]]
    df = cases[(cases["oracle"] == "fuzz") & (cases["purpose"] == "evaluation")]
    df = df[~df["outcome"].isin(["skipped", "declined"])]
    df = df[claimed(df, submissions)].join(meta, on="submission_id")
    df = df[df["label"].isin(["correct", "buggy"])].copy()
    if seeds is not None:
        df = df[df["case_index"] < seeds]
    df = observable(df)
    df["flagged"] = df["outcome"].isin(FLAGGING)
    return df


def _rate(k: int, n: int) -> dict:
    lo, hi = wilson(k, n)
    return {"k": k, "n": n, "rate": k / n if n else float("nan"), "lo": lo, "hi": hi}


def _cases_to_first_failure(group: pd.DataFrame) -> float | None:
    ordered = group.sort_values(["case_index", "dtype"]).reset_index(drop=True)
    hits = ordered.index[ordered["flagged"]]
    return float(hits[0] + 1) if len(hits) else None


def strategies_table(df: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for strategy, g in df.groupby("strategy"):
        bug, ctl = g[g["label"] == "buggy"], g[g["label"] == "correct"]
        bug_k = bug.groupby("submission_id")["flagged"].any()
        ctl_k = ctl.groupby("submission_id")["flagged"].any()
        firsts = [c for _, sg in bug.groupby("submission_id") if (c := _cases_to_first_failure(sg)) is not None]
        row = {"strategy": strategy}
        for prefix, stats in (
            ("case_recall", _rate(int(bug["flagged"].sum()), len(bug))),
            ("kernel_recall", _rate(int(bug_k.sum()), len(bug_k))),
            ("case_fp", _rate(int(ctl["flagged"].sum()), len(ctl))),
            ("kernel_fp", _rate(int(ctl_k.sum()), len(ctl_k))),
        ):
            row.update({f"{prefix}_{k}": v for k, v in stats.items()})
        row["cases"] = len(g)
        row["median_cases_to_first_failure"] = float(pd.Series(firsts).median()) if firsts else float("nan")
        rows.append(row)
    return pd.DataFrame(rows).sort_values("kernel_recall_rate", ascending=False).reset_index(drop=True)


def by_class_table(df: pd.DataFrame) -> pd.DataFrame:
    """Kernel-level recall per (strategy, bug class)."""
    bug = df[df["label"] == "buggy"]
    per_kernel = bug.groupby(["strategy", "bug_class", "submission_id"])["flagged"].any().reset_index()
    rows = []
    for (strategy, cls), g in per_kernel.groupby(["strategy", "bug_class"]):
        stats = _rate(int(g["flagged"].sum()), len(g))
        rows.append({"strategy": strategy, "bug_class": cls, **{f"recall_{k}": v for k, v in stats.items()}})
    return pd.DataFrame(rows)


def budget_table(df: pd.DataFrame) -> pd.DataFrame:
    """Kernel-level recall within the first b cases (b = 1, 2, 4, ...), per strategy and bug class."""
    bug = df[df["label"] == "buggy"].copy()
    bug["order"] = bug.groupby(["strategy", "submission_id"]).cumcount()
    bug = bug.sort_values(["strategy", "submission_id", "case_index", "dtype"])
    bug["order"] = bug.groupby(["strategy", "submission_id"]).cumcount()
    first = bug[bug["flagged"]].groupby(["strategy", "submission_id"])["order"].min()
    kernels = bug.groupby(["strategy", "submission_id"]).agg(bug_class=("bug_class", "first"), n=("order", "size"))
    kernels = kernels.join(first.rename("first_failure"))
    rows = []
    max_n = int(kernels["n"].max()) if len(kernels) else 0
    budgets = [b for b in (1, 2, 4, 8, 16, 32, 64, 128, 256) if b <= max_n] or [1]
    for (strategy, cls), g in kernels.reset_index().groupby(["strategy", "bug_class"]):
        for b in budgets:
            found = int((g["first_failure"] < b).sum())
            rows.append({"strategy": strategy, "bug_class": cls, "budget": b, "found": found, "kernels": len(g),
                         "recall": found / len(g)})
    for strategy, g in kernels.reset_index().groupby("strategy"):
        for b in budgets:
            found = int((g["first_failure"] < b).sum())
            rows.append({"strategy": strategy, "bug_class": "(all)", "budget": b, "found": found, "kernels": len(g),
                         "recall": found / len(g)})
    return pd.DataFrame(rows)


def heatmap_table(df: pd.DataFrame, submissions: pd.DataFrame) -> pd.DataFrame:
    """Fraction of cases flagged per (strategy, buggy kernel): the recall heatmap's data."""
    bug = df[df["label"] == "buggy"]
    names = submissions.set_index("submission_id")["name"]
    out = bug.groupby(["strategy", "submission_id"])["flagged"].mean().reset_index()
    out["name"] = out["submission_id"].map(names)
    return out
