"""Shim: the static PTX study."""
from rescore.pipeline import setup_logging, static

setup_logging(snakemake.log[0])
static(list(snakemake.input.manifests), dict(snakemake.output), snakemake.threads, snakemake.params.cache,
       list(snakemake.params.archs), snakemake.params.sizes)
