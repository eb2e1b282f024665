"""Shim: per-(op, dtype) tolerances from controls on calibration seeds."""
from rescore.stages import calibrate, setup_logging

setup_logging(snakemake.log[0])
calibrate(snakemake.input.cases, snakemake.input.submissions, snakemake.params.quantile, snakemake.output[0])
