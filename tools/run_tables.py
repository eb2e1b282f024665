"""Print the headline tables of one finished run as Markdown (what the README quotes).

Usage: `python tools/run_tables.py results/` (or the `results` path a `pipeline_bench.py` run printed).
Every number printed is read from that run's Parquet tables; nothing is computed anew.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd


def _rate(k: int, n: int, lo: float, hi: float) -> str:
    return f"{k}/{n} ({100 * k / n:.1f}%, {100 * lo:.1f}-{100 * hi:.1f})" if n else "-"


def verdicts(results: Path) -> str:
    ill = pd.read_parquet(results / "tables" / "illusion.parquet")
    ran = ill[ill["fuzz_verdict"] != "skipped"]
    rows = []
    for label, part in ran.groupby("label"):
        rows.append(
            {
                "label": label,
                "kernels": len(part),
                "fixed pass": int((part["fixed_verdict"] == "pass").sum()),
                "fuzz flagged": int((part["fuzz_verdict"] == "flagged").sum()),
                "fuzz declined": int((part["fuzz_verdict"] == "declined").sum()),
                "illusions (fixed pass, fuzz flagged)": int(part["illusion"].sum()),
            }
        )
    skipped = ill[ill["fuzz_verdict"] == "skipped"]
    text = pd.DataFrame(rows).to_markdown(index=False)
    if len(skipped):
        languages = ", ".join(sorted(set(skipped["language"])))
        text += f"\n\n{len(skipped)} kernels not run here (fuzz verdict `skipped`; languages: {languages})."
    return text


def _rate_columns(t: pd.DataFrame, columns: dict[str, str]) -> dict[str, list[str]]:
    """{header: "k/n (rate%, lo-hi)" per row} for the given {header: metric prefix} of a study table."""
    return {
        header: [_rate(*r) for r in zip(t[f"{m}_k"], t[f"{m}_n"], t[f"{m}_lo"], t[f"{m}_hi"])]
        for header, m in columns.items()
    }


RATES = {"buggy kernels found": "kernel_recall", "failing cases": "case_recall",
         "control cases flagged (FP)": "case_fp"}


UNLABELLED = {"unlabelled kernels flagged": "kernel_flag"}  # a real dump's kernels: a flag rate, not recall


def _unlabelled(t: pd.DataFrame) -> dict[str, str]:
    """The flag-rate column, where the run has unlabelled kernels (tables written before it have none)."""
    return UNLABELLED if "kernel_flag_n" in t and t["kernel_flag_n"].gt(0).any() else {}


def _labels_note(t: pd.DataFrame) -> str:
    notes = sorted({n for n in t.get("note", pd.Series(dtype=str)).dropna() if n})
    return "".join(f"\n\n{n}" for n in notes)


def strategies(results: Path) -> str:
    t = pd.read_parquet(results / "tables" / "strategies.parquet")
    rates = _rate_columns(t, {**RATES, "controls flagged": "kernel_fp", **_unlabelled(t)})
    return pd.DataFrame({"strategy": t["strategy"], **rates}).to_markdown(index=False) + _labels_note(t)


def tolerances(results: Path) -> str:
    t = pd.read_parquet(results / "tables" / "tolerances.parquet")
    name = [p if pd.isna(m) else f"{p} x{m:g}" for p, m in zip(t["policy"], t["multiplier"])]
    rates = {**RATES}
    if "paired_kernel_recall_k" in t:  # found where the policy passes the control on the same input
        rates = {"buggy kernels found": "kernel_recall", "found, control passing": "paired_kernel_recall",
                 **{k: v for k, v in RATES.items() if v != "kernel_recall"}}
    rates.update(_unlabelled(t))
    return pd.DataFrame({"policy": name, **_rate_columns(t, rates)}).to_markdown(index=False) + _labels_note(t)


def static(results: Path) -> str:
    from rescore.static.study import class_summary

    summary = class_summary(pd.read_parquet(results / "tables" / "static.parquet"))
    if summary.empty:  # the static study's own summary says why there is no pair
        own = pd.read_parquet(results / "tables" / "static_summary.parquet")
        return "No (control, variant) pair." + _labels_note(own)
    cols = ["bug_class", "arch", "n_pairs", "n_gate", "n_ptx_identical", "n_same_metrics_other_ptx"]
    arch = "sm_90" if (summary["arch"] == "sm_90").any() else summary["arch"].iloc[0]
    return summary[summary["arch"] == arch][cols].to_markdown(index=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path)
    args = parser.parse_args()
    for title, table in (("Verdicts", verdicts), ("Strategies", strategies), ("Tolerances", tolerances),
                         ("Static gate per bug class (n_gate: some PTX metric differs)", static)):
        try:
            text = table(args.results)
        except FileNotFoundError as missing:  # a run that built only some tables (tools/partial_tables.py)
            text = f"(not built in this run: {missing})"
        print(f"### {title}\n\n{text}\n")


if __name__ == "__main__":
    main()
