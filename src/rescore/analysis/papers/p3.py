"""P3: bug recall and control false positives per input strategy at the published budget, and the
recall of each shape-dependent buggy kernel per strategy.

The published design is reproduced on purpose: its seven strategies (two renamed, see
config/published/strategies.csv), each judged on its first `iterations` cases per dtype, counted
at case level as the paper counts them. rescore's oracle is NaN-aware (a NaN or Inf where the
reference has the same passes); the paper's validator failed any output holding a NaN or Inf. Both
are given: the NaN-unaware rows (the paper's rule) flag every case that rescore flags or whose
output held one (the cases column `output_nonfinite`, recorded where the output is judged). A cases
table made before that column existed cannot give them, and those rows say so.
"""

from __future__ import annotations

import json

import pandas as pd

from rescore.analysis.papers.match import MATCHED, match_kernels, usable
from rescore.analysis.papers.published import any_differs, differs, parse
from rescore.analysis.strategies_study import strategies_table, study_cases

SHAPE_STRATEGIES = ("default", "boundary", "regular", "adversarial")
NAN_COLUMN = "output_nonfinite"  # cases column: the candidate's output held a NaN or Inf (oracle/judge.py)
NAN_AWARE = "nan-aware (rescore)"
NAN_UNAWARE = "nan-unaware (published)"
CANNOT = "cannot be given: "
_COLS = {"case_recall": "bug_recall", "case_fp": "control_fp"}


def _stats(table: pd.DataFrame) -> pd.DataFrame:
    out = pd.DataFrame({"strategy": table["strategy"]})
    for src, dst in _COLS.items():
        for part in ("k", "n", "rate", "lo", "hi"):
            out[f"{dst}_{part}" if part != "rate" else dst] = table[f"{src}_{part}"].to_numpy()
    out["kernel_recall"] = table["kernel_recall_rate"].to_numpy()
    out["kernel_fp"] = table["kernel_fp_rate"].to_numpy()
    out["kernel_flag"] = table["kernel_flag_rate"].to_numpy()  # unlabelled kernels flagged
    out["cases"] = table["cases"].to_numpy()
    out["note"] = table["note"].to_numpy()
    return out


def nan_unaware_gap(df: pd.DataFrame) -> str | None:
    """Why the NaN-unaware verdict cannot be given on these study cases (None when it can): the cases
    table lacks `output_nonfinite`, or passing cases carry no value for it (a run made before rescore
    recorded it). Only passing cases matter: a flagged case fails under both rules."""
    if NAN_COLUMN not in df:
        return (f"{CANNOT}the cases table has no `{NAN_COLUMN}` column (made by a rescore that did not "
                "record whether an output held a NaN or Inf); run the check stage again to get these rows")
    unknown = int((~df["flagged"] & df[NAN_COLUMN].isna()).sum())
    if unknown:
        return (f"{CANNOT}{unknown} of {int((~df['flagged']).sum())} passing cases do not record "
                f"`{NAN_COLUMN}` (made by an older rescore); run the check stage again to get these rows")
    return None


def nan_unaware(df: pd.DataFrame) -> pd.DataFrame:
    """The study cases as the paper's validator judges them: also flagged when the output held a NaN
    or Inf, wherever the reference has the same value."""
    return df.assign(flagged=df["flagged"] | df[NAN_COLUMN].astype("boolean").fillna(False).astype(bool))


