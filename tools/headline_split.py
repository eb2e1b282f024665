"""What taking robustness findings out of the headline changes, from one run's cases table.

python tools/headline_split.py RESULTS_DIR [--by-dtype] [--ordinary large,offset_mean]

Reads RESULTS_DIR/tables/cases.parquet and submissions.parquet and prints, over the evaluation fuzz
cases in claimed dtypes that could expose their bug (the strategies study's cases, every seed):

1. per value class (and its evidence kind, rescore.model.evidence): control cases run and flagged,
   control kernels flagged, buggy cases run and flagged, buggy kernels flagged, and buggy kernels
   whose every failure is in that class;
2. per robustness kind: the kernels it flags, and the buggy kernels it is the only evidence of;
3. the buggy kernels and controls flagged counting everything and on headline evidence alone, and
   each buggy kernel that loses its only evidence, with its bug class and kinds;
4. per strategy (the study's first `--seeds` cases): kernel recall and control false positives on
   the headline and counting everything.

`--ordinary` counts the named value classes as headline evidence: what another split would give.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from rescore.analysis.strategies_study import strategies_table, study_cases
from rescore.model.evidence import ROBUSTNESS_KINDS, EvidenceKind, kind_of


def load(results: Path, seeds: int | None = None, ordinary: frozenset[str] = frozenset()
         ) -> tuple[pd.DataFrame, pd.DataFrame]:
    subs = pd.read_parquet(results / "tables" / "submissions.parquet")
    cases = study_cases(pd.read_parquet(results / "tables" / "cases.parquet"), subs, seeds)
    cases["kind"] = [str(kind_of(r)) for r in cases.to_dict("records")]
    moved = cases["values"].isin(ordinary) & (cases["kind"] != EvidenceKind.TOOLCHAIN)
    cases.loc[moved, "kind"] = str(EvidenceKind.HEADLINE)
    cases["flagged"] = cases["flagged_all"] & (cases["kind"] == EvidenceKind.HEADLINE)
    cases["name"] = cases["submission_id"].map(subs.set_index("submission_id")["name"])
    return cases, subs


def only_evidence(failing: pd.DataFrame, column: str) -> pd.Series:
    """Per kernel with failures, the one value of `column` all its failures share (else None)."""
    groups = failing.groupby("submission_id")[column].agg(lambda v: v.iloc[0] if v.nunique() == 1 else None)
    return groups.dropna()


def by_value_class(cases: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """The value classes' rows; a toolchain's compiler refusals are one row of their own (`(any)`),
    whatever values their cases held."""
    toolchain = cases["kind"] == EvidenceKind.TOOLCHAIN
    cases = cases.assign(values=cases["values"].where(~toolchain, "(any)"))
    bug = cases[cases["label"] == "buggy"]
    sole = only_evidence(bug[bug["flagged_all"]], "values")
    rows = []
    for key, g in cases.groupby(keys):
        key = key if isinstance(key, tuple) else (key,)
        b, c = g[g["label"] == "buggy"], g[g["label"] == "correct"]
        rows.append({
            **dict(zip(keys, key)),
            "kind": g["kind"].mode().iloc[0],
            "control_cases": len(c),
            "control_flagged": int(c["flagged_all"].sum()),
            "control_kernels_flagged": c.loc[c["flagged_all"], "submission_id"].nunique(),
            "buggy_cases": len(b),
            "buggy_flagged": int(b["flagged_all"].sum()),
            "buggy_kernels_flagged": b.loc[b["flagged_all"], "submission_id"].nunique(),
            "only_evidence": int((sole == key[0]).sum()),
        })
    return pd.DataFrame(rows).sort_values(["kind", *keys]).reset_index(drop=True)


def by_kind(cases: pd.DataFrame) -> pd.DataFrame:
    bug, ctl = cases[cases["label"] == "buggy"], cases[cases["label"] == "correct"]
    failing = bug[bug["flagged_all"]]
    robust = failing[failing["kind"] != EvidenceKind.HEADLINE]
    only_robust = set(failing["submission_id"]) - set(failing.loc[failing["kind"] == EvidenceKind.HEADLINE,
                                                                  "submission_id"])
    sole = only_evidence(failing, "kind")
    rows = []
    for kind in ROBUSTNESS_KINDS:
        mine = robust[robust["kind"] == kind]
        rows.append({
            "kind": str(kind),
            "buggy_kernels_flagged": mine["submission_id"].nunique(),
            "only_evidence_this_kind": int((sole == kind).sum()),
            "only_robustness_evidence_incl_this_kind": len(only_robust & set(mine["submission_id"])),
            "control_kernels_flagged": ctl.loc[ctl["flagged_all"] & (ctl["kind"] == kind), "submission_id"].nunique(),
        })
    return pd.DataFrame(rows)


def lost(cases: pd.DataFrame, subs: pd.DataFrame) -> tuple[str, pd.DataFrame]:
    bug, ctl = cases[cases["label"] == "buggy"], cases[cases["label"] == "correct"]
    every, head = set(bug.loc[bug["flagged_all"], "submission_id"]), set(bug.loc[bug["flagged"], "submission_id"])
    ctl_every, ctl_head = (ctl.loc[ctl[c], "submission_id"].nunique() for c in ("flagged_all", "flagged"))
    text = (f"buggy kernels: {bug['submission_id'].nunique()} with study cases; flagged counting everything "
            f"{len(every)}, on headline evidence {len(head)}: {len(every - head)} lose their only evidence\n"
            f"controls: {ctl['submission_id'].nunique()} with study cases; flagged counting everything {ctl_every}, "
            f"on headline evidence {ctl_head}")
    gone = bug[bug["submission_id"].isin(every - head) & bug["flagged_all"]]
    table = gone.groupby("submission_id").agg(
        name=("name", "first"), bug_class=("bug_class", "first"),
        kinds=("kind", lambda v: ",".join(sorted(set(v)))), values=("values", lambda v: ",".join(sorted(set(v)))),
        failing_cases=("flagged_all", "size")).sort_values("name").reset_index(drop=True)
    return text, table


def strategies(results: Path, seeds: int, ordinary: frozenset[str]) -> pd.DataFrame:
    cases, _ = load(results, seeds, ordinary)
    table = strategies_table(cases)
    cols = ["strategy", "kernel_recall_k", "kernel_recall_all_k", "kernel_recall_n", "kernel_fp_k", "kernel_fp_all_k",
            "kernel_fp_n"]
    return table[cols].sort_values("strategy").reset_index(drop=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", type=Path)
    parser.add_argument("--by-dtype", action="store_true", help="split the value classes by dtype too")
    parser.add_argument("--seeds", type=int, default=8, help="the strategies study's cases per strategy (config)")
    parser.add_argument("--ordinary", default="", help="comma-separated value classes to count as headline evidence")
    args = parser.parse_args()
    ordinary = frozenset(filter(None, args.ordinary.split(",")))
    cases, subs = load(args.results, ordinary=ordinary)
    print("## Per value class\n")
    print(by_value_class(cases, ["values", "dtype"] if args.by_dtype else ["values"]).to_markdown(index=False))
    print("\n## Per robustness kind (buggy kernels)\n")
    print(by_kind(cases).to_markdown(index=False))
    text, table = lost(cases, subs)
    print(f"\n## Headline vs everything\n\n{text}\n")
    print(table.to_markdown(index=False) if len(table) else "(none)")
    print(f"\n## Strategies (first {args.seeds} cases each): kernels flagged, headline vs everything\n")
    print(strategies(args.results, args.seeds, ordinary).to_markdown(index=False))


if __name__ == "__main__":
    main()
