"""How tight the comparison should be: per-(op, dtype) calibration from controls on calibration
seeds, and every tolerance policy judged on the evaluation seeds from the same recorded cases.

Each case stores, per policy, max |out - ref| / bound (`policy_ratios`), so a policy (and any
safety multiplier of the calibrated one) is judged without re-running anything.

Recall and false positives count labelled submissions only, and calibration needs controls
(submissions labelled correct). A real dump's unlabelled submissions get flag rates per policy,
and every row says in `needs_labels` and `note` what its labels leave out.
"""

from __future__ import annotations

import json
import logging

import numpy as np
import pandas as pd

from rescore.analysis.study import UNLABELLED, claimed, labels_note, observable, study_label, wilson
from rescore.model.outcomes import FLAGGING, TOLERANCE_JUDGED, Outcome
from rescore.model.records import LABELS
from rescore.model.tolerances import DTYPES, FIXED_POLICIES

FIXED_JUDGED = (*FIXED_POLICIES, "reference-lowp")  # policies that need no calibration
POLICIES = (*FIXED_JUDGED, "p95x1.5", "calibrated")
CALIBRATION_COLUMNS = ["op", "dtype", "k", "k_observed", "p95x1.5_atol", "n_cases", "n_controls", "strategies",
                       "quantile"]
TIGHTENING_COLUMNS = ["op", "dtype", "current_policy", "current_atol", "calibrated_k", "tightening", "p95x1.5_atol",
                      "p95_tightening", "note"]
UNCALIBRATED_NOTE = ("this policy needs calibration: no control (a submission labelled correct) calibrated "
                     "any (op, dtype)")
K_FLOOR = 1.0  # one unit of rounding at the reference's scale: an exact control must not calibrate k = 0

log = logging.getLogger("rescore")


class CalibrationError(ValueError):
    """An (op, dtype) the study must judge has no correct control to calibrate from."""


def _with_meta(cases: pd.DataFrame, submissions: pd.DataFrame, labelled: bool = True) -> pd.DataFrame:
    """Fuzz cases that ran, with their submission's label, bug class, op and control: of labelled
    submissions only, or (labelled=False) of every one, labels other than LABELS as UNLABELLED."""
    meta = submissions.set_index("submission_id").reindex(columns=["label", "bug_class", "op", "control"])
    df = cases[cases["oracle"] == "fuzz"]
    df = df[claimed(df, submissions)].join(meta, on="submission_id")
    keep = df["label"].isin(LABELS) if labelled else pd.Series(True, index=df.index)
    df = df[keep & ~df["outcome"].isin([Outcome.SKIPPED, Outcome.DECLINED])].copy()
    df["label"] = study_label(df["label"])
    df["ratios"] = df["policy_ratios"].map(lambda s: json.loads(s) if isinstance(s, str) and s else {})
    return df


def calibrate(cases: pd.DataFrame, submissions: pd.DataFrame, quantile: float = 1.0) -> pd.DataFrame:
    """Per (op, dtype): k of the calibrated error model (the `quantile` of the controls' ratios; 1.0 is
    the max) and the published p95 x 1.5 absolute tolerance, from calibration-seed cases only."""
    df = _with_meta(cases, submissions)
    cal = df[(df["purpose"] == "calibration") & (df["label"] == "correct") & df["outcome"].isin(TOLERANCE_JUDGED)]
    rows = []
    for (op, dtype), g in cal.groupby(["op", "dtype"]):
        base = np.array([r.get("calibrated-base", np.nan) for r in g["ratios"]], dtype=float)
        base = base[np.isfinite(base)]
        abs_err = g["max_abs_err"].to_numpy(dtype=float)
        abs_err = abs_err[np.isfinite(abs_err)]
        if not len(base):
            continue
        rows.append({
            "op": op, "dtype": dtype, "k": max(K_FLOOR, float(np.quantile(base, quantile))),
            "k_observed": float(np.quantile(base, quantile)),
            "p95x1.5_atol": float(1.5 * np.quantile(abs_err, 0.95)) if len(abs_err) else np.nan,
            "n_cases": int(len(base)), "n_controls": int(g["submission_id"].nunique()),
            "strategies": ",".join(sorted(g["strategy"].unique())), "quantile": quantile,
        })
    return pd.DataFrame(rows, columns=CALIBRATION_COLUMNS)


