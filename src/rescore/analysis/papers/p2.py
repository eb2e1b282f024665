"""P2: buggy cases flagged and control false positives under the current per-op tolerance and under
the published p95 x 1.5 calibration, and the tightening factor per (op, dtype).

The published method is reproduced on purpose: calibrated atol = 1.5 x the 95th percentile of the
controls' max abs error on calibration seeds (`p95x1.5` in rescore.analysis.tolerance_study). The current
tolerance is the benchmark's own absolute atol per (op, dtype): a gpuemu entry's `tolerances`
where the dump has them, else gpuemu's default policy. rescore's own `calibrated` policy is shown
as extra rows (`in_paper` False). Every count is at case level, as the paper's are.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from rescore.analysis.papers.match import op_of
from rescore.analysis.papers.published import Printed, any_differs, differs, parse
from rescore.analysis.study import wilson
from rescore.analysis.tolerance_study import calibrate, evaluation_frame, judge
from rescore.analysis.tolerance_study import tightening_table as rescore_tightening
from rescore.model.outcomes import FLAGGING, TOLERANCE_JUDGED, Outcome
from rescore.model.tolerances import FIXED_POLICIES

DEFAULT_CURRENT = "gpuemu-default"
TIGHTENING_COLUMNS = (
    "op dtype method paper_op current_atol calibrated_atol tightening current_atol_published "
    "calibrated_atol_published tightening_published n_cases n_controls in_paper differs differs_in note"
).split()
POLICY_COLUMNS = {"current": "current", "p95x1.5": "calibrated"}  # rescore policy -> published column


def current_atols(tolerances: dict[str, dict], dtypes: list[str]) -> dict[tuple[str, str], float]:
    """(problem_id, dtype) -> the benchmark's absolute atol, from per-problem `{dtype: {"atol": x}}`."""
    out = {}
    for pid, tol in tolerances.items():
        for dtype in dtypes:
            atol = ((tol or {}).get(dtype) or {}).get("atol")
            if atol is not None:
                out[(pid, dtype)] = float(atol)
    return out


def _atol_column(df: pd.DataFrame, atols: dict[tuple[str, str], float]) -> np.ndarray:
    default = {d: a for d, (a, _) in FIXED_POLICIES[DEFAULT_CURRENT].items()}
    return np.array(
        [atols.get((p, d), default.get(d, np.nan)) for p, d in zip(df["problem_id"], df["dtype"])], dtype=float
    )


def judged_frame(
    cases: pd.DataFrame,
    submissions: pd.DataFrame,
    atols: dict,
    multiplier: float,
    strategies: list[str] | None,
    quantile: float = 1.0,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, int]:
    """(evaluation cases, flagged per policy incl. `current`, calibration, cases left out uncalibrated)."""
    cal = calibrate(cases, submissions, quantile)
    if cal.empty:  # no control ran calibration cases: nothing to judge the calibrated policies by
        cal = pd.DataFrame(columns=["op", "dtype", "k", "p95x1.5_atol", "n_cases", "n_controls"])
    df = evaluation_frame(cases, submissions)
    if strategies:
        df = df[df["strategy"].isin(strategies)]
    keys = set(zip(cal["op"], cal["dtype"])) if len(cal) else set()
    ok = pd.Series([k in keys for k in zip(df["op"], df["dtype"])], index=df.index, dtype=bool)
    judged = df["outcome"].isin(TOLERANCE_JUDGED)
    dropped = int((judged & ~ok).sum())
    df = df[ok | ~judged]
    flagged = judge(df, cal, multiplier) if len(df) else pd.DataFrame(index=df.index)
    atol = _atol_column(df, atols)
    err = df["max_abs_err"].to_numpy(dtype=float)
    other = df["outcome"].isin(FLAGGING).to_numpy() & ~df["outcome"].isin(TOLERANCE_JUDGED).to_numpy()
    nonfinite = (df["outcome"] == Outcome.NONFINITE).to_numpy()
    flagged["current"] = other | (df["outcome"].isin(TOLERANCE_JUDGED).to_numpy() & (nonfinite | ~(err <= atol)))
    df = df.assign(current_atol=atol)
    return df, flagged, cal, dropped


