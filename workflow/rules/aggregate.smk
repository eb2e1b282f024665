# Stage 3: gather the shards into the cases table, and derive every other table from it.
import os

# What the cause x bug-class table measures each cause against (data of this repository).
CAUSE_CLASSES = os.path.normpath(
    os.path.join(workflow.current_basedir, "..", "..", "src", "rescore", "analysis", "cause_classes.yaml")
)


rule submissions_table:
    input:
        expand("results/ingest/{dump}/submissions.parquet", dump=DUMPS),
    output:
        "results/tables/submissions.parquet",
    params:
        table="submissions",
    log:
        "results/logs/aggregate/submissions.log",
    conda:
        CPU_ENV
    script:
        "../scripts/concat_tables.py"


rule cases_table:
    input:
        shard_files("results/cases/{dump}/shard-{shard}.parquet"),
    output:
        "results/tables/cases.parquet",
    params:
        table="cases",
    log:
        "results/logs/aggregate/cases.log",
    conda:
        CPU_ENV
    script:
        "../scripts/concat_tables.py"


rule failures_table:
    input:
        cases="results/tables/cases.parquet",
        submissions="results/tables/submissions.parquet",
    output:
        table=report("results/failures/failures.parquet", category="Failures", caption="../report/tables.rst"),
        reproducers=directory("results/failures/reproducers"),
    log:
        "results/logs/aggregate/failures.log",
    conda:
        CPU_ENV
    script:
        "../scripts/failures_table.py"


rule illusion_table:
    input:
        cases="results/tables/cases.parquet",
        submissions="results/tables/submissions.parquet",
    output:
        report("results/tables/illusion.parquet", category="Tables", caption="../report/tables.rst"),
    params:
        robustness_in_headline=ROBUSTNESS_IN_HEADLINE,
    log:
        "results/logs/aggregate/illusion.log",
    conda:
        CPU_ENV
    script:
        "../scripts/illusion_table.py"


rule causes_table:
    input:
        illusion="results/tables/illusion.parquet",
        cases="results/tables/cases.parquet",
        submissions="results/tables/submissions.parquet",
        classes=CAUSE_CLASSES,
    output:
        report("results/tables/causes.parquet", category="Tables", caption="../report/tables.rst"),
    log:
        "results/logs/aggregate/causes.log",
    conda:
        CPU_ENV
    script:
        "../scripts/causes_table.py"


rule phases_table:  # where each submission's time went (engine/phase_log.py; bench/phases.py summarises it)
    input:
        shard_files("results/phases/{dump}/shard-{shard}.parquet"),
    output:
        "results/tables/phases.parquet",
    params:
        table="phases",
    log:
        "results/logs/aggregate/phases.log",
    conda:
        CPU_ENV
    script:
        "../scripts/concat_tables.py"


rule shrink_failures:  # the check shards shrink (pipeline.run_shard): this gathers what they found
    input:
        shard_files("results/failures/shrunk/{dump}/shard-{shard}.parquet"),
    output:
        report("results/failures/shrunk.parquet", category="Failures", caption="../report/tables.rst"),
    params:
        table="shrunk",
    log:
        "results/logs/aggregate/shrink.log",
    conda:
        CPU_ENV
    script:
        "../scripts/concat_tables.py"
