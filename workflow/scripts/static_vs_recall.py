"""Shim: static metric deltas against dynamic recall."""
from rescore.stages import setup_logging, static_vs_recall

setup_logging(snakemake.log[0])
static_vs_recall(snakemake.input.table, snakemake.input.illusion, snakemake.output[0], snakemake.params.arch)
