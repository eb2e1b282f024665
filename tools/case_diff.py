"""Which case outcomes differ between two runs of the pipeline (two results folders):

python tools/case_diff.py RESULTS_A RESULTS_B [--dump corpus] [--top 40] [--column inputs_hash]

Joins the fuzz rows of the two runs' check-shard files (`cases/DUMP/shard-*.parquet`, or
`tables/cases.parquet` where the shards are gone) on submission, strategy, purpose, dtype, seed and
case index, and prints how many outcomes differ, how many failing cases pass in B and passing ones
fail, and per submission the changes. Used to tell run-to-run noise (races, reads past a tensor)
from a change of the oracle. `--column` compares another column of the rows instead (`inputs_hash`:
whether a change kept every case's inputs), printing how many differ, per submission.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from rescore.model.outcomes import FLAGGING

KEY = ["name", "strategy", "purpose", "dtype", "seed", "case_index"]


def fuzz_cases(results: Path, dump: str, column: str = "outcome") -> pd.Series:
    shards = sorted((results / "cases" / dump).glob("shard-*.parquet"))
    frames = [pd.read_parquet(f, columns=[*KEY, "oracle", column]) for f in shards]
    if not frames:
        frames = [pd.read_parquet(results / "tables" / "cases.parquet", columns=[*KEY, "oracle", column])]
    df = pd.concat(frames, ignore_index=True)
    return df[df["oracle"] == "fuzz"].set_index(KEY)[column]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    parser.add_argument("--dump", default="corpus")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--column", default="outcome", help="the column compared (default: the outcome)")
    args = parser.parse_args()
    both = pd.concat([fuzz_cases(args.a, args.dump, args.column).rename("a"),
                      fuzz_cases(args.b, args.dump, args.column).rename("b")], axis=1, join="inner")
    if args.column != "outcome":  # among the cases that have it in both runs (a skipped case has no inputs)
        valued = both.dropna()
        differ = valued[valued["a"] != valued["b"]].reset_index()
        print(f"{len(both)} cases in both runs, {len(valued)} with {args.column} in both, {len(differ)} differ")
        if len(differ):
            print(differ.groupby("name").size().sort_values(ascending=False).head(args.top).to_string())
        return
    differ = both[both["a"] != both["b"]].reset_index()
    fail_a, fail_b = differ["a"].isin(FLAGGING), differ["b"].isin(FLAGGING)
    fixed, broken = int((fail_a & ~fail_b).sum()), int((~fail_a & fail_b).sum())
    print(f"{len(both)} cases in both runs, {len(differ)} outcomes differ: "
          f"{fixed} failing in A pass in B, {broken} passing in A fail in B")
    if len(differ):
        changes = differ.groupby(["name", "a", "b"]).size().sort_values(ascending=False)
        print(changes.head(args.top).to_string())


if __name__ == "__main__":
    main()
