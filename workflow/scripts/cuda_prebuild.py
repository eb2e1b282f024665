"""Shim: build every CUDA submission of every dump before the check stage (skipped without a GPU)."""

from rescore.engine.cuda_build import write_builds
from rescore.stages import setup_logging

setup_logging(snakemake.log[0])
write_builds(
    list(snakemake.input),
    snakemake.params.device,
    snakemake.output[0],
    jobs=snakemake.threads,
    timeout_s=snakemake.params.timeout_s,
)