def headline_table(
    cases: pd.DataFrame, submissions: pd.DataFrame, iterations: int, names: dict[str, str], published: pd.DataFrame
) -> pd.DataFrame:
    """One row per strategy (the paper's seven first, under their published names), NaN-aware, and
    beside each of the paper's strategies its NaN-unaware row (the paper's rule), or a row that says
    why this cases table cannot give it."""
    df = study_cases(cases, usable(submissions), iterations)
    pub = {names.get(p["strategy"], p["strategy"]): p for p in published.to_dict("records")}
    frames = [_stats(strategies_table(df)).assign(validator=NAN_AWARE)] if len(df) else []
    gap = nan_unaware_gap(df) if len(df) else None
    paper_cases = df[df["strategy"].isin(pub)]
    if len(paper_cases) and gap is None:
        frames.append(_stats(strategies_table(nan_unaware(paper_cases))).assign(validator=NAN_UNAWARE))
    elif len(paper_cases):
        frames.append(pd.DataFrame({"strategy": sorted(set(paper_cases["strategy"])), "validator": NAN_UNAWARE,
                                    "note": gap}))
    stats = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["strategy", "validator"])
    paper_of = {v: k for k, v in names.items()}
    rows = []
    for r in stats.to_dict("records"):
        p = pub.get(r["strategy"])
        row = {
            **r,
            "paper_strategy": paper_of.get(r["strategy"]) if p else None,
            "bug_recall_published": p["bug_recall"] if p else None,
            "control_fp_published": p["control_fp"] if p else None,
            "in_paper": p is not None,
        }
        flag, which = (
            any_differs({c: differs(r.get(c), parse(row[f"{c}_published"])) for c in ("bug_recall", "control_fp")})
            if p
            else (None, "")
        )
        rows.append({**row, "differs": flag, "differs_in": which})
    seen = {r["strategy"] for r in rows}
    for strategy, p in pub.items():
        if strategy not in seen:
            rows.append(
                {
                    "strategy": strategy,
                    "paper_strategy": p["strategy"],
                    "validator": NAN_AWARE,
                    "bug_recall_published": p["bug_recall"],
                    "control_fp_published": p["control_fp"],
                    "in_paper": True,
                    "differs": None,
                    "differs_in": "",
                    "note": "not run in this dump",
                }
            )
    out = pd.DataFrame(rows)
    if "note" not in out:
        out["note"] = None
    out["differs"] = out["differs"].astype("boolean")
    order = {s: i for i, s in enumerate(pub)}
    out["_o"] = out["strategy"].map(order).fillna(len(order)) + out["validator"].eq(NAN_UNAWARE) * 0.5
    return out.sort_values(["_o", "strategy"]).drop(columns="_o").reset_index(drop=True)


def shape_dependent(submissions: pd.DataFrame) -> set[str]:
    """Buggy submissions whose trigger names sizes: their bug shows only at some shapes."""
    out = set()
    for r in usable(submissions).to_dict("records"):
        try:
            trig = json.loads(r["trigger"]) if isinstance(r.get("trigger"), str) else {}
        except ValueError:
            trig = {}
        if r["label"] == "buggy" and isinstance(trig, dict) and trig.get("sizes"):
            out.add(r["submission_id"])
    return out


def shape_table(
    cases: pd.DataFrame, submissions: pd.DataFrame, iterations: int, mapping: pd.DataFrame, published: pd.DataFrame
) -> pd.DataFrame:
    """Per (buggy kernel, strategy): the fraction of its cases flagged, beside the paper's percentage.
    Kernels: the paper's rows (through the mapping) and every shape-dependent buggy kernel of the dump."""
    subs = usable(submissions)
    df = study_cases(cases, subs, iterations)
    df = df[df["strategy"].isin(SHAPE_STRATEGIES)]
    matches = match_kernels(mapping, subs).set_index("paper_name")
    meta = subs.set_index("submission_id")
    kernels: list[tuple[str | None, str | None, str]] = []  # (submission_id, paper row name, match)
    for p in published["buggy_kernel"]:
        m = matches.loc[p] if p in matches.index else None
        kernels.append(
            (
                m["submission_id"] if m is not None and m["match"] == MATCHED else None,
                p,
                m["match"] if m is not None else "not in mapping.csv",
            )
        )
    taken = {k for k, _, _ in kernels if k}
    extra = sorted(shape_dependent(subs) - taken, key=lambda s: meta.loc[s, "name"])
    kernels += [(s, None, "new") for s in extra]
    pub = published.set_index("buggy_kernel")
    rows = []
    for sid, paper, how in kernels:
        g = df[df["submission_id"] == sid] if sid else df.iloc[0:0]
        for strategy in SHAPE_STRATEGIES:
            c = g[g["strategy"] == strategy]
            k, n = (int(c["flagged"].sum()), int(len(c))) if sid else (None, None)
            text = pub.loc[paper, strategy] if paper and strategy in pub.columns else None
            rate = k / n if n else float("nan")
            rows.append(
                {
                    "kernel": paper or meta.loc[sid, "name"],
                    "name": meta.loc[sid, "name"] if sid else None,
                    "op": meta.loc[sid, "op"] if sid else None,
                    "bug_class": meta.loc[sid, "bug_class"] if sid else None,
                    "strategy": strategy,
                    "recall": rate,
                    "recall_k": k,
                    "recall_n": n,
                    "recall_published": text,
                    "differs": differs(rate, parse(text)) if text else None,
                    "in_paper": paper is not None,
                    "match": how,
                }
            )
    out = pd.DataFrame(rows)
    out["differs"] = out["differs"].astype("boolean")
    for col in ("recall_k", "recall_n"):
        out[col] = out[col].astype("Int64")
    return out
