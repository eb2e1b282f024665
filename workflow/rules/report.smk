# Stage 5: the uncertainty statement and Snakemake's own report (`snakemake --report results/report.zip`).


report: "../report/workflow.rst"


rule uncertainty:
    input:
        cases="results/tables/cases.parquet",
        submissions="results/tables/submissions.parquet",
        illusion="results/tables/illusion.parquet",
    output:
        report("results/uncertainty.md", category="Uncertainty", caption="../report/uncertainty.rst"),
    params:
        run=dict({k: config[k] for k in ("device", "master_seed", "budget", "fuzz")},
                 robustness_in_headline=ROBUSTNESS_IN_HEADLINE),
    log:
        "results/logs/uncertainty.log",
    conda:
        CPU_ENV
    script:
        "../scripts/uncertainty.py"
