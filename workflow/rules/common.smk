# Config loading and validation, and the names every stage shares.
import os

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate


configfile: "config/config.yaml"


validate(config, "../../config/config.schema.yaml")

DUMPS = list(config["dumps"])
SHARDS = list(range(int(config["shards"])))
# A check shard keeps one core busy. Given more --cores than the machine has (`--cores 8` on a
# 2-core machine), shards share cores and slow each other down (bench/pipeline_bench.py: 16
# submissions took 31.6 s as 8 processes and 17.3 s as 2 on 2 cores), so each shard then takes its
# share of --cores and no more shards run at once than there are cores. Profiles may set-threads.
MACHINE_CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
try:
    SHARD_THREADS = max(1, (workflow.cores or 1) // MACHINE_CORES)
except WorkflowError:  # no --cores given (a dry run, --report, --lint): no job runs
    SHARD_THREADS = 1
CPU_ENV = "../../envs/cpu.yaml"

ALL_OUTPUTS = [
    "results/tables/submissions.parquet",
    "results/tables/cases.parquet",
    "results/tables/illusion.parquet",
    "results/failures/failures.parquet",
    "results/failures/shrunk.parquet",
    "results/figures/verdicts.png",
    "results/figures/verdicts.pdf",
    "results/tables/corpus.parquet",
    "results/tables/strategies.parquet",
    "results/tables/tolerances.parquet",
    "results/uncertainty.md",
    "results/tables/static.parquet",
    "results/figures/static_delta_vs_recall.png",
    "results/tables/rescored.parquet",
    "results/tables/degenerate.parquet",
    "results/cuda_builds.parquet",
]
