"""Shim: every dump's CUDA builds, each with whether a case called what it built."""

from rescore.stages import cuda_builds, setup_logging

setup_logging(snakemake.log[0])
cuda_builds(list(snakemake.input.builds), snakemake.input.cases, snakemake.output[0])
