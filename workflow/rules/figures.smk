# Stage 4: figures, read only from the Parquet tables.


rule verdicts_figure:
    input:
        "results/tables/illusion.parquet",
    output:
        png=report("results/figures/verdicts.png", category="Verdicts", caption="../report/verdicts.rst"),
        pdf="results/figures/verdicts.pdf",
    log:
        "results/logs/figures/verdicts.log",
    conda:
        CPU_ENV
    script:
        "../scripts/verdicts_figure.py"
