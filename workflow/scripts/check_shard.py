"""Shim: run one shard of one dump's submissions (and shrink their first fuzz failures), then the null
candidates of the problems it owns."""

from rescore.stages import run_shard, setup_logging

setup_logging(snakemake.log[0])
run_shard(
    snakemake.input.manifest,
    snakemake.params.shard,
    snakemake.params.shards,
    snakemake.params.run,
    snakemake.output.cases,
    snakemake.output.shrunk,
    snakemake.log[0] + ".workers",
    snakemake.params.progress,
    snakemake.params.gpus,
    snakemake.output.phases,
    snakemake.output.builds,
    snakemake.params.usable_mib,
    snakemake.output.degenerate,
    snakemake.params.result_cache,
)
