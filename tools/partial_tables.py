"""The headline tables of a run whose check stage did not finish, over the shards that did.

python tools/partial_tables.py RESULTS_DIR [--config config/config.yaml]

A GPU lease can end before every check shard is written. This gathers the shard files that exist
under RESULTS_DIR/cases/, keeps the submissions they hold, and derives the same tables the workflow
derives (illusion, calibration, strategies, tolerances) into RESULTS_DIR/tables/, with the same
library functions and the same configuration (the submissions that ran: `submissions_ran.parquet`);
then prints which submissions are missing. Every
table says "over N of M submissions" only through that printout: read it before quoting a number.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
import yaml

from rescore.model.tables import read_parquet, write_parquet
from rescore.stages import calibrate, illusion, strategies, tolerances


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results")
    parser.add_argument("--config", default="config/config.yaml")
    args = parser.parse_args()
    results = Path(args.results)
    config = yaml.safe_load(Path(args.config).read_text())
    shards = sorted((results / "cases").glob("*/shard-*.parquet"))
    cases = pd.concat([read_parquet(p, "cases") for p in shards], ignore_index=True)
    tables = results / "tables"
    # the dumps' submissions: their ingest (a run's own folder), else the gathered table (a GPU
    # step's pack, which leaves the ingest folder out: it holds the dumps' sources)
    ingested = sorted((results / "ingest").glob("*/submissions.parquet")) or [tables / "submissions.parquet"]
    subs = pd.concat([read_parquet(p, "submissions") for p in ingested], ignore_index=True)
    ran = subs[subs["submission_id"].isin(cases["submission_id"])]
    tables.mkdir(parents=True, exist_ok=True)
    figures = results / "figures"
    figures.mkdir(parents=True, exist_ok=True)
    write_parquet(cases, str(tables / "cases.parquet"), "cases")
    write_parquet(ran, str(tables / "submissions_ran.parquet"), "submissions")  # the dumps' list stays
    c, s = str(tables / "cases.parquet"), str(tables / "submissions_ran.parquet")
    illusion(c, s, str(tables / "illusion.parquet"))
    calibrate(c, s, config["tolerance"]["quantile"], str(tables / "calibrated_tolerances.parquet"))
    strategies(c, s, config["study"]["seeds"], {
        "table": str(tables / "strategies.parquet"), "by_class": str(tables / "strategies_by_class.parquet"),
        "budget": str(tables / "strategy_budget.parquet"), "heatmap": str(figures / "strategy_recall_heatmap.png"),
        "recall_fp": str(figures / "strategy_recall_vs_fp.png"),
        "budget_fig": str(figures / "strategy_recall_vs_budget.png"),
    })
    tolerances(c, s, str(tables / "calibrated_tolerances.parquet"), config["tolerance"]["multiplier"],
               list(config["tolerance"]["sweep"]), {
        "table": str(tables / "tolerances.parquet"), "tightening": str(tables / "tolerance_tightening.parquet"),
        "sweep": str(tables / "tolerance_sweep.parquet"), "tightening_fig": str(figures / "tolerance_tightening.png"),
        "errors_fig": str(figures / "tolerance_control_errors.png"), "sweep_fig": str(figures / "tolerance_sweep.png"),
    })
    missing = subs[~subs["submission_id"].isin(cases["submission_id"])]
    print(f"{len(shards)} shard files, {len(cases)} case rows, {len(ran)} of {len(subs)} submissions")
    if len(missing):
        print("missing (their shard did not finish):", ", ".join(sorted(missing["name"])))


if __name__ == "__main__":
    main()
