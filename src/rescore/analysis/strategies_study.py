"""Which test inputs find kernel bugs: recall and control false positives per strategy.

Every strategy is compared at the same budget (the first `seeds` cases per dtype). A bug class that
only a GPU can show (races, 32-bit offset overflow) is left out of recall when the cases ran on the
CPU, and the table says so. Recall and false positives count labelled submissions only; a real
dump's unlabelled submissions get flag rates (the share of them a strategy flags), and every row
says in `needs_labels` and `note` what its labels leave out.

A case flags only with headline evidence (model/evidence.py: a failure on ordinary values), unless the
config counts robustness findings toward the headline: a strategy whose values are all robustness
classes (`nan_injected`) then finds no headline bug, and `kernel_recall_all_*` / `kernel_fp_all_*`
give its kernel-level rates counting every failure, as before the split.
"""

from __future__ import annotations

import pandas as pd

from rescore.analysis.study import UNLABELLED, claimed, headline_mask, labels_note, observable, study_label, wilson
from rescore.model.outcomes import FLAGGING, Outcome

RATE_PARTS = ("k", "n", "rate", "lo", "hi")
RATES = ("case_recall", "kernel_recall", "case_fp", "kernel_fp", "case_flag", "kernel_flag", "kernel_recall_all",
         "kernel_fp_all")
STRATEGY_COLUMNS = [
    "strategy", *(f"{r}_{p}" for r in RATES for p in RATE_PARTS), "cases", "buggy_kernels", "control_kernels",
    "unlabelled_kernels", "median_cases_to_first_failure", "needs_labels", "note",
]
BY_CLASS_COLUMNS = ["strategy", "bug_class", *(f"recall_{p}" for p in RATE_PARTS), "needs_labels", "note"]
BUDGET_COLUMNS = ["strategy", "label", "bug_class", "budget", "found", "kernels", "recall", "flag_rate"]
NO_BUGGY_NOTE = "recall per bug class needs labels: no submission here is labelled buggy"


def study_cases(cases: pd.DataFrame, submissions: pd.DataFrame, seeds: int | None = None,
                robustness_in_headline: bool = False) -> pd.DataFrame:
    """Evaluation fuzz cases that ran (not skipped, not declined) in a dtype the submission claims,
    with each submission's label (`correct`, `buggy`, or UNLABELLED for any other), whether the case
    flags its kernel (`flagged`: a failure that is headline evidence) and whether it fails at all
    (`flagged_all`)."""
    meta = submissions.set_index("submission_id").reindex(columns=["label", "bug_class", "op", "language",
                                                                    "declines"])
    df = cases[(cases["oracle"] == "fuzz") & (cases["purpose"] == "evaluation")]
    df = df[~df["outcome"].isin([Outcome.SKIPPED, Outcome.DECLINED])]
    df = df[claimed(df, submissions)].join(meta, on="submission_id")
    df["label"] = study_label(df["label"])
    if seeds is not None:
        df = df[df["case_index"] < seeds]
    df = observable(df)
    df["flagged_all"] = df["outcome"].isin(FLAGGING)
    df["flagged"] = df["flagged_all"] & headline_mask(df, robustness_in_headline)
    return df


def _rate(k: int, n: int) -> dict:
    lo, hi = wilson(k, n)
    return {"k": k, "n": n, "rate": k / n if n else float("nan"), "lo": lo, "hi": hi}


def _cases_to_first_failure(group: pd.DataFrame) -> float | None:
    ordered = group.sort_values(["case_index", "dtype"]).reset_index(drop=True)
    hits = ordered.index[ordered["flagged"]]
    return float(hits[0] + 1) if len(hits) else None


