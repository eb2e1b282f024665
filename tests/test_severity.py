"""Severity tiers: what a failing case row says about its input, the first tier a flagged
submission's failing cases meet, and the rescored table's counts per tier with Wilson intervals."""

from __future__ import annotations

import pandas as pd
import pytest

from rescore.analysis.severity import ALL_TIERS, SPECIAL_VALUES, TIERS, FailingCase, describe, submission_tier, tier

OWN = {"B": 4, "N": 4096}  # the benchmark's own sizes (its fixed-check rows ran at these)
OWN_JSON = '{"B": 4, "N": 4096}'
OTHER_JSON = '{"B": 3, "N": 129}'


def fuzz(outcome="mismatch", sizes=OTHER_JSON, values="normal", layout="contiguous", strategy="default", **kw):
    return dict(oracle="fuzz", strategy=strategy, outcome=outcome, sizes=sizes, values=values, layout=layout, **kw)


def fixed_check(outcome="mismatch", **kw):
    return dict(oracle="fixed", strategy="fixed", outcome=outcome, **kw)


DIED = fuzz(outcome="timeout", sizes=None, values=None, layout=None)  # the worker died: no input recorded


@pytest.mark.parametrize(
    "rows, expected",
    [
        ([fuzz(sizes='{"N": 4096, "B": 4}')], "benchmark_sizes"),  # the same sizes, keys in another order
        ([fuzz(outcome="crash", sizes=OWN_JSON, values="large"), fuzz(values="nan_few")], "benchmark_sizes"),
        ([fuzz(strategy="fixed", values="native", sizes=None, layout=None, outcome="timeout")], "benchmark_sizes"),
        ([fixed_check("compile_error"), fuzz(outcome="crash")], "benchmark_sizes"),  # fails to load at all
        ([fuzz(outcome="nonfinite", values="offset_mean"), fuzz(values="special")], "other_sizes"),
        ([fuzz(outcome="bad_output"), fuzz(outcome="crash")], "other_sizes"),
        ([fuzz(values="nan_few", sizes=OWN_JSON), fuzz(outcome="crash")], "special_values"),
        ([fuzz(outcome="crash", values="special")], "special_values"),
        ([fuzz(values="huge"), fuzz(layout="transposed")], "special_values"),
        ([fuzz(outcome="crash", values="special"), fuzz(outcome="crash")], "shape_specialised"),  # sizes explain it
        ([fuzz(outcome="crash", layout="transposed")], "non_contiguous"),  # e.g. .view() of a view
        ([fuzz(outcome="crash", layout="sliced", sizes=OWN_JSON), fuzz(outcome="crash")], "non_contiguous"),
        ([fuzz(layout="offset"), fuzz(outcome="crash")], "non_contiguous"),
        ([fuzz(outcome="crash", layout="sliced"), fuzz(outcome="crash")], "shape_specialised"),
        ([fuzz(outcome="compile_error", values="negative"), fuzz(outcome="declined")], "shape_specialised"),
        ([DIED, fuzz(outcome="crash")], "shape_specialised"),
        ([DIED], "unattributed"),
        ([fuzz(outcome="declined"), fuzz(outcome="pass", values="special")], None),
    ],
)
def test_a_flagged_submission_takes_the_first_tier_its_failing_cases_meet(rows, expected):
    assert submission_tier(pd.DataFrame(rows), OWN) == expected


def test_what_a_failing_case_row_says_about_its_input():
    assert describe(fuzz(values="tiny", layout="sliced", outcome="crash"), OWN) == FailingCase(
        at_benchmark=False, special=True, strided=True, answered=False
    )
    assert describe(fixed_check(), None) == FailingCase(at_benchmark=True, special=False, strided=False, answered=True)
    assert describe(DIED, OWN) is None
    assert describe(fuzz(), None) is None  # no fixed-check row to compare its sizes with
    assert tier([]) == "unattributed"


def test_special_values_are_value_classes_the_fuzzer_draws():
    from rescore.inputs.values import NONFINITE_CLASSES, VALUE_CLASSES

    assert SPECIAL_VALUES <= set(VALUE_CLASSES) and NONFINITE_CLASSES <= SPECIAL_VALUES


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
    from rescore.analysis.rescored import rescored_table
    from rescore.analysis.study import illusion_table, wilson

    cases, subs = _tables()
    ill = illusion_table(cases, subs)
    tiers = dict(zip(ill["submission_id"], ill["severity"].fillna("(not flagged)")))
    assert tiers == {"a": "benchmark_sizes", "b": "other_sizes", "c": "special_values", "d": "non_contiguous",
                     "e": "shape_specialised", "ok": "(not flagged)", "half": "(not flagged)"}
    row = rescored_table(ill, subs).iloc[0]
    assert (row.illusion_n, row.illusion_k) == (7, 5)
    for name in TIERS:
        assert row[f"tier_{name}"] == 1
        assert (row[f"tier_{name}_lo"], row[f"tier_{name}_hi"]) == pytest.approx(wilson(1, 7))
    assert row.tier_unattributed == 0 and sum(row[f"tier_{t}"] for t in ALL_TIERS) == row.illusion_k
