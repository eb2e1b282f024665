"""Write the per-submission costs that balance the check shards (src/rescore/corpus/shard_costs.json)
from the cases table of a finished run:

python bench/shard_costs.py RESULTS_DIR [--out src/rescore/corpus/shard_costs.json]

A submission's cost is the seconds its candidate calls took (`wall_ms`) plus 5 ms per executed case
for the harness's own work. Only the balance between shards depends on these numbers, never a result.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from rescore.shards import COSTS

HARNESS_S_PER_CASE = 0.005


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results")
    parser.add_argument("--out", default=str(COSTS))
    args = parser.parse_args()
    table = Path(args.results) / "tables" / "cases.parquet"
    cases = pd.read_parquet(table, columns=["submission_id", "wall_ms", "outcome"])
    executed = cases[cases["outcome"] != "skipped"].groupby("submission_id")
    cost = executed["wall_ms"].sum().div(1000) + HARNESS_S_PER_CASE * executed.size()
    # A submission that never ran here (CUDA C on a CPU) is left out: it counts as the median cost
    # (a cost of 0 piled every CUDA C submission into the same few shards of a GPU run).
    doc = {k: round(float(v), 1) for k, v in cost.items()}
    Path(args.out).write_text(json.dumps(doc, indent=0, sort_keys=True) + "\n")
    print(f"{args.out}: {len(cost)} submissions, {cost.sum():.0f} s in all, the largest {cost.max():.0f} s")


if __name__ == "__main__":
    main()