def tightening_table(
    df: pd.DataFrame,
    cal: pd.DataFrame,
    cases: pd.DataFrame,
    submissions: pd.DataFrame,
    mapping: pd.DataFrame,
    published: pd.DataFrame,
    multiplier: float,
) -> pd.DataFrame:
    """Per (op, dtype): current atol, calibrated atol and their ratio, beside the paper's row; rescore's
    `calibrated` policy as extra rows (its atol: the equivalent bound at the median reference scale)."""
    ops = op_of(mapping, submissions)
    pub = {(ops.get(p["op"], p["op"]), p["dtype"]): p for p in published.to_dict("records")}
    cur = df.groupby(["op", "dtype"])["current_atol"].median().to_dict() if len(df) else {}
    own = (
        rescore_tightening(cal, cases, submissions, current=DEFAULT_CURRENT, multiplier=multiplier)
        if len(cal)
        else pd.DataFrame(columns=["op", "dtype", "tightening"])
    )
    own = own.set_index(["op", "dtype"])["tightening"].to_dict()
    rows = []
    for r in cal.to_dict("records"):
        key = (r["op"], r["dtype"])
        current = cur.get(key, FIXED_POLICIES[DEFAULT_CURRENT][r["dtype"]][0])
        p = pub.get(key)
        p95 = r["p95x1.5_atol"]
        tight = current / p95 if p95 and p95 > 0 else np.nan
        default_atol = FIXED_POLICIES[DEFAULT_CURRENT][r["dtype"]][0]
        equiv = default_atol / own[key] if own.get(key) else np.nan
        for method, atol, factor in (
            ("p95x1.5", p95, tight),
            ("calibrated", equiv, current / equiv if equiv else np.nan),
        ):
            in_paper = method == "p95x1.5" and p is not None
            row = {
                "op": r["op"],
                "dtype": r["dtype"],
                "method": method,
                "paper_op": p["op"] if in_paper else None,
                "current_atol": current,
                "calibrated_atol": atol,
                "tightening": factor,
                "current_atol_published": p["current_atol"] if in_paper else None,
                "calibrated_atol_published": p["calibrated_atol"] if in_paper else None,
                "tightening_published": p["tightening"] if in_paper else None,
                "n_cases": r["n_cases"],
                "n_controls": r["n_controls"],
                "in_paper": in_paper,
            }
            rows.append(_with_differs(row))
    done = {(r["op"], r["dtype"]) for r in rows}
    for key, p in pub.items():
        if key not in done:
            rows.append(
                {
                    "op": key[0],
                    "dtype": key[1],
                    "method": "p95x1.5",
                    "paper_op": p["op"],
                    "current_atol_published": p["current_atol"],
                    "calibrated_atol_published": p["calibrated_atol"],
                    "tightening_published": p["tightening"],
                    "in_paper": True,
                    "note": "no control of this (op, dtype) in the dump: not calibrated",
                    "differs": None,
                }
            )
    out = pd.DataFrame(rows).reindex(columns=TIGHTENING_COLUMNS)
    out["differs"] = out["differs"].astype("boolean")
    order = out["in_paper"].map({True: 0, False: 1}) * 10 + out["method"].map({"p95x1.5": 0, "calibrated": 1})
    return (
        out.assign(_o=order)
        .sort_values(["_o", "tightening"], ascending=[True, False])
        .drop(columns="_o")
        .reset_index(drop=True)
    )


def _with_differs(row: dict) -> dict:
    if not row["in_paper"]:
        return {**row, "differs": None, "differs_in": ""}
    flag, which = any_differs(
        {c: differs(row[c], parse(row[f"{c}_published"])) for c in ("current_atol", "calibrated_atol", "tightening")}
    )
    return {**row, "differs": flag, "differs_in": which}


def _rate(k: int, n: int, label: str) -> dict:
    """k of n cases of kernels labelled `label`; with n = 0 a note that says the rate needs that label."""
    lo, hi = wilson(k, n)
    rate = k / n if n else np.nan
    note = "" if n else f"needs labels: no evaluation case of a kernel labelled {label}"
    reproduced = f"{k}/{n} ({100 * rate:.1f}%)" if n else f"{k}/0"
    return {"k": k, "n": n, "value": rate, "lo": lo, "hi": hi, "reproduced": reproduced, "note": note}


def headline_table(
    df: pd.DataFrame, flagged: pd.DataFrame, tightening: pd.DataFrame, published: pd.DataFrame
) -> pd.DataFrame:
    """Case-level buggy flagged / control false positives per policy, and the largest tightening."""
    pub = published.set_index("metric")
    bug, ctl = df["label"] == "buggy", df["label"] == "correct"
    rows = []
    for policy in ("current", "p95x1.5", "calibrated"):
        f = (flagged[policy] if policy in flagged else pd.Series(False, index=df.index)).rename("flag")
        kern = f.groupby([df["submission_id"], df["label"]]).any().reset_index()
        for metric, sel, label in (("buggy_flagged", bug, "buggy"), ("control_false_positives", ctl, "correct")):
            stats = _rate(int(f[sel].sum()), int(sel.sum()), label)
            col = POLICY_COLUMNS.get(policy)
            text = pub.loc[metric, col] if col and metric in pub.index else None
            kk = kern[kern["label"] == label]["flag"]
            rows.append(
                {
                    "metric": metric,
                    "policy": policy,
                    "policy_published": col,
                    **stats,
                    "kernels_k": int(kk.sum()),
                    "kernels_n": int(len(kk)),
                    "published": text,
                    "differs": differs(stats["value"], parse(text)) if text else None,
                    "in_paper": text is not None,
                }
            )
    own = tightening[(tightening["method"] == "p95x1.5") & tightening["tightening"].notna()]
    if len(own) and "largest_tightening" in pub.index:
        top = own.loc[own["tightening"].idxmax()]
        for policy, value, col in (
            ("current", top["current_atol"], "current"),
            ("p95x1.5", top["calibrated_atol"], "calibrated"),
        ):
            text = pub.loc["largest_tightening", col]
            p: Printed = parse(text)
            flag, _ = any_differs(
                {
                    "atol": differs(value, p),
                    "factor": differs(top["tightening"], Printed(text, p.factor, 0.5)) if p.factor else None,
                }
            )
            rows.append(
                {
                    "metric": "largest_tightening",
                    "policy": policy,
                    "policy_published": col,
                    "value": value,
                    "reproduced": f"{value:.3g} ({top['op']}/{top['dtype']}, {top['tightening']:.0f}x)",
                    "published": text,
                    "differs": flag,
                    "in_paper": True,
                }
            )
    out = pd.DataFrame(rows)
    out["differs"] = out["differs"].astype("boolean")
    return out
