"""Shim: the built-in corpus catalog as a table and as Markdown."""

from rescore.stages import corpus_catalog, setup_logging

setup_logging(snakemake.log[0])
corpus_catalog(snakemake.output.table, snakemake.output.markdown)
