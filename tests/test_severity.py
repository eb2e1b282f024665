"""Severity tiers: each failing case row falls in one tier, a flagged submission takes its most severe,
and the rescored table counts the illusions per tier with Wilson intervals."""

from __future__ import annotations

import pandas as pd
import pytest

from rescore.severity import ALL_TIERS, SPECIAL_VALUES, TIERS, case_tier, submission_tier

OWN = {"B": 4, "N": 4096}  # the benchmark's own sizes (its fixed-check rows ran at these)
OWN_JSON = '{"B": 4, "N": 4096}'
OTHER_JSON = '{"B": 3, "N": 129}'


def fuzz(outcome="mismatch", sizes=OTHER_JSON, values="normal", layout="contiguous", strategy="default", **kw):
    return dict(oracle="fuzz", strategy=strategy, outcome=outcome, sizes=sizes, values=values, layout=layout, **kw)


@pytest.mark.parametrize(
    "row, tier",
    [
        (fuzz(sizes='{"N": 4096, "B": 4}'), "benchmark_sizes"),  # same sizes, keys in another order
        (fuzz(outcome="crash", sizes=OWN_JSON, values="large"), "benchmark_sizes"),
        (fuzz(strategy="fixed", values="native", sizes=None, layout=None, outcome="timeout"), "benchmark_sizes"),
        (dict(oracle="fixed", strategy="fixed", outcome="compile_error"), "benchmark_sizes"),  # failed to load
        (fuzz(outcome="nonfinite", values="offset_mean"), "other_sizes"),
        (fuzz(outcome="bad_output"), "other_sizes"),
        (fuzz(values="nan_few", sizes=OWN_JSON), "special_values"),
        (fuzz(outcome="crash", values="special"), "special_values"),
        (fuzz(values="huge"), "special_values"),
        (fuzz(layout="transposed", sizes=OWN_JSON), "non_contiguous"),
        (fuzz(outcome="crash", layout="sliced"), "non_contiguous"),
        (fuzz(outcome="crash"), "shape_specialised"),
        (fuzz(outcome="compile_error", values="negative"), "shape_specialised"),
        (fuzz(outcome="timeout", sizes=None, values=None, layout=None), "unattributed"),  # the worker died
    ],
)
def test_each_failing_case_falls_in_one_tier(row, tier):
    assert case_tier(row, OWN) == tier


def test_sizes_are_unattributed_without_the_benchmarks_own():
    assert case_tier(fuzz(), None) == "unattributed"
    assert case_tier(fuzz(values="tiny"), None) == "special_values"


def test_special_values_are_value_classes_the_fuzzer_draws():
    from rescore.inputs.values import NONFINITE_CLASSES, VALUE_CLASSES

    assert SPECIAL_VALUES <= set(VALUE_CLASSES) and NONFINITE_CLASSES <= SPECIAL_VALUES


def test_a_submission_takes_its_most_severe_tier():
    rows = [fuzz(outcome="crash"), fuzz(layout="offset"), fuzz(values="special"), fuzz(outcome="pass", sizes=OWN_JSON)]
    assert submission_tier(pd.DataFrame(rows), OWN) == "special_values"
    rows.append(fuzz(outcome="mutated_input"))
    assert submission_tier(pd.DataFrame(rows), OWN) == "other_sizes"
    rows.append(dict(oracle="fixed", strategy="fixed", outcome="mismatch", sizes=OWN_JSON, values="native"))
    assert submission_tier(pd.DataFrame(rows), OWN) == "benchmark_sizes"
    died = [fuzz(outcome="timeout", sizes=None, values=None, layout=None), fuzz(outcome="declined")]
    assert submission_tier(pd.DataFrame(died), OWN) == "unattributed"
    assert submission_tier(pd.DataFrame([fuzz(outcome="declined"), fuzz(outcome="pass")]), OWN) is None


def _tables() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Six float32 kernels claimed correct, each failing in one tier's way; one passes; one fails only
    in float16, which it does not claim."""
    ways = {
        "a": [fuzz(sizes=OWN_JSON, values="native", strategy="fixed")],
        "b": [fuzz(outcome="nonfinite")],
        "c": [fuzz(values="nan_few"), fuzz(outcome="crash", layout="transposed")],
        "d": [fuzz(layout="sliced"), fuzz(outcome="crash")],
        "e": [fuzz(outcome="crash"), fuzz(outcome="declined", sizes='{"B": 1, "N": 7}')],
        "ok": [fuzz(outcome="pass")],
        "half": [fuzz(dtype="float16")],
    }
    subs, rows = [], []
    for sid, failing in ways.items():
        subs.append({"submission_id": sid, "name": sid, "dump": "l1", "op": "op", "language": "cuda",
                     "label": "unknown", "bug_class": None, "problem_id": "p", "dtypes": "float32",
                     "declines": None, "claimed_verdict": "correct", "ingest_error": None})
        fixed = dict(oracle="fixed", strategy="fixed", outcome="pass", sizes=OWN_JSON, values="native",
                     layout="contiguous")
        mine = [fixed] + [dict(r, case_index=i, seed=i) for i, r in enumerate(failing + [fuzz(outcome="pass")])]
        rows += [dict({"dtype": "float32"}, **r, submission_id=sid, problem_id="p", purpose="evaluation",
                      reason=None, diagnosis=None) for r in mine]
    return pd.DataFrame(rows), pd.DataFrame(subs)


def test_the_rescored_table_counts_illusions_per_tier_with_wilson_intervals():
    from rescore.rescored import rescored_table
    from rescore.study import illusion_table, wilson

    cases, subs = _tables()
    ill = illusion_table(cases, subs)
    tiers = dict(zip(ill["submission_id"], ill["severity"].fillna("(not flagged)")))
    assert tiers == {"a": "benchmark_sizes", "b": "other_sizes", "c": "special_values", "d": "non_contiguous",
                     "e": "shape_specialised", "ok": "(not flagged)", "half": "(not flagged)"}
    row = rescored_table(ill, subs).iloc[0]
    assert (row.illusion_n, row.illusion_k) == (7, 5)
    for tier in TIERS:
        assert row[f"tier_{tier}"] == 1
        assert (row[f"tier_{tier}_lo"], row[f"tier_{tier}_hi"]) == pytest.approx(wilson(1, 7))
    assert row.tier_unattributed == 0 and sum(row[f"tier_{t}"] for t in ALL_TIERS) == row.illusion_k
