"""Study tables leave out of recall the bugs that cannot show where the cases ran."""

from __future__ import annotations

import pandas as pd

from rescore.study import observable
from rescore.tolerance_study import evaluation_frame


def _cases() -> tuple[pd.DataFrame, pd.DataFrame]:
    subs = pd.DataFrame(
        [
            {"submission_id": "race", "label": "buggy", "bug_class": "race_nonatomic", "op": "row_sum"},
            {"submission_id": "tail", "label": "buggy", "bug_class": "unmasked_loop_tail", "op": "row_sum"},
            {"submission_id": "ctl", "label": "correct", "bug_class": None, "op": "row_sum"},
        ]
    )
    rows = [
        {"submission_id": s, "device": d, "oracle": "fuzz", "purpose": "evaluation", "outcome": "mismatch",
         "policy_ratios": "{}"}
        for s in ("race", "tail", "ctl")
        for d in ("cpu", "cuda")
    ]
    return pd.DataFrame(rows), subs


def test_a_gpu_only_bug_counts_on_the_gpu_and_not_under_the_interpreter():
    cases, subs = _cases()
    kept = observable(cases.join(subs.set_index("submission_id"), on="submission_id"))
    assert set(zip(kept["submission_id"], kept["device"])) == {
        ("race", "cuda"), ("tail", "cpu"), ("tail", "cuda"), ("ctl", "cpu"), ("ctl", "cuda")
    }
    frame = evaluation_frame(cases, subs)
    assert ("race", "cpu") not in set(zip(frame["submission_id"], frame["device"]))
    assert len(frame) == 5
