"""Shim: the cause x bug-class table, with each cause's precision."""

from rescore.stages import causes, setup_logging

setup_logging(snakemake.log[0])
causes(snakemake.input.illusion, snakemake.input.cases, snakemake.input.submissions, snakemake.input.classes,
       snakemake.output[0])
