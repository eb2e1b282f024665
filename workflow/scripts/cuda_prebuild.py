"""Shim: build every CUDA submission of every dump before the check stage (skipped without a GPU)."""

from rescore.stages import cuda_prebuild, setup_logging

setup_logging(snakemake.log[0])
cuda_prebuild(list(snakemake.input), snakemake.params.device, snakemake.output[0], snakemake.threads,
              snakemake.params.timeout_s, snakemake.params.gpus)
