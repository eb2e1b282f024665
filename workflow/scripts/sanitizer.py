"""Shim: rerun flagged CUDA/Triton kernels' first failing case under compute-sanitizer (GPU only;
elsewhere every row is `not_run` with the reason)."""
from rescore.stages import sanitize, setup_logging

setup_logging(snakemake.log[0])
sanitize(snakemake.input.cases, snakemake.input.submissions, list(snakemake.input.manifests), snakemake.params.config,
         snakemake.output[0], snakemake.log[0] + ".runs", snakemake.params.gpu_slot)
