"""Headline evidence and robustness findings kept apart: what one case row is evidence of
(`rescore.model.evidence`), the illusion and rescored tables' headline and robustness columns, the
strategies study's recall on headline evidence, the config key, and `rescore check`'s output and
exit code for a kernel wrong only on NaN inputs."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from conftest import TOY
from test_replay_cli import rescore

from rescore.model.evidence import (
    ORDINARY_VALUES,
    ROBUSTNESS_KINDS,
    ROBUSTNESS_VALUES,
    EvidenceKind,
    classify,
    counts_in_headline,
)

H100 = '{"device": "NVIDIA H100 80GB HBM3", "python": "3.12.3", "torch": "2.11.0+cu130", "triton": "3.6.0"}'
REFUSED = ("CompilationError: at 13:30: `th = sign * (1.0 - 2.0 / (tl.exp(2.0 * abs_inner) + 1.0))`: "
           "Expected dtype ['fp32', 'fp64'] but got fp16")  # gpuemu's gelu_triton on Triton 3.6


@pytest.mark.parametrize(
    "row, kind, rule",
    [
        ({"outcome": "mismatch", "values": "normal"}, "headline", "ordinary"),
        ({"outcome": "crash", "values": "integers", "layout": "transposed"}, "headline", "ordinary"),
        ({"outcome": "mismatch", "values": "native", "oracle": "fixed"}, "headline", "ordinary"),
        ({"outcome": "timeout", "values": None}, "headline", "ordinary"),  # the worker died: no input known
        ({"outcome": "mismatch", "values": "a_class_from_elsewhere"}, "headline", "ordinary"),
        ({"outcome": "nonfinite", "values": "nan_few"}, "special_values", "value_class"),
        ({"outcome": "pass", "values": "special"}, "special_values", "value_class"),  # a passing case too
        ({"outcome": "mismatch", "values": "huge"}, "extreme_magnitude", "value_class"),
        ({"outcome": "mismatch", "values": "large", "dtype": "float16"}, "extreme_magnitude", "value_class"),
        ({"outcome": "mismatch", "values": "offset_mean"}, "cancellation", "value_class"),
        ({"outcome": "compile_error", "values": "normal", "reason": REFUSED, "versions": H100}, "toolchain",
         "compiler"),
        ({"outcome": "compile_error", "values": "normal", "reason": "SyntaxError: invalid syntax (at k.py:3)"},
         "headline", "ordinary"),  # the kernel's own source, on every toolchain
        ({"outcome": "compile_error", "values": "normal",
          "reason": "OutOfResources: out of resource: shared memory, Required: 262144, Hardware limit: 232448"},
         "headline", "ordinary"),  # its launch asks more than this GPU has at these sizes
        ({"outcome": "crash", "values": "normal", "reason": REFUSED}, "headline", "ordinary"),
    ],
)
def test_one_case_row_is_headline_evidence_or_a_robustness_kind_with_its_reasons(row, kind, rule):
    found = classify(row)
    assert (found.kind, found.rule) == (kind, rule)
    assert found.why and found.as_dict()["kind"] == kind
    assert counts_in_headline(row) == (kind == "headline") and counts_in_headline(row, robustness_in_headline=True)


def test_a_compiler_refusal_names_the_toolchain_that_refused():
    found = classify({"outcome": "compile_error", "values": "normal", "reason": REFUSED, "versions": H100})
    assert found.detail.startswith("triton 3.6.0: CompilationError") and "fp16" in found.detail


def test_every_value_class_the_fuzzer_draws_is_ordinary_or_one_robustness_kind():
    from rescore.inputs.values import NONFINITE_CLASSES, VALUE_CLASSES

    assert set(VALUE_CLASSES) | {"native"} == ORDINARY_VALUES | set(ROBUSTNESS_VALUES)
    assert not ORDINARY_VALUES & set(ROBUSTNESS_VALUES)
    assert {ROBUSTNESS_VALUES[c][0] for c in NONFINITE_CLASSES} == {EvidenceKind.SPECIAL_VALUES}
    assert {kind for kind, _ in ROBUSTNESS_VALUES.values()} | {EvidenceKind.TOOLCHAIN} == set(ROBUSTNESS_KINDS)


OWN = '{"N": 64}'


def _case(sid: str, i: int, outcome: str = "pass", values: str = "normal", **kw) -> dict:
    row = dict(submission_id=sid, name=sid, problem_id="p", oracle="fuzz", strategy="default", purpose="evaluation",
               case_index=i, seed=i, dtype="float32", sizes='{"N": 7}', values=values, layout="contiguous",
               outcome=outcome, reason=None if outcome == "pass" else f"{outcome} here", diagnosis=None,
               replay=f"rescore replay {sid} {i}", versions=H100, device="cpu", shapes="[[7]]")
    row.update(kw)
    return row


def _tables() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Four kernels claimed correct, all passing the fixed check: one right everywhere, one wrong only
    on NaN inputs (relu_triton's NaN -> 0), one wrong on ordinary values and on huge ones, one whose
    float16 specialisation Triton's compiler refused (gelu_triton on Triton 3.6)."""
    fuzz = {
        "clean": [_case("clean", 0), _case("clean", 1, values="nan_few")],
        "nan_only": [_case("nan_only", 0), _case("nan_only", 1, "nonfinite", "nan_few"),
                     _case("nan_only", 2, "nonfinite", "special", strategy="adversarial", sizes=OWN)],
        "wrong": [_case("wrong", 0, "mismatch"), _case("wrong", 1, "mismatch", "huge")],
        "refused": [_case("refused", 0), _case("refused", 1, "compile_error", dtype="float16", reason=REFUSED)],
    }
    rows, subs = [], []
    for sid, cases in fuzz.items():
        rows.append(dict(_case(sid, 0), oracle="fixed", strategy="fixed", values="native", sizes=OWN))
        rows += cases
        subs.append(dict(submission_id=sid, name=sid, dump="d", op="relu", language="triton", label="unknown",
                         bug_class=None, problem_id="p", dtypes="float32,float16", declines=None,
                         claimed_verdict="correct", ingest_error=None))
    return pd.DataFrame(rows), pd.DataFrame(subs)


