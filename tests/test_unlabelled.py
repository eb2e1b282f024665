"""Dumps without labels (every real dump): `snakemake all` runs every stage on one and its tables say
what needs labels; a labelled corpus beside one keeps recall and false positives on its own kernels."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from conftest import REPO
from test_workflow import TINY, run_all, snakemake

KERNELBENCH = REPO / "tests" / "fixtures" / "dumps" / "kernelbench"
UNLABELLED_ONLY = {  # the KernelBench fixture dump alone: four kernels, none labelled
    **TINY,
    "dumps": {"kb": {"format": "kernelbench", "path": str(KERNELBENCH), "problems": str(KERNELBENCH / "KernelBench"),
                     "dtypes": ["float32"]}},
    "shards": 1,
    "fuzz": {"dtypes": ["float32"], "strategies": {"default": 2, "boundary": 2}},
    "study": {"strategies": ["adversarial"], "seeds": 2},
    "papers": {"dump": "kb"},
}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    return run_all(tmp_path_factory.mktemp("unlabelled"), UNLABELLED_ONLY)


def test_all_runs_and_writes_every_output_on_an_unlabelled_dump(run_dir):
    summary = snakemake(run_dir, "--summary")
    outputs = [line.split("\t")[0] for line in summary.stdout.splitlines()[1:] if "\t" in line]
    assert "results/papers/p4_paired.md" in outputs and "results/tables/strategies.parquet" in outputs
    for out in outputs:
        path = run_dir / out
        assert path.is_dir() or path.stat().st_size > 0, out
    again = snakemake(run_dir, "-n", "--cores", "2", "all")
    assert "Nothing to be done" in again.stdout + again.stderr


def test_the_study_tables_say_recall_needs_labels(run_dir):
    tables = run_dir / "results" / "tables"
    illusion = pd.read_parquet(tables / "illusion.parquet")
    assert set(illusion["label"]) == {"unknown"}
    ran = illusion[illusion["fuzz_verdict"].isin(["pass", "flagged"])]
    flagged = int((ran["fuzz_verdict"] == "flagged").sum())
    assert len(ran) == 3 and flagged == 1  # the CUDA kernel is skipped on the CPU; one ReLU leaves its tail

    strategies = pd.read_parquet(tables / "strategies.parquet")
    assert set(strategies["strategy"]) == {"default", "boundary", "adversarial"}
    assert strategies["needs_labels"].all() and strategies["note"].str.contains("recall needs labels").all()
    assert strategies[["kernel_recall_rate", "case_recall_rate", "case_fp_rate", "kernel_fp_rate"]].isna().all().all()
    assert set(strategies["kernel_flag_n"]) == {len(ran)} and set(strategies["kernel_flag_k"]) == {flagged}
    by_class = pd.read_parquet(tables / "strategies_by_class.parquet")
    assert len(by_class) == 3 and by_class["needs_labels"].all() and by_class["recall_rate"].isna().all()
    budget = pd.read_parquet(tables / "strategy_budget.parquet")
    assert set(budget["label"]) == {"unlabelled"} and budget["recall"].isna().all()
    assert (budget.groupby("strategy")["flag_rate"].max() == flagged / len(ran)).all()

    tolerances = pd.read_parquet(tables / "tolerances.parquet").set_index("policy")
    assert tolerances["needs_labels"].all() and tolerances["kernel_recall_rate"].isna().all()
    assert tolerances.loc["kernelbench-v0.1", "kernel_flag_n"] == len(ran)
    assert "needs calibration" in tolerances.loc["calibrated", "note"]
    assert tolerances.loc["calibrated", "flag_uncalibrated"] == "ReLU/float32, Softmax/float32"
    assert pd.read_parquet(tables / "calibrated_tolerances.parquet").empty
    tightening = pd.read_parquet(tables / "tolerance_tightening.parquet")
    assert set(tightening["op"]) == {"ReLU", "Softmax"} and tightening["note"].str.startswith("not calibrated").all()

    static = pd.read_parquet(tables / "static_summary.parquet")
    assert static["n_pairs"].sum() == 0 and static["note"].str.startswith("needs labels").all()
    assert pd.read_parquet(tables / "static_kernels.parquet")["submission_id"].nunique() == 3  # the Triton ones

    papers = run_dir / "results" / "papers"
    assert pd.read_parquet(papers / "p1_headline.parquet")["note"].str.startswith("needs labels").all()
    p1 = pd.read_parquet(papers / "p1_verdicts.parquet")
    assert set(p1.loc[~p1["in_paper"], "seeded"]) == {"pass", "fail", "skipped"}  # every kernel's verdict
    for table in ("p1_verdicts", "p2_headline", "p3_headline", "p4_paired"):
        assert "carry no labels" in (papers / f"{table}.md").read_text(), table
    assert "4 of 4 submissions carry no label" in (run_dir / "results" / "uncertainty.md").read_text()


def _mixed() -> tuple[pd.DataFrame, pd.DataFrame]:
    """A control and its buggy variant (op `row_sum`), two unlabelled kernels of that op and one of
    an op no control calibrates: evaluation cases of two strategies, and the control's calibration."""
    subs = pd.DataFrame([
        {"submission_id": "ctl", "name": "ctl", "label": "correct", "bug_class": None, "op": "row_sum",
         "control": None},
        {"submission_id": "bug", "name": "bug", "label": "buggy", "bug_class": "tail", "op": "row_sum",
         "control": "ctl"},
        {"submission_id": "u1", "name": "u1", "label": "unknown", "bug_class": None, "op": "row_sum", "control": None},
        {"submission_id": "u2", "name": "u2", "label": None, "bug_class": None, "op": "row_sum", "control": None},
        {"submission_id": "u3", "name": "u3", "label": "unknown", "bug_class": None, "op": "gemm", "control": None},
    ])
    ok = json.dumps({"calibrated-base": 0.5, "kernelbench-v0.1": 0.5, "torch-default": 0.5, "reference-lowp": 0.5})
    bad = json.dumps({"calibrated-base": 50.0, "kernelbench-v0.1": 5.0, "torch-default": 5.0, "reference-lowp": 5.0})
    wrong = {("bug", 0), ("bug", 1), ("u1", 1), ("u3", 0)}  # (submission, case) pairs that mismatch
    base = {"device": "cuda", "oracle": "fuzz", "dtype": "float32"}
    rows = [{**base, "submission_id": "ctl", "purpose": "calibration", "strategy": "default", "case_index": 0,
             "seed": 99, "outcome": "pass", "policy_ratios": ok, "max_abs_err": 1e-7}]
    for sid in subs["submission_id"]:
        for strategy in ("default", "adversarial"):
            for i in (0, 1):
                bug = (sid, i) in wrong
                rows.append({**base, "submission_id": sid, "purpose": "evaluation", "strategy": strategy,
                             "case_index": i, "seed": i, "outcome": "mismatch" if bug else "pass",
                             "policy_ratios": bad if bug else ok, "max_abs_err": 1e-2 if bug else 1e-7})
    return pd.DataFrame(rows), subs


