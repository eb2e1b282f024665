"""Shim: rerun flagged CUDA/Triton kernels' first failing case under compute-sanitizer (GPU only;
elsewhere every row is `not_run` with the reason), then say what it found in words."""
from rescore.stages import sanitize, setup_logging

setup_logging(snakemake.log[0])
sanitize(snakemake.input.cases, snakemake.input.submissions, list(snakemake.input.manifests), snakemake.params.config,
         snakemake.output.table, snakemake.log[0] + ".runs", snakemake.params.gpu_slot, snakemake.output.text,
         snakemake.threads, snakemake.params.result_cache)
