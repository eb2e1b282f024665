"""Shim: concatenate tables of one schema."""

from rescore.stages import concat_tables, setup_logging

setup_logging(snakemake.log[0])
concat_tables(list(snakemake.input), snakemake.params.table, snakemake.output[0])
