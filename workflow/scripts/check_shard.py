"""Shim: run one shard of one dump's submissions."""

from rescore.pipeline import run_shard, setup_logging

setup_logging(snakemake.log[0])
run_shard(
    snakemake.input.manifest,
    snakemake.params.shard,
    snakemake.params.shards,
    snakemake.params.run,
    snakemake.output.cases,
    snakemake.log[0] + ".workers",
)