def test_the_illusion_table_gives_the_headline_verdict_and_the_robustness_findings_apart():
    from rescore.analysis.study import illusion_table

    cases, subs = _tables()
    ill = illusion_table(cases, subs).set_index("submission_id")
    assert dict(ill["fuzz_verdict"]) == {"clean": "pass", "nan_only": "pass", "wrong": "flagged", "refused": "pass"}
    assert dict(ill["illusion"]) == {"clean": False, "nan_only": False, "wrong": True, "refused": False}
    assert dict(ill["fuzz_verdict_all"]) == {"clean": "pass", "nan_only": "flagged", "wrong": "flagged",
                                             "refused": "flagged"}
    assert dict(ill["illusion_all"]) == {"clean": False, "nan_only": True, "wrong": True, "refused": True}
    assert dict(ill["robustness_kinds"]) == {"clean": "", "nan_only": "special_values", "wrong": "extreme_magnitude",
                                             "refused": "toolchain"}
    assert ill.loc["nan_only", "failed_cases"] == 0 and ill.loc["nan_only", "total_cases"] == 1
    assert ill.loc["nan_only", "robustness_failed_cases"] == 2 and pd.isna(ill.loc["nan_only", "severity"])
    assert ill.loc["nan_only", "severity_all"] == "special_values"
    assert ill.loc["wrong", "severity"] == "other_sizes" and ill.loc["wrong", "first_failure_replay"].endswith("0")
    (finding,) = json.loads(ill.loc["nan_only", "robustness"])
    assert finding["kind"] == "special_values" and finding["tier"] == "benchmark_sizes"  # the adversarial case
    assert (finding["failed_cases"], finding["cases"], finding["outcomes"]) == (2, 2, {"nonfinite": 2})
    assert finding["first"]["replay"] == "rescore replay nan_only 2" and finding["first"]["values"] == "special"
    assert finding["evidence"] == {"kind": "special_values", "rule": "value_class", "detail": "special",
                                   "why": finding["evidence"]["why"]}
    (refusal,) = json.loads(ill.loc["refused", "robustness"])
    assert refusal["evidence"]["rule"] == "compiler" and "triton 3.6.0" in refusal["evidence"]["detail"]

    counted = illusion_table(cases, subs, robustness_in_headline=True).set_index("submission_id")
    assert (counted["fuzz_verdict"] == counted["fuzz_verdict_all"]).all() and counted["robustness_in_headline"].all()
    assert counted.loc["nan_only", "severity"] == "special_values" and counted.loc["nan_only", "failed_cases"] == 2


