"""Shim: per problem, whether a null candidate passes the benchmark's own check."""

from rescore.pipeline import setup_logging
from rescore.rescored import write_degenerate

setup_logging(snakemake.log[0])
write_degenerate(list(snakemake.input), snakemake.params.run, snakemake.output[0], snakemake.log[0] + ".workers")
