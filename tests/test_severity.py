"""Severity tiers: what a failing case row says about its input, the first tier a flagged
submission's failing cases meet (headline tiers before robustness kinds), and the rescored table's
counts per tier with Wilson intervals."""

from __future__ import annotations

import pandas as pd
import pytest

from rescore.analysis.severity import (
    ALL_TIERS,
    HEADLINE_TIERS,
    TIERS,
    FailingCase,
    describe,
    submission_tier,
    tier,
)

OWN = {"B": 4, "N": 4096}  # the benchmark's own sizes (its fixed-check rows ran at these)
OWN_JSON = '{"B": 4, "N": 4096}'
OTHER_JSON = '{"B": 3, "N": 129}'


def fuzz(outcome="mismatch", sizes=OTHER_JSON, values="normal", layout="contiguous", strategy="default", **kw):
    return dict(oracle="fuzz", strategy=strategy, outcome=outcome, sizes=sizes, values=values, layout=layout, **kw)


def fixed_check(outcome="mismatch", **kw):
    return dict(oracle="fixed", strategy="fixed", outcome=outcome, **kw)


DIED = fuzz(outcome="timeout", sizes=None, values=None, layout=None)  # the worker died: no input recorded
REFUSED = "CompilationError: at 13:30: `tl.exp(x)`: Expected dtype ['fp32', 'fp64'] but got fp16"  # Triton 3.6


@pytest.mark.parametrize(
    "rows, expected",
    [
        ([fuzz(sizes='{"N": 4096, "B": 4}')], "benchmark_sizes"),  # the same sizes, keys in another order
        ([fuzz(outcome="crash", sizes=OWN_JSON, values="negative"), fuzz(values="nan_few")], "benchmark_sizes"),
        ([fuzz(strategy="fixed", values="native", sizes=None, layout=None, outcome="timeout")], "benchmark_sizes"),
        ([fixed_check("compile_error"), fuzz(outcome="crash")], "benchmark_sizes"),  # fails to load at all
        ([fuzz(outcome="nonfinite", values="integers"), fuzz(values="special")], "other_sizes"),
        ([fuzz(outcome="bad_output"), fuzz(outcome="crash")], "other_sizes"),
        ([fuzz(values="nan_few", sizes=OWN_JSON), fuzz(outcome="crash")], "shape_specialised"),  # NaN is apart
        ([fuzz(outcome="crash", values="special")], "special_values"),
        ([fuzz(values="huge"), fuzz(layout="transposed")], "non_contiguous"),  # any layout is the headline's
        ([fuzz(values="huge", sizes=OWN_JSON), fuzz(values="nan_few")], "extreme_magnitude"),
        ([fuzz(values="nan_few"), fuzz(values="tiny"), fuzz(outcome="crash", values="offset_mean")], "cancellation"),
        ([fuzz(outcome="compile_error", reason=REFUSED, sizes=OWN_JSON)], "toolchain"),
        ([fuzz(outcome="compile_error", reason=REFUSED), fuzz(values="near_constant")], "cancellation"),
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
        at_benchmark=False, kind="extreme_magnitude", strided=True, answered=False
    )
    assert describe(fixed_check(), None) == FailingCase(at_benchmark=True, kind="headline", strided=False,
                                                        answered=True)
    assert describe(DIED, OWN) is None
    assert describe(fuzz(), None) is None  # no fixed-check row to compare its sizes with
    assert tier([]) == "unattributed"


WAYS = {  # kernel -> its failing fuzz cases, and its tier with the headline alone / counting everything
    "a": ([fuzz(sizes=OWN_JSON, values="native", strategy="fixed")], "benchmark_sizes", "benchmark_sizes"),
    "b": ([fuzz(outcome="nonfinite")], "other_sizes", "other_sizes"),
    "c": ([fuzz(values="nan_few"), fuzz(outcome="crash", layout="transposed")], "non_contiguous", "non_contiguous"),
    "d": ([fuzz(outcome="crash"), fuzz(outcome="declined", sizes='{"B": 1, "N": 7}')], "shape_specialised",
          "shape_specialised"),
    "e": ([fuzz(values="offset_mean")], None, "cancellation"),
    "f": ([fuzz(values="huge", outcome="crash")], None, "extreme_magnitude"),
    "g": ([fuzz(values="nan_few", sizes=OWN_JSON)], None, "special_values"),
    "h": ([fuzz(outcome="compile_error", reason=REFUSED, dtype="float32")], None, "toolchain"),
    "ok": ([fuzz(outcome="pass")], None, None),
    "half": ([fuzz(dtype="float16")], None, None),  # fails only in float16, which it does not claim
}


def _tables() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Float32 kernels claimed correct (WAYS), each failing in one tier's way."""
    subs, rows = [], []
    for sid, (failing, _, _) in WAYS.items():
        subs.append({"submission_id": sid, "name": sid, "dump": "l1", "op": "op", "language": "cuda",
                     "label": "unknown", "bug_class": None, "problem_id": "p", "dtypes": "float32",
                     "declines": None, "claimed_verdict": "correct", "ingest_error": None})
        fixed = dict(oracle="fixed", strategy="fixed", outcome="pass", sizes=OWN_JSON, values="native",
                     layout="contiguous")
        mine = [fixed] + [dict(r, case_index=i, seed=i) for i, r in enumerate(failing + [fuzz(outcome="pass")])]
        rows += [dict({"dtype": "float32"}, **r, submission_id=sid, problem_id="p", purpose="evaluation",
                      **({} if "reason" in r else {"reason": None}), diagnosis=None) for r in mine]
    return pd.DataFrame(rows), pd.DataFrame(subs)


@pytest.mark.parametrize("in_headline", [False, True])
def test_the_rescored_table_counts_illusions_per_tier_with_wilson_intervals(in_headline):
    from rescore.analysis.rescored import rescored_table
    from rescore.analysis.study import illusion_table, wilson

    cases, subs = _tables()
    ill = illusion_table(cases, subs, robustness_in_headline=in_headline)
    tiers = dict(zip(ill["submission_id"], ill["severity"].fillna("(not flagged)")))
    assert tiers == {sid: (both if in_headline else head) or "(not flagged)" for sid, (_, head, both) in WAYS.items()}
    row = rescored_table(ill, subs).iloc[0]
    counted = TIERS if in_headline else HEADLINE_TIERS
    assert (row.illusion_n, row.illusion_k) == (len(WAYS), len(counted))
    for name in TIERS:
        assert row[f"tier_{name}"] == (name in counted)
        if name in counted:
            assert (row[f"tier_{name}_lo"], row[f"tier_{name}_hi"]) == pytest.approx(wilson(1, len(WAYS)))
    assert row.tier_unattributed == 0 and sum(row[f"tier_{t}"] for t in ALL_TIERS) == row.illusion_k
