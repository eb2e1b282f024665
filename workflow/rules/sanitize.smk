# compute-sanitizer as a diagnosis stage (results/tables/sanitizer.parquet): each flagged CUDA or
# Triton submission's first failing case (with `sanitizer.passing`, a passing one's first case too)
# rerun in the sandbox's worker under memcheck, racecheck, initcheck and synccheck.
# config `sanitizer: {tools, timeout_s, max_submissions, passing, executable, print_limit}`.
# Without a CUDA GPU or the executable every selected submission gets `not_run` rows saying why
# (cheap: no worker starts). On a GPU it runs after every check, as the timing stage does.
from rescore.engine.gpus import shard_slot, slot_resources
from rescore.engine.timing_stage import shares_a_gpu

SANITIZER_ON_GPU = shares_a_gpu(config["device"])


rule sanitizer:
    input:
        cases="results/tables/cases.parquet",
        submissions="results/tables/submissions.parquet",
        manifests=expand("results/ingest/{dump}/manifest.json", dump=DUMPS),
        builds=expand(CUDA_BUILDS, dump=DUMPS),
    output:
        "results/tables/sanitizer.parquet",
    params:
        config={k: config[k] for k in ("device", "budget", "sanitizer") if k in config},
        gpu_slot=shard_slot(GPUS - 1, GPUS),  # the last GPU: not the one timing runs on
    resources:
        gpu=1 if SANITIZER_ON_GPU else 0,
        **slot_resources(GPUS, lambda wildcards: shard_slot(GPUS - 1, GPUS)),
    log:
        "results/logs/sanitizer.log",
    conda:
        CPU_ENV
    script:
        "../scripts/sanitizer.py"
