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


def test_a_dtype_no_control_calibrated_is_left_out_of_every_policy_and_named():
    import json

    from rescore.tolerance_study import calibrate, tolerances_table

    subs = pd.DataFrame([
        {"submission_id": "ctl", "label": "correct", "bug_class": None, "op": "matmul"},
        {"submission_id": "bug", "label": "buggy", "bug_class": "dropped_scale", "op": "matmul"},
    ])
    ratios = json.dumps({"calibrated-base": 0.5, "torch-default": 0.5, "reference-lowp": 0.5})
    rows = [{"submission_id": "ctl", "device": "cuda", "oracle": "fuzz", "purpose": "calibration",
             "dtype": "float32", "strategy": "default", "outcome": "pass", "policy_ratios": ratios,
             "max_abs_err": 1e-6}]
    rows += [{"submission_id": s, "device": "cuda", "oracle": "fuzz", "purpose": "evaluation", "dtype": d,
              "strategy": "default", "outcome": o, "policy_ratios": ratios, "max_abs_err": 1e-6}
             for s, o in (("ctl", "pass"), ("bug", "mismatch")) for d in ("float32", "bfloat16")
             if not (s == "ctl" and d == "bfloat16")]  # the control does not claim bfloat16
    cases = pd.DataFrame(rows)
    table = tolerances_table(cases, subs, calibrate(cases, subs), 2.0)
    assert set(table["uncalibrated_left_out"]) == {"matmul/bfloat16"}
    assert set(table["case_recall_n"]) == {1}  # the buggy float32 case; its bfloat16 case is out for all


def test_a_32bit_offset_overflow_counts_only_on_a_case_large_enough_to_overflow():
    rows = pd.DataFrame([
        {"device": "cuda", "bug_class": "int32_offset_overflow", "shapes": "[[1024, 1024]]"},
        {"device": "cuda", "bug_class": "int32_offset_overflow", "shapes": "[[65536, 32768]]"},
        {"device": "cpu", "bug_class": "int32_offset_overflow", "shapes": "[[65536, 32768]]"},
        {"device": "cuda", "bug_class": "race_nonatomic", "shapes": "[[8]]"},
        {"device": "cuda", "bug_class": None, "shapes": None},
    ])
    assert list(observable(rows).index) == [1, 3, 4]


def test_a_control_is_calibrated_on_every_dtype_a_single_dtype_strategy_judges_it_at():
    from conftest import toy_submission

    from rescore.runner import RunConfig, plan_cases

    cfg = RunConfig(strategies={"default": 2, "single_dtype_bf16": 2}, calibration={"default": 3})
    ctl = toy_submission("problem_scale.py", "scale_correct.py", label="correct")  # claims float32, float16
    plan = plan_cases(ctl, cfg)
    evaluation = {(c["strategy"], c["dtype"]) for c in plan if c["purpose"] == "evaluation"}
    calibration = {c["dtype"] for c in plan if c["purpose"] == "calibration"}
    assert ("default", "bfloat16") not in evaluation and ("single_dtype_bf16", "bfloat16") in evaluation
    assert calibration == {"float32", "float16", "bfloat16"}
    bug = toy_submission("problem_scale.py", "scale_tail_bug.py", label="buggy")
    assert not [c for c in plan_cases(bug, cfg) if c["purpose"] == "calibration"]