def strategies_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per strategy: recall over buggy kernels, false positives over controls, flag rates over the
    unlabelled ones (NaN rates where a strategy has no kernel of that label, and a note that says so)."""
    rows = []
    for strategy, g in df.groupby("strategy"):
        parts = {label: g[g["label"] == label] for label in ("buggy", "correct", UNLABELLED)}
        kernels = {label: part.groupby("submission_id")["flagged"].any() for label, part in parts.items()}
        firsts = [c for _, sg in parts["buggy"].groupby("submission_id")
                  if (c := _cases_to_first_failure(sg)) is not None]
        row = {"strategy": strategy}
        for prefix, label in (("recall", "buggy"), ("fp", "correct"), ("flag", UNLABELLED)):
            cases, per_kernel = parts[label], kernels[label]
            row.update({f"case_{prefix}_{k}": v for k, v in _rate(int(cases["flagged"].sum()), len(cases)).items()})
            row.update({f"kernel_{prefix}_{k}": v for k, v in _rate(int(per_kernel.sum()), len(per_kernel)).items()})
        for prefix, label in (("recall", "buggy"), ("fp", "correct")):
            every = parts[label].groupby("submission_id")["flagged_all"].any()
            row.update({f"kernel_{prefix}_all_{k}": v for k, v in _rate(int(every.sum()), len(every)).items()})
        counts = [len(kernels[label]) for label in ("buggy", "correct", UNLABELLED)]
        row.update({
            "cases": len(g),
            "buggy_kernels": counts[0],
            "control_kernels": counts[1],
            "unlabelled_kernels": counts[2],
            "median_cases_to_first_failure": float(pd.Series(firsts).median()) if firsts else float("nan"),
            "needs_labels": not (counts[0] and counts[1]),
            "note": labels_note(*counts),
        })
        rows.append(row)
    table = pd.DataFrame(rows, columns=STRATEGY_COLUMNS)
    return table.sort_values(["kernel_recall_rate", "kernel_flag_rate"], ascending=False,
                             na_position="last").reset_index(drop=True)


def by_class_table(df: pd.DataFrame) -> pd.DataFrame:
    """Kernel-level recall per (strategy, bug class); a strategy without buggy kernels gets one row
    that says recall per class needs labels."""
    bug = df[df["label"] == "buggy"]
    per_kernel = bug.groupby(["strategy", "bug_class", "submission_id"])["flagged"].any().reset_index()
    rows = []
    for (strategy, cls), g in per_kernel.groupby(["strategy", "bug_class"]):
        stats = _rate(int(g["flagged"].sum()), len(g))
        rows.append({"strategy": strategy, "bug_class": cls, **{f"recall_{k}": v for k, v in stats.items()},
                     "needs_labels": False, "note": ""})
    for strategy in sorted(set(df["strategy"]) - set(bug["strategy"])):
        rows.append({"strategy": strategy, "bug_class": None, **{f"recall_{k}": v for k, v in _rate(0, 0).items()},
                     "needs_labels": True, "note": NO_BUGGY_NOTE})
    return pd.DataFrame(rows, columns=BY_CLASS_COLUMNS)


def budget_table(df: pd.DataFrame) -> pd.DataFrame:
    """Kernels flagged within the first b cases (b = 1, 2, 4, ...) per strategy: for buggy kernels
    per bug class and over all classes (`(all)`), that is recall; for unlabelled kernels (`label`
    unlabelled, bug class `(unlabelled)`) it is a flag rate, and `recall` is NaN."""
    kernels = df[df["label"].isin(["buggy", UNLABELLED])]
    kernels = kernels.sort_values(["strategy", "submission_id", "case_index", "dtype"])
    kernels = kernels.assign(order=kernels.groupby(["strategy", "submission_id"]).cumcount())
    first = kernels[kernels["flagged"]].groupby(["strategy", "submission_id"])["order"].min()
    per_kernel = kernels.groupby(["strategy", "submission_id"]).agg(
        label=("label", "first"), bug_class=("bug_class", "first"), n=("order", "size"))
    per_kernel = per_kernel.join(first.rename("first_failure")).reset_index()
    max_n = int(per_kernel["n"].max()) if len(per_kernel) else 0
    budgets = [b for b in (1, 2, 4, 8, 16, 32, 64, 128, 256) if b <= max_n] or [1]
    buggy = per_kernel[per_kernel["label"] == "buggy"]
    groups = [(s, "buggy", cls, g) for (s, cls), g in buggy.groupby(["strategy", "bug_class"])]
    groups += [(s, "buggy", "(all)", g) for s, g in buggy.groupby("strategy")]
    groups += [(s, UNLABELLED, "(unlabelled)", g)
               for s, g in per_kernel[per_kernel["label"] == UNLABELLED].groupby("strategy")]
    rows = []
    for strategy, label, cls, g in groups:
        for b in budgets:
            found = int((g["first_failure"] < b).sum())
            rate = found / len(g)
            rows.append({"strategy": strategy, "label": label, "bug_class": cls, "budget": b, "found": found,
                         "kernels": len(g), "recall": rate if label == "buggy" else float("nan"), "flag_rate": rate})
    return pd.DataFrame(rows, columns=BUDGET_COLUMNS)


def heatmap_table(df: pd.DataFrame, submissions: pd.DataFrame) -> pd.DataFrame:
    """Fraction of cases flagged per (strategy, kernel) for buggy kernels (recall) and unlabelled
    ones (a flag rate; controls' flags are false positives, in the strategies table): the heatmap's data."""
    kernels = df[df["label"].isin(["buggy", UNLABELLED])]
    names = submissions.set_index("submission_id")["name"]
    out = kernels.groupby(["strategy", "submission_id", "label"])["flagged"].mean().reset_index()
    out["name"] = out["submission_id"].map(names)
    return out
