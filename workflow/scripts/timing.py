"""Shim: time every submission of the configured dumps on the GPU (all `skipped` without one)."""

from rescore.engine.timing_stage import run_timing, settings
from rescore.stages import setup_logging

setup_logging(snakemake.log[0])
cfg = settings(snakemake.params.config, snakemake.params.default_dumps)
run_timing(dict(zip(cfg["dumps"], snakemake.input.manifests)), cfg, snakemake.output[0],
           snakemake.log[0] + ".workers")
