"""Shim: the strategy study."""
from rescore.stages import setup_logging, strategies

setup_logging(snakemake.log[0])
strategies(snakemake.input.cases, snakemake.input.submissions, snakemake.params.seeds, dict(snakemake.output),
           snakemake.params.robustness_in_headline)
