# Stage 3c: offline PTX (sm_90, sm_80) of every Triton submission, no GPU needed.


rule static_study:
    input:
        manifests=expand("results/ingest/{dump}/manifest.json", dump=DUMPS),
    output:
        metrics=report("results/tables/static_kernels.parquet", category="Static", caption="../report/static.rst"),
        table=report("results/tables/static.parquet", category="Static", caption="../report/static.rst"),
        summary=report("results/tables/static_summary.parquet", category="Static", caption="../report/static.rst"),
        heatmap=report("results/figures/static_delta_heatmap.png", category="Static", caption="../report/static.rst"),
    params:
        cache=".rescore-cache/static",
        settings={k: config[k] for k in ("device", "static", "light") if k in config},  # archs per device
        sizes=config.get("static", {}).get("sizes", "largest"),
    threads: 8
    # Ready as soon as the manifest is, it takes every core for a minute or two: first, so that it
    # never runs alone after the checks (the scheduler once left it to the end: 94 s added).
    priority: 20
    log:
        "results/logs/static.log",
    conda:
        CPU_ENV
    script:
        "../scripts/static_study.py"


rule static_vs_recall:
    input:
        table="results/tables/static.parquet",
        illusion="results/tables/illusion.parquet",
    output:
        report("results/figures/static_delta_vs_recall.png", category="Static", caption="../report/static.rst"),
    params:
        arch="sm_{}".format(config.get("static", {}).get("archs", [90])[0]),
    log:
        "results/logs/static_vs_recall.log",
    conda:
        CPU_ENV
    script:
        "../scripts/static_vs_recall.py"