def test_the_rescored_table_counts_headline_illusions_and_robustness_findings_apart():
    from rescore.analysis.rescored import rescored_table
    from rescore.analysis.study import illusion_table

    cases, subs = _tables()
    row = rescored_table(illusion_table(cases, subs), subs).iloc[0]
    assert (row.illusion_n, row.illusion_k, row.illusion_all_k) == (4, 1, 3)
    assert (row.robustness_flagged, row.robustness_only) == (3, 2)
    assert (row.robustness_special_values, row.robustness_extreme_magnitude, row.robustness_toolchain,
            row.robustness_cancellation) == (1, 1, 1, 0)
    assert not row.robustness_in_headline
    counted = rescored_table(illusion_table(cases, subs, robustness_in_headline=True), subs).iloc[0]
    assert counted.illusion_k == 3 and counted.robustness_in_headline


def test_recall_counts_headline_evidence_and_says_what_counting_everything_gives():
    from rescore.analysis.strategies_study import strategies_table, study_cases

    cases, subs = _tables()
    subs = subs.assign(label=["correct", "buggy", "buggy", "correct"])
    df = study_cases(cases, subs)
    assert set(df.loc[df["flagged"], "submission_id"]) == {"wrong"}
    assert set(df.loc[df["flagged_all"], "submission_id"]) == {"nan_only", "wrong", "refused"}
    table = strategies_table(df).set_index("strategy")
    assert (table.loc["default", "kernel_recall_k"], table.loc["default", "kernel_recall_all_k"]) == (1, 2)
    assert (table.loc["default", "kernel_fp_k"], table.loc["default", "kernel_fp_all_k"]) == (0, 1)
    assert (table.loc["adversarial", "kernel_recall_k"], table.loc["adversarial", "kernel_recall_all_k"]) == (0, 1)
    everything = study_cases(cases, subs, robustness_in_headline=True)
    assert (everything["flagged"] == everything["flagged_all"]).all()


