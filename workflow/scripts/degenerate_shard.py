"""Shim: the null candidates of the problems one check shard owns (the degenerate-problems rows)."""

from rescore.stages import degenerate_shard, setup_logging

setup_logging(snakemake.log[0])
degenerate_shard(
    snakemake.input.manifest,
    snakemake.params.shard,
    snakemake.params.shards,
    snakemake.params.run,
    snakemake.output[0],
    snakemake.log[0] + ".workers",
    snakemake.params.gpus,
)
