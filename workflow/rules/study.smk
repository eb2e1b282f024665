# Stage 3b: the study tables (strategies, tolerances) and their figures, derived from the cases table.


rule strategies_study:
    input:
        cases="results/tables/cases.parquet",
        submissions="results/tables/submissions.parquet",
    output:
        table="results/tables/strategies.parquet",
        by_class="results/tables/strategies_by_class.parquet",
        budget="results/tables/strategy_budget.parquet",
        heatmap="results/figures/strategy_recall_heatmap.png",
        recall_fp="results/figures/strategy_recall_vs_fp.png",
        budget_fig="results/figures/strategy_recall_vs_budget.png",
    params:
        seeds=config["study"]["seeds"],
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
        "results/tables/calibrated_tolerances.parquet",
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
        table="results/tables/tolerances.parquet",
        tightening="results/tables/tolerance_tightening.parquet",
        sweep="results/tables/tolerance_sweep.parquet",
        tightening_fig="results/figures/tolerance_tightening.png",
        errors_fig="results/figures/tolerance_control_errors.png",
        sweep_fig="results/figures/tolerance_sweep.png",
    params:
        multiplier=config["tolerance"]["multiplier"],
        sweep=config["tolerance"]["sweep"],
    log:
        "results/logs/study/tolerances.log",
    conda:
        CPU_ENV
    script:
        "../scripts/tolerances_study.py"
