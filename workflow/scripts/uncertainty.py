"""Shim: the uncertainty statement."""
from rescore.stages import setup_logging, uncertainty

setup_logging(snakemake.log[0])
uncertainty(snakemake.input.cases, snakemake.input.submissions, snakemake.input.illusion, snakemake.params.run,
            snakemake.output[0])
