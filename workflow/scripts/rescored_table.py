"""Shim: per dump, claimed vs reproduced vs fuzz-flagged, and the illusion rate."""

from rescore.pipeline import setup_logging
from rescore.rescored import write_rescored

setup_logging(snakemake.log[0])
write_rescored(snakemake.input.illusion, snakemake.input.submissions, snakemake.input.degenerate, snakemake.output[0])
