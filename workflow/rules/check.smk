# Stage 2: run every submission under the fixed-shape check and the fuzz oracle, in shards.
# With several GPUs shard k runs on GPU slot k % GPUS (resource gpu_<slot>=1: rescore.engine.gpus).
# On a GPU a shard whose heaviest submission needs a large share of the device is heavy (gpu_heavy=1:
# rescore.engine.shards), and only a few heavy shards run on a GPU at once.
from rescore.engine.gpus import heavy_resources, shard_slot, slot_resources


rule check_shard:
    input:
        manifest="results/ingest/{dump}/manifest.json",
    output:
        cases="results/cases/{dump}/shard-{shard}.parquet",
        shrunk="results/failures/shrunk/{dump}/shard-{shard}.parquet",
        phases="results/phases/{dump}/shard-{shard}.parquet",
        builds="results/cuda_builds/{dump}/shard-{shard}.parquet",
        degenerate="results/degenerate/{dump}/shard-{shard}.parquet",  # the nulls of the problems it owns
    params:
        shard=lambda wildcards: int(wildcards.shard),
        # From the input, not the checkpoint: a cluster job starts its own snakemake, which knows no
        # checkpoint has run and would refuse a parameter that asks one.
        shards=lambda wildcards, input: shard_count(input.manifest, int(config["shards"])),
        run={k: config[k] for k in ("device", "master_seed", "fixed", "fuzz", "study", "calibration",
                                    "budget", "timeout_s", "light", "submission_budget_s", "settle",
                                    "call_limit") if k in config},
        progress=lambda wildcards: f"results/progress/{wildcards.dump}",
        gpus=GPUS,
        usable_mib=GPU_MEMORY_MIB,  # which submissions are heavy, dealt apart (rescore.engine.shards)
        result_cache=RESULT_CACHE,
    threads: SHARD_THREADS
    priority: check_shard_priority
    resources:
        gpu=1 if config["device"] == "cuda" else 0,
        **slot_resources(GPUS, lambda wildcards: shard_slot(int(wildcards.shard), GPUS)),
        **(heavy_resources(GPUS, lambda wildcards: shard_slot(int(wildcards.shard), GPUS), check_shard_heavy)
           if GPU_MEMORY_MIB else {}),
    log:
        "results/logs/check/{dump}/shard-{shard}.log",
    conda:
        CPU_ENV
    script:
        "../scripts/check_shard.py"
