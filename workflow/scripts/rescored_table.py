"""Shim: per dump, claimed vs reproduced vs fuzz-flagged, and the illusion rate."""

from rescore.stages import rescored, setup_logging

setup_logging(snakemake.log[0])
rescored(snakemake.input.illusion, snakemake.input.submissions, snakemake.input.degenerate, snakemake.output[0])
