"""Shim: per submission, the fixed verdict beside the fuzz verdict."""

from rescore.stages import illusion, setup_logging

setup_logging(snakemake.log[0])
illusion(snakemake.input.cases, snakemake.input.submissions, snakemake.output[0],
         snakemake.params.robustness_in_headline)
