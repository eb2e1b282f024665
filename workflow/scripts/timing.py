"""Shim: time every submission of the configured dumps on the GPU (all `skipped` without one)."""

from rescore.stages import setup_logging, timing

setup_logging(snakemake.log[0])
timing(snakemake.params.config, snakemake.params.default_dumps, list(snakemake.input.manifests), snakemake.output[0],
       snakemake.log[0] + ".workers", snakemake.params.gpu_slot, snakemake.params.result_cache)
