"""Shim: one gpuemu-preprint table beside its published values (params.table names it)."""

from rescore.analysis.papers.stage import build
from rescore.stages import setup_logging

setup_logging(snakemake.log[0])
build(snakemake.params.table, dict(snakemake.input.items()), dict(snakemake.output.items()), snakemake.params.opts)
