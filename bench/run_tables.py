"""Print the headline tables of one finished run as Markdown (what the README quotes).

Usage: `python bench/run_tables.py results/` (or the `results` path a `pipeline_bench.py` run printed).
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


def strategies(results: Path) -> str:
    t = pd.read_parquet(results / "tables" / "strategies.parquet")
    out = pd.DataFrame(
        {
            "strategy": t["strategy"],
            "buggy kernels found": [_rate(*r) for r in zip(t.kernel_recall_k, t.kernel_recall_n, t.kernel_recall_lo,
                                                           t.kernel_recall_hi)],
            "failing cases": [_rate(*r) for r in zip(t.case_recall_k, t.case_recall_n, t.case_recall_lo,
                                                     t.case_recall_hi)],
            "control cases flagged (FP)": [_rate(*r) for r in zip(t.case_fp_k, t.case_fp_n, t.case_fp_lo,
                                                                  t.case_fp_hi)],
            "controls flagged": [_rate(*r) for r in zip(t.kernel_fp_k, t.kernel_fp_n, t.kernel_fp_lo, t.kernel_fp_hi)],
        }
    )
    return out.to_markdown(index=False)


def tolerances(results: Path) -> str:
    t = pd.read_parquet(results / "tables" / "tolerances.parquet")
    name = [p if pd.isna(m) else f"{p} x{m:g}" for p, m in zip(t["policy"], t["multiplier"])]
    out = pd.DataFrame(
        {
            "policy": name,
            "buggy kernels found": [_rate(*r) for r in zip(t.kernel_recall_k, t.kernel_recall_n, t.kernel_recall_lo,
                                                           t.kernel_recall_hi)],
            "failing cases": [_rate(*r) for r in zip(t.case_recall_k, t.case_recall_n, t.case_recall_lo,
                                                     t.case_recall_hi)],
            "control cases flagged (FP)": [_rate(*r) for r in zip(t.case_fp_k, t.case_fp_n, t.case_fp_lo,
                                                                  t.case_fp_hi)],
        }
    )
    return out.to_markdown(index=False)


def static(results: Path) -> str:
    from rescore.static.study import class_summary

    summary = class_summary(pd.read_parquet(results / "tables" / "static.parquet"))
    cols = ["bug_class", "arch", "n_pairs", "n_gate", "n_ptx_identical", "n_same_metrics_other_ptx"]
    arch = "sm_90" if (summary["arch"] == "sm_90").any() else summary["arch"].iloc[0]
    return summary[summary["arch"] == arch][cols].to_markdown(index=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path)
    args = parser.parse_args()
    for title, table in (("Verdicts", verdicts), ("Strategies", strategies), ("Tolerances", tolerances),
                         ("Static gate per bug class (n_gate: some PTX metric differs)", static)):
        print(f"### {title}\n\n{table(args.results)}\n")


if __name__ == "__main__":
    main()
