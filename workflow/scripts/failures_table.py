"""Shim: every flagged case, with a replay command and a reproducer file."""
from rescore.stages import failures, setup_logging

setup_logging(snakemake.log[0])
failures(snakemake.input.cases, snakemake.input.submissions, snakemake.output.table, snakemake.output.reproducers)
