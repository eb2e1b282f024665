# Stage 1: read each dump into submissions (one adapter per benchmark format).


checkpoint ingest:  # a checkpoint: how many check shards a dump gets depends on its submissions
    output:
        submissions="results/ingest/{dump}/submissions.parquet",
        manifest="results/ingest/{dump}/manifest.json",
    params:
        spec=lambda wildcards: config["dumps"][wildcards.dump],
    log:
        "results/logs/ingest/{dump}.log",
    conda:
        CPU_ENV
    script:
        "../scripts/ingest.py"


rule corpus_catalog:
    output:
        table="results/tables/corpus.parquet",
        markdown="results/corpus.md",
    log:
        "results/logs/corpus_catalog.log",
    conda:
        CPU_ENV
    script:
        "../scripts/corpus_catalog.py"
