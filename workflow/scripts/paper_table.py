"""Shim: one gpuemu-preprint table beside its published values (params.table names it)."""

from rescore.stages import paper_table, setup_logging

setup_logging(snakemake.log[0])
paper_table(snakemake.params.table, dict(snakemake.input.items()), dict(snakemake.output.items()),
            snakemake.params.opts)