def _outcomes(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(cases a tolerance judges, cases flagged whatever the tolerance, nonfinite cases) as masks."""
    judged = df["outcome"].isin(TOLERANCE_JUDGED).to_numpy()
    return judged, df["outcome"].isin(FLAGGING).to_numpy() & ~judged, (df["outcome"] == Outcome.NONFINITE).to_numpy()


def judge_fixed(df: pd.DataFrame) -> pd.DataFrame:
    """One column per policy that needs no calibration (FIXED_JUDGED): True where it flags the case."""
    judged, other_flag, nonfinite = _outcomes(df)
    out = pd.DataFrame(index=df.index)
    for name in FIXED_JUDGED:
        r = np.array([x.get(name, np.inf) for x in df["ratios"]], dtype=float)
        out[name] = other_flag | (judged & (nonfinite | (r > 1.0)))
    return out


def judge(df: pd.DataFrame, calibration: pd.DataFrame, multiplier: float) -> pd.DataFrame:
    """One column per policy: True where the case is flagged under that policy."""
    cal = calibration.set_index(["op", "dtype"])
    keys = list(zip(df["op"], df["dtype"]))
    judged, other_flag, nonfinite = _outcomes(df)
    missing = sorted({k for k, j in zip(keys, judged) if j and k not in cal.index})
    if missing:
        raise CalibrationError(
            "no correct control to calibrate from for (op, dtype) " + ", ".join(f"{o}/{d}" for o, d in missing)
            + ": add a control for these ops, or run calibration cases (config `calibration`) on their dtypes")
    out = judge_fixed(df)
    per_case = pd.MultiIndex.from_arrays([df["op"], df["dtype"]])
    fitted = cal[["k", "p95x1.5_atol"]].reindex(per_case)  # one lookup for all cases; NaN where not judged
    k = fitted["k"].to_numpy(dtype=float)
    base = np.array([x.get("calibrated-base", np.inf) for x in df["ratios"]], dtype=float)
    out["calibrated"] = other_flag | (judged & (nonfinite | (base > k * multiplier)))
    atol = fitted["p95x1.5_atol"].to_numpy(dtype=float)
    err = df["max_abs_err"].to_numpy(dtype=float)
    out["p95x1.5"] = other_flag | (judged & (nonfinite | ~(err <= atol)))
    return out


PAIRED_KEYS = ["strategy", "seed", "dtype"]  # the same input: seeds are keyed by the problem


def control_flagged(df: pd.DataFrame, flagged: pd.Series) -> pd.Series:
    """Per case: whether the policy also flags the case's control on the same input (False where the
    control has no such case, as for a dtype it declines, or there is no control)."""
    if not {"name", "control"} <= set(df.columns):
        return pd.Series(False, index=df.index)
    ctl = df["label"] == "correct"
    own = pd.Series(flagged[ctl].to_numpy(dtype=bool),
                    index=pd.MultiIndex.from_arrays([df.loc[ctl, "name"], *(df.loc[ctl, k] for k in PAIRED_KEYS)]))
    own = own[~own.index.duplicated()]
    theirs = pd.MultiIndex.from_arrays([df["control"], *(df[k] for k in PAIRED_KEYS)])
    return pd.Series(own.reindex(theirs).fillna(False).to_numpy(dtype=bool), index=df.index)


def _rate(prefix: str, k: int, n: int) -> dict:
    lo, hi = wilson(k, n)
    return {f"{prefix}_k": k, f"{prefix}_n": n, f"{prefix}_rate": k / n if n else np.nan,
            f"{prefix}_lo": lo, f"{prefix}_hi": hi}


def policy_table(df: pd.DataFrame, flagged: pd.DataFrame, multiplier: float) -> pd.DataFrame:
    """Per policy: recall and control false positives, with Wilson intervals. `paired_*` recall
    counts a buggy case only where the policy passes its control on the same input: a policy that
    flags the control there cannot tell the bug from rounding (p95x1.5 "found" a CUDA softmax whose
    bug no case triggered, through errors of 1e-7 that its control made on the same inputs)."""
    rows = []
    for policy in POLICIES:
        f = flagged[policy]
        bug, ctl = df["label"] == "buggy", df["label"] == "correct"
        kern = f.groupby([df["submission_id"], df["label"]]).any().reset_index()
        kb, kc = kern[kern["label"] == "buggy"][policy], kern[kern["label"] == "correct"][policy]
        paired = (f & ~control_flagged(df, f))[bug]
        kp = paired.groupby(df.loc[bug, "submission_id"]).any()
        row = {"policy": policy, "multiplier": multiplier if policy == "calibrated" else np.nan}
        for prefix, k, n in (("case_recall", int(f[bug].sum()), int(bug.sum())),
                             ("kernel_recall", int(kb.sum()), len(kb)),
                             ("paired_case_recall", int(paired.sum()), int(bug.sum())),
                             ("paired_kernel_recall", int(kp.sum()), len(kp)),
                             ("case_fp", int(f[ctl].sum()), int(ctl.sum())),
                             ("kernel_fp", int(kc.sum()), len(kc))):
            row.update(_rate(prefix, k, n))
        rows.append(row)
    return pd.DataFrame(rows)


def evaluation_frame(cases: pd.DataFrame, submissions: pd.DataFrame) -> pd.DataFrame:
    """The evaluation cases, less those of GPU-only bug classes that ran on the CPU (`observable`):
    there the variant computes correctly, and a tight policy that flags it flags correct rounding."""
    df = _with_meta(cases, submissions)
    return observable(df[df["purpose"] == "evaluation"])


def uncalibrated(df: pd.DataFrame, calibration: pd.DataFrame) -> list[str]:
    """The (op, dtype) pairs, as "op/dtype", of judged cases that no control calibrated (the op has
    no control, or its control's cases are missing, as in a run cut short)."""
    have = set(zip(calibration["op"], calibration["dtype"])) if len(calibration) else set()
    judged = df[df["outcome"].isin(TOLERANCE_JUDGED)]
    return sorted({f"{o}/{d}" for o, d in zip(judged["op"], judged["dtype"]) if (o, d) not in have})


def comparable_frame(cases: pd.DataFrame, submissions: pd.DataFrame, calibration: pd.DataFrame
                     ) -> tuple[pd.DataFrame, list[str]]:
    """The evaluation cases every policy can judge, and the (op, dtype) pairs left out: all policies
    are compared on the same cases, so a pair the calibrated policy cannot judge is out for all."""
    df = evaluation_frame(cases, submissions)
    left_out = uncalibrated(df, calibration)
    if left_out:
        log.warning("tolerance study: no control calibrated %s; their cases are left out of every policy",
                    ", ".join(left_out))
        df = df[~(df["op"] + "/" + df["dtype"]).isin(left_out)]
    return df, left_out


def unlabelled_frame(cases: pd.DataFrame, submissions: pd.DataFrame) -> pd.DataFrame:
    """The evaluation cases of unlabelled submissions: they get flag rates, never recall or false positives."""
    df = _with_meta(cases, submissions, labelled=False)
    return df[(df["purpose"] == "evaluation") & (df["label"] == UNLABELLED)]


def flag_table(df: pd.DataFrame, calibration: pd.DataFrame, multiplier: float) -> pd.DataFrame:
    """Per policy: the unlabelled cases and kernels of `df` it flags (`case_flag_*`, `kernel_flag_*`),
    over the cases it can judge: all of them for a policy that needs no calibration; for p95x1.5
    and calibrated, those whose (op, dtype) a control calibrated (`flag_uncalibrated` names the rest)."""
    left_out = uncalibrated(df, calibration)
    scoped = df[pd.Series([f"{o}/{d}" not in left_out for o, d in zip(df["op"], df["dtype"])], index=df.index,
                          dtype=bool)]
    fixed, calibrated = judge_fixed(df), judge(scoped, calibration, multiplier)
    rows = []
    for policy in POLICIES:
        part, f = (df, fixed[policy]) if policy in FIXED_JUDGED else (scoped, calibrated[policy])
        kernels = f.groupby(part["submission_id"]).any()
        rows.append({"policy": policy, **_rate("case_flag", int(f.sum()), len(f)),
                     **_rate("kernel_flag", int(kernels.sum()), len(kernels)),
                     "flag_uncalibrated": "" if policy in FIXED_JUDGED else ", ".join(left_out)})
    return pd.DataFrame(rows)


def _with_flags(table: pd.DataFrame, df: pd.DataFrame, unlabelled: pd.DataFrame, calibration: pd.DataFrame,
                multiplier: float) -> pd.DataFrame:
    """`table` (policy_table of the labelled cases `df`) with the unlabelled cases' flag rates, kernel
    counts per label, and per policy whether it needs labels it lacks and what they leave out."""
    counts = [df.loc[df["label"] == label, "submission_id"].nunique() for label in ("buggy", "correct")]
    counts.append(unlabelled["submission_id"].nunique())
    out = table.merge(flag_table(unlabelled, calibration, multiplier), on="policy", how="left")
    out["buggy_kernels"], out["control_kernels"], out["unlabelled_kernels"] = counts
    base = labels_note(*counts)
    uncalibrated_policy = out["policy"].isin(["p95x1.5", "calibrated"]) & calibration.empty
    out["needs_labels"] = uncalibrated_policy | (not (counts[0] and counts[1]))
    out["note"] = ["; ".join(filter(None, (UNCALIBRATED_NOTE if u else "", base))) for u in uncalibrated_policy]
    return out


def tolerances_table(cases: pd.DataFrame, submissions: pd.DataFrame, calibration: pd.DataFrame,
                     multiplier: float) -> pd.DataFrame:
    """Per policy: recall and control false positives over the labelled cases every policy can judge,
    flag rates over the unlabelled ones (see flag_table), and what the labels leave out (`note`)."""
    df, left_out = comparable_frame(cases, submissions, calibration)
    table = policy_table(df, judge(df, calibration, multiplier), multiplier)
    table["uncalibrated_left_out"] = ", ".join(left_out)
    return _with_flags(table, df, unlabelled_frame(cases, submissions), calibration, multiplier)


def sweep_table(cases: pd.DataFrame, submissions: pd.DataFrame, calibration: pd.DataFrame,
                multipliers: list[float]) -> pd.DataFrame:
    """The calibrated policy's rows of tolerances_table at each safety multiplier."""
    df, _ = comparable_frame(cases, submissions, calibration)
    unlabelled = unlabelled_frame(cases, submissions)
    rows = [_with_flags(policy_table(df, judge(df, calibration, m), m), df, unlabelled, calibration, m)
            .query("policy == 'calibrated'") for m in multipliers]
    return pd.concat(rows, ignore_index=True)


def tightening_table(calibration: pd.DataFrame, cases: pd.DataFrame, submissions: pd.DataFrame,
                     current: str = "kernelbench-v0.1", multiplier: float = 1.0) -> pd.DataFrame:
    """Per (op, dtype): the current policy's allowed error over the calibrated one, at the reference
    scales the calibration cases saw (median), and the same for the published p95 x 1.5 atol. An
    (op, dtype) that evaluation cases judge but no control calibrated gets NaN and a `note`."""
    df = _with_meta(cases, submissions, labelled=False)
    cal_cases = df[(df["purpose"] == "calibration") & (df["label"] == "correct")]
    rows = []
    for r in calibration.to_dict("records"):
        g = cal_cases[(cal_cases["op"] == r["op"]) & (cal_cases["dtype"] == r["dtype"])]
        mag = g["ref_max_abs"].to_numpy(dtype=float)
        length = g["reduction_len"].fillna(1).clip(lower=1).to_numpy(dtype=float)
        atol, rtol = FIXED_POLICIES[current][r["dtype"]]
        eps = float(np.finfo(np.float16).eps) if r["dtype"] == "float16" else (
            2.0 ** -7 if r["dtype"] == "bfloat16" else float(np.finfo(np.float32).eps))
        assert r["dtype"] in DTYPES
        cur = atol + rtol * mag
        calib = r["k"] * multiplier * eps * (mag + np.sqrt(length) * mag)
        ratio = np.median(cur / np.maximum(calib, 1e-300)) if len(mag) else np.nan
        rows.append({"op": r["op"], "dtype": r["dtype"], "current_policy": current, "current_atol": atol,
                     "calibrated_k": r["k"], "tightening": float(ratio),
                     "p95x1.5_atol": r["p95x1.5_atol"], "p95_tightening": atol / r["p95x1.5_atol"]
                     if r["p95x1.5_atol"] and r["p95x1.5_atol"] > 0 else np.nan, "note": ""})
    have = set(zip(calibration["op"], calibration["dtype"]))
    judged = df[(df["purpose"] == "evaluation") & df["outcome"].isin(TOLERANCE_JUDGED)]
    for (op, dtype), g in judged.groupby(["op", "dtype"]):
        if (op, dtype) in have:
            continue
        labels = ", ".join(sorted(set(g["label"])))
        rows.append({"op": op, "dtype": dtype, "current_policy": current,
                     "current_atol": FIXED_POLICIES[current].get(dtype, (np.nan,))[0], "tightening": np.nan,
                     "p95_tightening": np.nan,
                     "note": "not calibrated: no control (a submission labelled correct) of this (op, dtype); "
                             f"submissions judged here: {g['submission_id'].nunique()} ({labels})"})
    return pd.DataFrame(rows, columns=TIGHTENING_COLUMNS)


def control_ratios(cases: pd.DataFrame, submissions: pd.DataFrame, calibration: pd.DataFrame,
                   multiplier: float) -> pd.DataFrame:
    """Each control case a tolerance judges (an evaluation case of a submission labelled correct):
    its error as a fraction of each policy's bound (<= 1 passes), the calibrated policy's at
    `multiplier` (None where its (op, dtype) was not calibrated). The control-error figure's data."""
    ev = evaluation_frame(cases, submissions)
    ctl = ev[(ev["label"] == "correct") & ev["outcome"].isin(list(TOLERANCE_JUDGED))]
    kmap = calibration.set_index(["op", "dtype"])["k"]
    ratios = pd.DataFrame({name: [r.get(name) for r in ctl["ratios"]] for name in FIXED_JUDGED})
    base = [r.get("calibrated-base") for r in ctl["ratios"]]
    ks = [kmap.get((o, d)) for o, d in zip(ctl["op"], ctl["dtype"])]
    ratios["calibrated"] = [b / (k * multiplier) if b is not None and k else None for b, k in zip(base, ks)]
    return ratios