LABELLED_COLUMNS = [f"{r}_{p}" for r in ("case_recall", "kernel_recall", "case_fp", "kernel_fp")
                    for p in ("k", "n", "rate")]


def test_recall_counts_only_labelled_kernels_beside_unlabelled_ones():
    from rescore.analysis.strategies_study import strategies_table, study_cases
    from rescore.analysis.tolerance_study import calibrate, tolerances_table

    cases, subs = _mixed()
    labelled = subs[subs["label"].isin(["correct", "buggy"])]
    own = cases[cases["submission_id"].isin(labelled["submission_id"])]
    alone = strategies_table(study_cases(own, labelled)).set_index("strategy")
    mixed = strategies_table(study_cases(cases, subs)).set_index("strategy")
    pd.testing.assert_frame_equal(mixed[LABELLED_COLUMNS], alone[LABELLED_COLUMNS])
    assert (mixed["kernel_recall_rate"] == 1.0).all() and (mixed["kernel_fp_rate"] == 0.0).all()
    assert list(mixed["kernel_flag_n"]) == [3, 3] and list(mixed["kernel_flag_k"]) == [2, 2]  # u1 and u3
    assert alone["kernel_flag_n"].eq(0).all() and alone["kernel_flag_rate"].isna().all()
    assert not mixed["needs_labels"].any() and mixed["note"].str.contains("labelled submissions only").all()

    cal = calibrate(cases, subs)
    assert list(zip(cal["op"], cal["dtype"])) == [("row_sum", "float32")]  # from the control alone
    alone = tolerances_table(own, labelled, calibrate(own, labelled), 2.0).set_index("policy")
    mixed = tolerances_table(cases, subs, cal, 2.0).set_index("policy")
    pd.testing.assert_frame_equal(mixed[LABELLED_COLUMNS], alone[LABELLED_COLUMNS])
    assert mixed.loc["kernelbench-v0.1", "case_flag_n"] == 12  # every unlabelled evaluation case
    assert mixed.loc["calibrated", "case_flag_n"] == 8  # gemm's cases left out: no control calibrated it
    assert mixed.loc["calibrated", "flag_uncalibrated"] == "gemm/float32"
    assert mixed.loc["calibrated", "kernel_flag_k"] == 1  # u1; u3 (gemm) has no control to calibrate from
    assert mixed.loc["calibrated", "unlabelled_kernels"] == 3 and not mixed["needs_labels"].any()


