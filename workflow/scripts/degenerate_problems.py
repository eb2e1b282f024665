"""Shim: per problem, whether a null candidate passes the benchmark's own check."""

from rescore.stages import degenerate_problems, setup_logging

setup_logging(snakemake.log[0])
degenerate_problems(list(snakemake.input), snakemake.params.run, snakemake.output[0], snakemake.log[0] + ".workers",
                    snakemake.params.gpu_slot)
