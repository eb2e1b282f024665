# Stage 3b: the study tables (strategies, tolerances) and their figures, derived from the cases table.


rule strategies_study:
    input:
        cases="results/tables/cases.parquet",
        submissions="results/tables/submissions.parquet",
    output:
        table=report("results/tables/strategies.parquet", category="Tables", caption="../report/tables.rst"),
        by_class=report("results/tables/strategies_by_class.parquet", category="Tables", caption="../report/tables.rst"),
        budget=report("results/tables/strategy_budget.parquet", category="Tables", caption="../report/tables.rst"),
        heatmap=report("results/figures/strategy_recall_heatmap.png", category="Strategies", caption="../report/strategies.rst"),
        recall_fp=report("results/figures/strategy_recall_vs_fp.png", category="Strategies", caption="../report/strategies.rst"),
        budget_fig=report("results/figures/strategy_recall_vs_budget.png", category="Strategies", caption="../report/strategies.rst"),
    params:
        seeds=config["study"]["seeds"],
        robustness_in_headline=ROBUSTNESS_IN_HEADLINE,
    log:
        "results/logs/study/strategies.log",
    conda:
        CPU_ENV
    script:
        "../scripts/strategies_study.py"


rule calibrate:
    input:
        cases="results/tables/cases.parquet",
        submissions="results/tables/submissions.parquet",
    output:
        report("results/tables/calibrated_tolerances.parquet", category="Tables", caption="../report/tables.rst"),
    params:
        quantile=config["tolerance"]["quantile"],
    log:
        "results/logs/calibrate.log",
    conda:
        CPU_ENV
    script:
        "../scripts/calibrate.py"


rule tolerances_study:
    input:
        cases="results/tables/cases.parquet",
        submissions="results/tables/submissions.parquet",
        calibration="results/tables/calibrated_tolerances.parquet",
    output:
        table=report("results/tables/tolerances.parquet", category="Tables", caption="../report/tables.rst"),
        tightening=report("results/tables/tolerance_tightening.parquet", category="Tables", caption="../report/tables.rst"),
        sweep=report("results/tables/tolerance_sweep.parquet", category="Tables", caption="../report/tables.rst"),
        tightening_fig=report("results/figures/tolerance_tightening.png", category="Tolerances", caption="../report/tolerances.rst"),
        errors_fig=report("results/figures/tolerance_control_errors.png", category="Tolerances", caption="../report/tolerances.rst"),
        sweep_fig=report("results/figures/tolerance_sweep.png", category="Tolerances", caption="../report/tolerances.rst"),
    params:
        multiplier=config["tolerance"]["multiplier"],
        sweep=config["tolerance"]["sweep"],
    log:
        "results/logs/study/tolerances.log",
    conda:
        CPU_ENV
    script:
        "../scripts/tolerances_study.py"
