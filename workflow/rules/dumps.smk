# Benchmark dumps: CUDA prebuild before the check stage, and the tables that re-score each dump.
# Included right after common.smk (check.smk reads CUDA_BUILDS).

CUDA_BUILDS = "results/cuda_builds.parquet"


rule cuda_prebuild:
    input:
        expand("results/ingest/{dump}/manifest.json", dump=DUMPS),
    output:
        CUDA_BUILDS,
    params:
        device=config["device"],
        timeout_s=1800,
    threads: workflow.cores
    log:
        "results/logs/cuda_prebuild.log",
    conda:
        CPU_ENV
    script:
        "../scripts/cuda_prebuild.py"


rule degenerate_problems:
    input:
        expand("results/ingest/{dump}/manifest.json", dump=DUMPS),
    output:
        "results/tables/degenerate.parquet",
    params:
        run={k: config[k] for k in ("device", "master_seed", "fixed", "fuzz", "study", "calibration", "budget",
                                    "timeout_s") if k in config},
    resources:
        gpu=1 if config["device"] == "cuda" else 0,
    log:
        "results/logs/aggregate/degenerate.log",
    conda:
        CPU_ENV
    script:
        "../scripts/degenerate_problems.py"


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