def test_the_config_key_is_validated_and_reaches_the_analysis_stages(tmp_path):
    import jsonschema
    import yaml
    from conftest import REPO

    from rescore import stages
    from rescore.model.tables import read_parquet, write_parquet

    schema = yaml.safe_load((REPO / "config" / "config.schema.yaml").read_text())
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    assert config["verdicts"] == {"robustness_in_headline": False}
    jsonschema.validate(config, schema)
    for bad in ({"robustness_in_headline": "yes"}, {"robustness_counts": True}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(dict(config, verdicts=bad), schema)
    rules = {p.name: p.read_text() for p in (REPO / "workflow" / "rules").glob("*.smk")}
    assert "robustness_in_headline=ROBUSTNESS_IN_HEADLINE" in rules["aggregate.smk"]
    assert "robustness_in_headline=ROBUSTNESS_IN_HEADLINE" in rules["study.smk"]

    cases, subs = _tables()
    write_parquet(cases, tmp_path / "cases.parquet", "cases")
    write_parquet(subs, tmp_path / "submissions.parquet", "submissions")
    for flag, expected in ((False, "pass"), (True, "flagged")):
        out = tmp_path / f"illusion-{flag}.parquet"
        stages.illusion(str(tmp_path / "cases.parquet"), str(tmp_path / "submissions.parquet"), str(out), flag)
        assert read_parquet(out).set_index("submission_id").loc["nan_only", "fuzz_verdict"] == expected


def test_check_summary_keeps_robustness_findings_apart_in_its_json():
    from rescore.engine.check import summarize

    cases, _ = _tables()
    rows = cases[cases["submission_id"] == "nan_only"].to_dict("records")
    doc = summarize(rows)
    assert doc["fuzz"]["verdict"] == "pass" and doc["fuzz"]["verdict_all"] == "flagged"
    assert doc["fuzz"]["failures"] == [] and doc["fuzz"]["outcomes"] == {"nonfinite": 2, "pass": 1}
    assert [f["kind"] for f in doc["fuzz"]["robustness"]] == ["special_values"]
    assert {f["kind"] for f in doc["fuzz"]["robustness_failures"]} == {"special_values"}
    counted = summarize(rows, robustness_in_headline=True)
    assert counted["fuzz"]["verdict"] == "flagged" and len(counted["fuzz"]["failures"]) == 2


def test_check_exits_0_for_a_kernel_wrong_only_on_nan_inputs_and_1_when_robustness_counts(tmp_path):
    args = ["check", str(TOY / "problem_scale.py"), str(TOY / "scale_nan_to_zero.py"), "--device", "cpu",
            "--cases", "8", "--dtypes", "float32", "--strategies", "default,nan_injected", "--no-explain"]
    out = tmp_path / "check.json"
    headline = rescore(*args, "--json", str(out))
    assert headline.returncode == 0, headline.stdout + headline.stderr
    assert "robustness findings (not counted" in headline.stdout and "special_values" in headline.stdout
    assert "ILLUSION" not in headline.stdout
    doc = json.loads(out.read_text())
    assert doc["fixed"]["verdict"] == "pass" and doc["fuzz"]["verdict"] == "pass"
    assert doc["fuzz"]["verdict_all"] == "flagged"
    (finding,) = doc["fuzz"]["robustness"]
    assert finding["kind"] == "special_values" and finding["failed_cases"] == 4 and finding["first"]["replay"]
    counted = rescore(*args, "--robustness-counts")
    assert counted.returncode == 1, counted.stdout + counted.stderr
    assert "robustness findings (counted" in counted.stdout and "ILLUSION" in counted.stdout


def test_the_uncertainty_statement_lists_the_findings_the_headline_leaves_out():
    from rescore.analysis.study import illusion_table
    from rescore.analysis.uncertainty import statement

    cases, subs = _tables()
    text = statement(cases, subs, illusion_table(cases, subs), {"master_seed": 0, "budget": {}})
    section = text[text.index("## Robustness findings"):]
    assert "3 submissions have such findings, 1 of them also flagged on ordinary values" in section
    assert "| nan_only | unknown | pass | special_values (benchmark_sizes): 2 of 2 cases" in section
    assert "| refused |" in section and "| wrong |" not in section
    bounds = text[text.index("## Submissions that passed"):text.index("## Robustness findings")]
    assert "| nan_only | unknown | default: 1 -> " in bounds  # its NaN cases are not in its bound


def test_every_flagged_case_and_its_reproducer_say_what_it_is_evidence_of(tmp_path):
    from rescore.analysis.study import failures_table, reproducer
    from rescore.model.tables import write_parquet

    cases, subs = _tables()
    subs = subs.assign(problem_path="p.py", source_path="s.py", trigger=None)
    table = failures_table(cases, subs)
    assert sorted(zip(table["submission_id"], table["evidence"])) == [
        ("nan_only", "special_values"), ("nan_only", "special_values"), ("refused", "toolchain"),
        ("wrong", "extreme_magnitude"), ("wrong", "headline")]
    write_parquet(table, tmp_path / "failures.parquet", "failures")  # the schema holds the column
    doc = reproducer(table[table["submission_id"] == "refused"].iloc[0].to_dict(), "d")
    assert doc["evidence"]["kind"] == "toolchain" and doc["evidence"]["rule"] == "compiler"
