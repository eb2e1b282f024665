"""Every Parquet table of two results folders, compared cell by cell (for a refactor that must change
no result): python table_diff.py RESULTS_A RESULTS_B [--ignore wall_ms,wall_s,seconds,...]

Rows are matched in order after sorting by every compared column; columns that measure time (or
hold paths of temporary folders) are left out. Prints, per table, rows and columns that differ, and
exits 1 if any table differs or exists on one side only."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

TIMES = {"wall_ms", "wall_s", "seconds", "median_ms", "min_ms", "max_ms", "p10_ms", "p25_ms", "p75_ms", "p90_ms",
         "ref_median_ms", "ref_min_ms", "ref_max_ms", "ref_p10_ms", "ref_p25_ms", "ref_p75_ms", "ref_p90_ms",
         "speedup", "build_dir"}


def _cells(df: pd.DataFrame) -> pd.DataFrame:
    """Every cell as its repr, missing values (None, NaN, NA) as one marker, so that equal tables compare equal."""
    return df.apply(lambda col: col.astype(object).where(col.notna(), None).map(repr))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("a", type=Path)
    p.add_argument("b", type=Path)
    p.add_argument("--ignore", default="", help="more columns to leave out, comma-separated")
    args = p.parse_args()
    ignore = TIMES | {c for c in args.ignore.split(",") if c}
    ta = {f.relative_to(args.a) for f in args.a.rglob("*.parquet")}
    tb = {f.relative_to(args.b) for f in args.b.rglob("*.parquet")}
    bad = 0
    for rel in sorted(ta ^ tb):
        print(f"only in {'A' if rel in ta else 'B'}: {rel}")
        bad += 1
    for rel in sorted(ta & tb):
        a, b = pd.read_parquet(args.a / rel), pd.read_parquet(args.b / rel)
        if list(a.columns) != list(b.columns):
            print(f"{rel}: columns differ: {sorted(set(a.columns) ^ set(b.columns))}")
            bad += 1
            continue
        cols = [c for c in a.columns if c not in ignore]
        a, b = (_cells(x[cols]).sort_values(cols).reset_index(drop=True) for x in (a, b))
        if len(a) != len(b):
            print(f"{rel}: {len(a)} rows against {len(b)}")
            bad += 1
            continue
        diff = (a != b)
        if diff.values.any():
            bad += 1
            per = diff.sum()
            print(f"{rel}: {int(diff.any(axis=1).sum())} of {len(a)} rows differ, in {per[per > 0].to_dict()}")
    print(f"{len(ta & tb)} tables compared, {bad} differ" if bad else f"{len(ta & tb)} tables compared: identical")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
