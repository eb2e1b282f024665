"""Shim: per dump, claimed vs reproduced vs fuzz-flagged, and the illusion rate."""

from rescore.analysis.rescored import write_rescored
from rescore.stages import setup_logging

setup_logging(snakemake.log[0])
write_rescored(snakemake.input.illusion, snakemake.input.submissions, snakemake.input.degenerate, snakemake.output[0])
