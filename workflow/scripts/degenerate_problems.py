"""Shim: per problem, whether a null candidate passes the benchmark's own check."""

from rescore.analysis.rescored import write_degenerate
from rescore.stages import setup_logging

setup_logging(snakemake.log[0])
write_degenerate(list(snakemake.input), snakemake.params.run, snakemake.output[0], snakemake.log[0] + ".workers")
