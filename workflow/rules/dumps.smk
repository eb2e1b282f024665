# Benchmark dumps: the CUDA builds of each dump, and the tables that re-score each dump.
# Each check shard builds its own CUDA submissions while it runs its others (check.smk,
# `stages.run_shard`): a shard starts as soon as the dump is read, and waits for no other shard's
# builds (one prebuild of every dump's 69 builds kept an H100 idle for 5.5 min). CUDA_BUILDS gathers
# one dump's builds, for the stages that load them.

from rescore.engine.gpus import shard_slot, slot_resources

CUDA_BUILDS = "results/cuda_builds/{dump}.parquet"


rule cuda_builds_of_dump:
    input:
        shard_files("results/cuda_builds/{dump}/shard-{shard}.parquet", own_dump=True),
    output:
        CUDA_BUILDS,
    params:
        table=None,
    log:
        "results/logs/aggregate/cuda_builds_{dump}.log",
    conda:
        CPU_ENV
    script:
        "../scripts/concat_tables.py"


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


rule degenerate_table:  # each check shard's rows: the null candidates of the problems it owns
    input:
        shard_files("results/degenerate/{dump}/shard-{shard}.parquet"),
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
