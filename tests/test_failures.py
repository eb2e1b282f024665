"""Regression memory, shrinking and diagnosis of failures."""

import json

import pandas as pd
from conftest import toy_submission

from rescore.engine.runner import RunConfig, run_submission
from rescore.engine.shrink import first_fuzz_failure, shrink_failure, shrunk_record
from rescore.model.tables import read_parquet, write_parquet


def test_stored_failures_are_replayed_first(worker):
    cfg = RunConfig(strategies={"default": 4}, dtypes=("float32",), regressions=True)
    sub = toy_submission("problem_scale.py", "scale_tail_bug.py", dtypes=("float32",))
    first = run_submission(sub, cfg, worker, fixed=False)
    assert not [r for r in first if r["purpose"] == "regression"]
    second = run_submission(sub, cfg, worker, fixed=False)
    assert second[0]["purpose"] == "regression"
    assert second[0]["outcome"] in ("mismatch", "nonfinite")  # the known bug, re-confirmed in one case
    assert [r for r in second if r["purpose"] == "evaluation"] == [r for r in second[1:]]


def test_shrunk_counterexample_still_fails_and_is_no_larger(worker):
    cfg = RunConfig(strategies={"default": 6}, dtypes=("float32",))
    sub = toy_submission("problem_scale.py", "scale_tail_bug.py", dtypes=("float32",))
    rows = run_submission(sub, cfg, worker, fixed=False)
    failure = next(r for r in rows if r["outcome"] in ("mismatch", "nonfinite"))
    res = shrink_failure(worker, sub, failure)
    assert res["shrunk"] and res["row"]["outcome"] in ("mismatch", "nonfinite")
    original = json.loads(failure["sizes"])
    assert all(res["trigger"]["sizes"][k] <= original[k] for k in original)
    assert res["row"]["n_elements"] <= failure["n_elements"]
    assert res["trigger"]["sizes"] == {"batch_size": 1, "dim": 1}  # one element is never written
    assert res["trigger"]["values"] == "sparse"


def test_diagnosis_names_the_pattern(worker):
    cfg = RunConfig(strategies={"boundary": 6}, dtypes=("float32",))
    rows = run_submission(toy_submission("problem_scale.py", "scale_tail_bug.py", dtypes=("float32",)), cfg,
                          worker, fixed=False)
    failing = [r for r in rows if r["outcome"] != "pass"]
    assert failing
    for r in failing:  # past the last full 1024-block: the tail; below one block: nothing written at all
        assert r["diagnosis"] == ("tail_region" if r["n_elements"] > 1024 else "nonfinite_leak"), r["sizes"]


def test_the_failure_shrunk_is_the_first_by_strategy_dtype_and_index():
    def row(strategy, dtype, index, outcome="mismatch", **kw):
        return dict({"oracle": "fuzz", "purpose": "evaluation", "strategy": strategy, "dtype": dtype,
                     "case_index": index, "outcome": outcome}, **kw)

    rows = [row("layout", "float32", 0), row("default", "float32", 5), row("default", "float16", 9),
            row("default", "float16", 2, outcome="pass"), row("adversarial", "float16", 0, purpose="calibration"),
            row("fixed", "float32", 0, oracle="fixed")]
    assert first_fuzz_failure(rows) == rows[2]  # "float16" < "float32"; fixed, calibration and passes left out
    assert first_fuzz_failure(rows[3:]) is None


def test_a_shrunk_record_names_its_failure_and_replays_its_trigger(worker, tmp_path):
    cfg = RunConfig(strategies={"default": 6}, dtypes=("float32",))
    sub = toy_submission("problem_scale.py", "scale_tail_bug.py", dtypes=("float32",))
    failure = first_fuzz_failure(run_submission(sub, cfg, worker, fixed=False))
    record = shrunk_record(worker, sub, failure, "cpu", 60.0)
    assert record["shrunk"] and record["name"] == sub.name and record["original_outcome"] == failure["outcome"]
    assert json.loads(record["shrunk_sizes"]) == {"batch_size": 1, "dim": 1}
    assert record["replay"].startswith(f"rescore replay {sub.problem.path} {sub.path} --seed {failure['seed']}")
    write_parquet(pd.DataFrame([record]), tmp_path / "shrunk.parquet", "shrunk")
    assert read_parquet(tmp_path / "shrunk.parquet", "shrunk")["steps"].tolist() == [record["steps"]]
    hang = shrunk_record(worker, sub, dict(failure, outcome="timeout"), "cpu", 60.0)
    assert not hang["shrunk"] and hang["steps"] == 0 and "timeout" in hang["note"]
