# Kernel times on the GPU (results/tables/timing.parquet): each submission's forward and its
# reference's, median of repeated runs with the L2 flushed, for P4's time columns.
# config `timing: {dumps, warmup, repeats, budget_s}`; dumps default to the papers dump.
# Without a CUDA GPU every row is `skipped` (cheap: no worker starts). On a GPU the stage runs after
# every check, so that no other job shares the GPU while kernels are timed.
from rescore.engine.gpus import shard_slot, slot_resources
from rescore.engine.timing_stage import shares_a_gpu

TIMING = config.get("timing", {})
TIMING_DUMPS = list(TIMING.get("dumps") or [PAPERS_DUMP])
for _dump in TIMING_DUMPS:
    if _dump not in DUMPS:
        raise ValueError(f"config timing.dumps: {_dump!r} is not one of the configured dumps {DUMPS}")
TIMING_ON_GPU = shares_a_gpu(config["device"])
TIMING_AFTER = ["results/tables/cases.parquet", "results/tables/degenerate.parquet"] if TIMING_ON_GPU else []


rule timing:
    input:
        manifests=expand("results/ingest/{dump}/manifest.json", dump=TIMING_DUMPS),
        builds=expand(CUDA_BUILDS, dump=TIMING_DUMPS),
        after=TIMING_AFTER,
    output:
        "results/tables/timing.parquet",
    params:
        config={k: config[k] for k in ("device", "fixed", "timeout_s", "budget", "timing") if k in config},
        default_dumps=TIMING_DUMPS,
        gpu_slot=shard_slot(0, GPUS),  # the first GPU (the sanitizer takes the last)
        result_cache=RESULT_CACHE,  # rows an identical run measured are read (rescore.engine.result_cache)
    resources:
        gpu=1 if TIMING_ON_GPU else 0,
        **slot_resources(GPUS, lambda wildcards: shard_slot(0, GPUS)),
    log:
        "results/logs/timing.log",
    conda:
        CPU_ENV
    script:
        "../scripts/timing.py"
