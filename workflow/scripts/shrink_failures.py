"""Shim: a minimal counterexample for every flagged submission."""
from rescore.pipeline import setup_logging, shrink

setup_logging(snakemake.log[0])
shrink(snakemake.input.cases, snakemake.input.submissions, list(snakemake.input.manifests), snakemake.params.run,
       snakemake.output[0], snakemake.threads)
