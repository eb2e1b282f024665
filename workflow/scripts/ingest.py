"""Shim: read one dump into the submissions table and the manifest the check stage runs."""

from rescore.stages import ingest, setup_logging

setup_logging(snakemake.log[0])
ingest(
    snakemake.wildcards.dump,
    snakemake.params.spec,
    snakemake.output.submissions,
    snakemake.output.manifest,
)