def test_study_tables_and_figures_on_a_run_where_no_case_ran(tmp_path, monkeypatch):
    """A dump whose every case was skipped (CUDA C on the CPU): empty tables with their columns, and
    figures that say why they are empty."""
    from rescore.analysis import figures
    from rescore.analysis.strategies_study import (
        budget_table,
        by_class_table,
        heatmap_table,
        strategies_table,
        study_cases,
    )
    from rescore.analysis.tolerance_study import POLICIES, calibrate, sweep_table, tightening_table, tolerances_table

    cases, subs = _mixed()
    cases = cases.assign(outcome="skipped")
    df = study_cases(cases, subs, 2)
    table, budget = strategies_table(df), budget_table(df)
    assert table.empty and "kernel_recall_rate" in table and by_class_table(df).empty and budget.empty
    cal = calibrate(cases, subs)
    assert cal.empty and {"op", "dtype", "k"} <= set(cal.columns)
    tol = tolerances_table(cases, subs, cal, 2.0)
    assert len(tol) == len(POLICIES) and tol["needs_labels"].all() and tol["case_flag_n"].eq(0).all()
    sweep = sweep_table(cases, subs, cal, [1.0, 2.0])
    assert sweep["kernel_recall_rate"].isna().all()
    tight = tightening_table(cal, cases, subs)
    assert tight.empty and "note" in tight

    said = {}
    drawn = {
        "heatmap": lambda out: figures.recall_heatmap(heatmap_table(df, subs), out),
        "recall_fp": lambda out: figures.recall_vs_fp(table, out),
        "budget": lambda out: figures.recall_vs_budget(budget, out),
        "tightening": lambda out: figures.tightening_figure(tight, out),
        "errors": lambda out: figures.control_error_figure(pd.DataFrame(), out),
        "sweep": lambda out: figures.sweep_figure(sweep, out),
    }
    empty = figures.empty_figure
    for name, draw in drawn.items():
        monkeypatch.setattr(figures, "empty_figure", lambda message, out, name=name: (said.update({name: message}),
                                                                                      empty(message, out)))
        draw([str(tmp_path / f"{name}.png")])
        assert (tmp_path / f"{name}.png").stat().st_size > 0, name
    assert set(said) == set(drawn)
    assert all("nothing to draw" in m or m.startswith(figures.NO_LABELS) for m in said.values()), said
