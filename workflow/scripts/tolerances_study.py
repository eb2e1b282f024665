"""Shim: the tolerance study."""
from rescore.stages import setup_logging, tolerances

setup_logging(snakemake.log[0])
tolerances(snakemake.input.cases, snakemake.input.submissions, snakemake.input.calibration,
           snakemake.params.multiplier, list(snakemake.params.sweep), dict(snakemake.output))
