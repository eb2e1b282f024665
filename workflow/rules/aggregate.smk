# Stage 3: gather the shards into the cases table, and derive every other table from it.


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
        expand("results/cases/{dump}/shard-{shard}.parquet", dump=DUMPS, shard=SHARDS),
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
    log:
        "results/logs/aggregate/illusion.log",
    conda:
        CPU_ENV
    script:
        "../scripts/illusion_table.py"


rule shrink_failures:
    input:  # the cases, not failures.parquet: it starts as soon as the checks are done
        cases="results/tables/cases.parquet",
        submissions="results/tables/submissions.parquet",
        manifests=expand("results/ingest/{dump}/manifest.json", dump=DUMPS),
    output:
        report("results/failures/shrunk.parquet", category="Failures", caption="../report/tables.rst"),
    params:
        run={k: config[k] for k in ("device", "master_seed", "fixed", "fuzz", "study", "calibration",
                                    "budget", "timeout_s")},
    threads: 2
    priority: 10  # the longest of the jobs after the checks: start it first
    log:
        "results/logs/aggregate/shrink.log",
    conda:
        CPU_ENV
    script:
        "../scripts/shrink_failures.py"
