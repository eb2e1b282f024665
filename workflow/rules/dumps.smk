# Benchmark dumps: the CUDA prebuild before the check stage, and the tables that re-score each dump.
# Included right after common.smk: check.smk's check_shard reads CUDA_BUILDS (per dump, so adding a
# dump never re-runs the other dumps' checks).

from rescore.engine.gpus import shard_slot, slot_resources

CUDA_BUILDS = "results/cuda_builds/{dump}.parquet"


rule cuda_prebuild:
    input:
        "results/ingest/{dump}/manifest.json",
    output:
        CUDA_BUILDS,
    params:
        device=config["device"],
        timeout_s=1800,
        gpus=GPUS,  # the builds' test loads dealt over the GPUs
    threads: 8  # parallel CUDA builds; Snakemake caps this at --cores (profiles may set-threads)
    # Every check shard waits for it: before the static study (priority 20), which otherwise held
    # the cores it asks for, and a warm H200 run started its checks 29 s late (6 s of cached builds).
    priority: 30
    log:
        "results/logs/cuda_prebuild/{dump}.log",
    conda:
        CPU_ENV
    script:
        "../scripts/cuda_prebuild.py"


rule cuda_builds_table:  # the prebuild's rows, each with whether a case called what it built
    input:
        builds=expand(CUDA_BUILDS, dump=DUMPS),
        cases="results/tables/cases.parquet",
    output:
        "results/cuda_builds.parquet",
    log:
        "results/logs/aggregate/cuda_builds.log",
    conda:
        CPU_ENV
    script:
        "../scripts/cuda_builds_table.py"


rule degenerate_problems:
    input:
        "results/ingest/{dump}/manifest.json",
    output:
        "results/degenerate/{dump}.parquet",
    params:
        run={k: config[k] for k in ("device", "master_seed", "fixed", "fuzz", "study", "calibration", "budget",
                                    "timeout_s") if k in config},
        gpu_slot=lambda wildcards: shard_slot(DUMPS.index(wildcards.dump), GPUS),
    resources:
        gpu=1 if config["device"] == "cuda" else 0,
        **slot_resources(GPUS, lambda wildcards: shard_slot(DUMPS.index(wildcards.dump), GPUS)),
    log:
        "results/logs/degenerate/{dump}.log",
    conda:
        CPU_ENV
    script:
        "../scripts/degenerate_problems.py"


rule degenerate_table:
    input:
        expand("results/degenerate/{dump}.parquet", dump=DUMPS),
    output:
        "results/tables/degenerate.parquet",
    params:
        table=None,
    log:
        "results/logs/aggregate/degenerate.log",
    conda:
        CPU_ENV
    script:
        "../scripts/concat_tables.py"


rule rescored_table:
    input:
        illusion="results/tables/illusion.parquet",
        submissions="results/tables/submissions.parquet",
        degenerate="results/tables/degenerate.parquet",
    output:
        "results/tables/rescored.parquet",
    log:
        "results/logs/aggregate/rescored.log",
    conda:
        CPU_ENV
    script:
        "../scripts/rescored_table.py"
