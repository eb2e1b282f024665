"""Shim: the static PTX study."""
from rescore.stages import setup_logging, static, static_archs

setup_logging(snakemake.log[0])
static(list(snakemake.input.manifests), dict(snakemake.output), snakemake.threads, snakemake.params.cache,
       static_archs(snakemake.params.settings), snakemake.params.sizes)
