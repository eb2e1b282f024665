"""Shim: the verdicts figure."""
from rescore.pipeline import setup_logging, verdicts

setup_logging(snakemake.log[0])  # noqa: F821
verdicts(snakemake.input[0], [snakemake.output.png, snakemake.output.pdf])  # noqa: F821
