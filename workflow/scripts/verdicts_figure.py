"""Shim: the verdicts figure."""

from rescore.stages import setup_logging, verdicts

setup_logging(snakemake.log[0])
verdicts(snakemake.input[0], [snakemake.output.png, snakemake.output.pdf])
