"""Study tables leave out of recall the bugs that cannot show where the cases ran."""

from __future__ import annotations

import json

import pandas as pd

from rescore.analysis.study import observable
from rescore.analysis.tolerance_study import evaluation_frame


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

    from rescore.analysis.tolerance_study import calibrate, tolerances_table

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


def test_every_strategy_tests_a_submission_only_in_the_dtypes_it_claims():
    from dataclasses import replace

    from conftest import toy_submission

    from rescore.engine.plan import plan_cases, unclaimed_rows
    from rescore.model.run import RunConfig

    cfg = RunConfig(
        strategies={"default": 2, "single_dtype_fp16": 2, "single_dtype_bf16": 2}, calibration={"default": 3}
    )
    ctl = toy_submission("problem_scale.py", "scale_correct.py", label="correct")  # claims float32, float16
    plan = plan_cases(ctl, cfg)
    evaluation = {(c["strategy"], c["dtype"]) for c in plan if c["purpose"] == "evaluation"}
    assert evaluation == {("default", "float32"), ("default", "float16"), ("single_dtype_fp16", "float16")}
    assert {c["dtype"] for c in plan if c["purpose"] == "calibration"} == {"float32", "float16"}
    skipped = unclaimed_rows(ctl, cfg)
    assert {(r["strategy"], r["dtype"]) for r in skipped} == {
        ("default", "bfloat16"), ("single_dtype_bf16", "bfloat16")
    }
    assert {r["outcome"] for r in skipped} == {"skipped"}
    assert {r["reason"] for r in skipped} == {"dtype bfloat16 not claimed by the submission (claims: float32, float16)"}
    # a submission that says what it declines claims every dtype (it claims to refuse the others);
    # a bare pair (`rescore check`, no claim) is tested in the configured dtypes
    for sub in (replace(ctl, declines="bfloat16 inputs (raises TypeError)"), replace(ctl, dtypes=())):
        assert ("single_dtype_bf16", "bfloat16") in {(c["strategy"], c["dtype"]) for c in plan_cases(sub, cfg)}
        assert not unclaimed_rows(sub, cfg)
    bug = toy_submission("problem_scale.py", "scale_tail_bug.py", label="buggy")
    assert not [c for c in plan_cases(bug, cfg) if c["purpose"] == "calibration"]


def test_unclaimed_dtype_cases_are_recorded_skipped_and_never_run(worker):
    from conftest import toy_submission

    from rescore.engine.runner import RunConfig, run_submission

    cfg = RunConfig(strategies={"default": 2, "single_dtype_fp16": 2}, dtypes=("float32",))
    sub = toy_submission("problem_scale.py", "scale_tail_bug.py", dtypes=("float32",))
    rows = run_submission(sub, cfg, worker)
    fp16 = [r for r in rows if r["dtype"] == "float16"]
    assert [(r["strategy"], r["outcome"]) for r in fp16] == [("single_dtype_fp16", "skipped")]
    assert fp16[0]["reason"] == "dtype float16 not claimed by the submission (claims: float32)"
    assert len([r for r in rows if r["oracle"] == "fuzz" and r["dtype"] == "float32"]) == 2


def _claims_tables() -> tuple[pd.DataFrame, pd.DataFrame]:
    """A float32 kernel and a control, with one executed float16 case each (as an older plan ran them)."""
    subs = pd.DataFrame(
        [
            {"submission_id": s, "name": s, "dump": "d", "op": "scale", "language": "torch", "label": label,
             "bug_class": None, "problem_id": "p", "dtypes": "float32", "declines": declines}
            for s, label, declines in (("fp32", "buggy", None), ("refuses", "buggy", "float16 inputs"))
        ]
    )
    rows = []
    for s in ("fp32", "refuses"):
        rows.append({"submission_id": s, "problem_id": "p", "oracle": "fixed", "strategy": "fixed", "purpose":
                     "evaluation", "case_index": 0, "dtype": "float32", "outcome": "pass", "sizes": '{"N": 8}',
                     "reason": None})
        for strategy, dtype, outcome in (("default", "float32", "pass"), ("single_dtype_fp16", "float16", "mismatch")):
            rows.append({"submission_id": s, "problem_id": "p", "oracle": "fuzz", "strategy": strategy,
                         "purpose": "evaluation", "case_index": 0, "seed": 1, "dtype": dtype, "outcome": outcome,
                         "sizes": '{"N": 5}', "values": "normal", "layout": "contiguous", "diagnosis": None,
                         "device": "cpu", "reason": None})
    return pd.DataFrame(rows), subs


def test_a_case_in_an_unclaimed_dtype_counts_in_no_table():
    from rescore.analysis.rescored import rescored_table
    from rescore.analysis.strategies_study import study_cases
    from rescore.analysis.study import illusion_table

    cases, subs = _claims_tables()
    ill = illusion_table(cases, subs).set_index("submission_id")
    assert ill.loc["fp32", "fuzz_verdict"] == "pass" and ill.loc["fp32", "total_cases"] == 1
    assert ill.loc["refuses", "fuzz_verdict"] == "flagged"  # its claim covers float16: it says it refuses it
    studied = study_cases(cases, subs)
    assert set(zip(studied["submission_id"], studied["dtype"])) == {
        ("fp32", "float32"), ("refuses", "float32"), ("refuses", "float16")
    }
    table = rescored_table(ill.reset_index(), subs).set_index("dump")
    assert (table.loc["d", "fuzz_flagged"], table.loc["d", "illusion_k"]) == (1, 1)


def test_the_wilson_interval_holds_the_rate_and_is_exact_at_the_ends():
    from rescore.analysis.study import wilson

    for n in range(1, 1500):
        for k in sorted({0, 1, n // 3, n - 1, n}):
            lo, hi = wilson(k, n)
            assert 0.0 <= lo <= k / n <= hi <= 1.0
        assert wilson(0, n)[0] == 0.0 and wilson(n, n)[1] == 1.0


def test_op_domain_gives_reductions_rows_whose_exp_underflows():
    """A softmax whose running max starts at 0 is exact until every exp(x - 0) underflows: only
    all-negative rows far enough down (below -104 in float32, -17 in float16) show it, and
    `op_domain` must be able to draw them."""
    import torch

    from rescore.inputs.strategies import OP_DOMAIN_VALUES
    from rescore.inputs.values import VALUE_CLASSES

    assert "negative_large" in OP_DOMAIN_VALUES["reduction"]
    x = VALUE_CLASSES["negative_large"]((64, 7), torch.Generator().manual_seed(0), torch.float32)
    assert bool((x <= -100).all()) and bool((torch.exp(x.float()) == 0).any())
    assert bool((torch.exp(x.to(torch.float16)) == 0).all())


def test_paired_recall_counts_a_bug_only_where_its_control_passes_the_same_input():
    import pandas as pd

    from rescore.analysis.tolerance_study import POLICIES, policy_table

    rows = [("ctl", "correct", None, 1), ("ctl", "correct", None, 2),
            ("bug", "buggy", "ctl", 1), ("bug", "buggy", "ctl", 2),
            ("lone", "buggy", "gone", 1)]  # its control left no case: its flag counts
    df = pd.DataFrame([{"submission_id": n, "name": n, "label": lab, "control": c, "strategy": "default",
                        "seed": seed, "dtype": "float32"} for n, lab, c, seed in rows])
    noisy = [True, False, True, False, True]  # flags the control and the bug on seed 1 only
    found = [True, False, True, True, True]   # the bug also on seed 2, where its control passes
    flagged = pd.DataFrame({p: noisy for p in POLICIES})
    flagged["calibrated"] = found
    table = policy_table(df, flagged, 2.0).set_index("policy")
    assert table.loc["torch-default", "kernel_recall_k"] == 2
    assert table.loc["torch-default", "paired_kernel_recall_k"] == 1  # only "lone"
    assert table.loc["calibrated", "paired_kernel_recall_k"] == 2
    assert table.loc["calibrated", "paired_case_recall_k"] == 2 and table.loc["calibrated", "case_recall_k"] == 3


def test_inputs_past_the_large_draw_are_float32_normals_widened_and_seeded(monkeypatch):
    """A 2^31-element trigger draws float32 normals (five times faster on the CPU); ordinary cases
    keep their float64 draws, so their seeds give the values they always gave."""
    import torch

    from rescore.inputs import values

    small = values.fill((4, 8), "normal", torch.Generator().manual_seed(3), torch.float32, "real")
    assert torch.equal(small, torch.randn((4, 8), generator=torch.Generator().manual_seed(3), dtype=torch.float64))
    monkeypatch.setattr(values, "LARGE_DRAW", 16)
    big = values.fill((4, 8), "normal", torch.Generator().manual_seed(3), torch.float32, "real")
    again = values.fill((4, 8), "normal", torch.Generator().manual_seed(3), torch.float32, "real")
    assert big.dtype == torch.float64 and torch.equal(big, again)
    assert torch.equal(big, big.to(torch.float32).to(torch.float64)) and not torch.equal(big, small)


def test_unrecorded_values_draw_their_normals_at_the_case_precision():
    """A decoy's values, which no row records, are float32 normals, kept in float32, for a float32 or
    half case (what rounding to the dtype leaves of a float64 draw), seeded all the same; a float64
    case's, and every recorded value, stay float64 draws."""
    import torch

    from rescore.inputs import values

    def gen():
        return torch.Generator().manual_seed(5)

    recorded = values.fill((64,), "large", gen(), torch.float32, "real")
    decoy = values.fill((64,), "large", gen(), torch.float32, "real", recorded=False)
    assert torch.equal(decoy, values.fill((64,), "large", gen(), torch.float32, "real", recorded=False))
    assert recorded.dtype == torch.float64 and decoy.dtype == torch.float32
    assert not torch.equal(decoy.to(torch.float64), recorded)
    assert not torch.equal(recorded / 100.0, (recorded / 100.0).to(torch.float32).to(torch.float64))
    wide = values.fill((64,), "large", gen(), torch.float64, "real", recorded=False)
    assert torch.equal(wide, values.fill((64,), "large", gen(), torch.float64, "real"))


def test_every_value_class_draws_a_decoy_at_the_case_precision():
    """Each value class (the ones that sprinkle NaN, Inf and subnormals too) draws unrecorded values at
    float32 for a float32 or half case, in every domain, with the same non-finite pattern when drawn
    again from the same seed."""
    import torch

    from rescore.inputs import values

    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        for name in values.VALUE_CLASSES:
            for domain in ("real", "positive", "unit"):
                x, again = (values.fill((7, 9), name, torch.Generator().manual_seed(3), dtype, domain, recorded=False)
                            for _ in range(2))
                assert x.shape == (7, 9) and x.dtype in (torch.float32, torch.float64), (name, dtype)
                assert torch.equal(torch.isnan(x), torch.isnan(again)), (name, dtype)


def test_a_decoys_inputs_come_at_the_case_dtype_and_a_cases_in_float64():
    """make_inputs: a case's own inputs are float64 holding the dtype's values (what its row's hash
    and the reference read); a decoy's (recorded False) are the dtype's own tensors, never widened."""
    import torch

    from rescore.inputs.strategies import CaseSpec

    make_inputs = _case_inputs_of("problem_scale.py")
    for dtype, tdtype in (("float16", torch.float16), ("float32", torch.float32), ("float64", torch.float64)):
        spec = CaseSpec("default", 11, dtype, {"batch_size": 4, "dim": 64}, "normal", "contiguous")
        case, _ = make_inputs(spec)
        decoy, _ = make_inputs(spec, recorded=False)
        floats = [(c, d) for c, d in zip(case, decoy) if isinstance(c, torch.Tensor) and c.is_floating_point()]
        assert floats
        for c, d in floats:
            assert c.dtype == torch.float64 and torch.equal(c, c.to(tdtype).to(torch.float64))
            assert d.dtype == tdtype and d.shape == c.shape and torch.isfinite(d).all()


def _case_inputs_of(problem_file: str):
    """make_inputs(spec, draws=...) on a toy problem's module, as a worker loads it."""
    from conftest import toy_submission

    import rescore.worker.executor as ex
    from rescore.worker import case_inputs
    from rescore.worker.protocol import job_of

    executor = ex.Executor("cpu", 1 << 20)
    executor.load(job_of(toy_submission(problem_file, "scale_correct.py")))

    def make_inputs(spec, draws: bool = False, recorded: bool = True) -> tuple[list, list]:
        return case_inputs.make_inputs(executor.loaded.problem, executor.loaded.schema, "cpu", spec, draws=draws,
                                       recorded=recorded)

    return make_inputs


def test_a_refilled_case_takes_its_shapes_from_the_meta_device_with_the_values_of_the_draw(monkeypatch):
    """The problem's own random draw is thrown away when the value class refills every input: no
    draw from the global generator then (a trigger past LARGE_DRAW, an ordinary case alike), and the
    same values as the draw's. A decoy the candidate is called on right after (`draws=True`, no
    reseed between) draws as the problem always did, for a candidate that reads the generator."""
    import torch

    from rescore.inputs.seeds import sub_seed
    from rescore.inputs.strategies import CaseSpec
    from rescore.worker import case_inputs

    make_inputs = _case_inputs_of("problem_scale.py")
    spec = CaseSpec("trigger", 5, "float32", {"batch_size": 8, "dim": 1024}, "normal", "contiguous")

    def generator_after_inputs(draws: bool) -> torch.Tensor:
        make_inputs(spec, draws)
        return torch.random.get_rng_state()

    torch.default_generator.manual_seed(sub_seed(spec.seed, "get_inputs"))
    untouched = torch.random.get_rng_state()
    assert not torch.equal(generator_after_inputs(True), untouched)  # get_inputs() drew
    drawn = make_inputs(spec, True)[0][0]
    assert torch.equal(generator_after_inputs(False), untouched)  # shapes from meta, no draw
    ordinary = make_inputs(spec)[0][0]
    monkeypatch.setattr(case_inputs, "LARGE_DRAW", 1024)
    assert torch.equal(generator_after_inputs(True), untouched)  # large: from meta even so
    large = make_inputs(spec)[0][0]
    assert large.shape == ordinary.shape == drawn.shape and large.dtype == torch.float64
    assert torch.equal(drawn, ordinary) and torch.equal(ordinary, large)
    native = CaseSpec("default", 5, "float32", {"batch_size": 8, "dim": 1024}, "native", "contiguous")
    monkeypatch.undo()
    assert torch.equal(make_inputs(native)[0][0], make_inputs(native, True)[0][0])  # the problem's own values


def test_init_inputs_that_draw_see_the_generator_as_the_problems_draw_leaves_it(tmp_path, monkeypatch):
    """A problem whose get_init_inputs() draws from the global generator gets the same init inputs
    whether or not its get_inputs() could run on the meta device: the meta shapes are dropped and the
    problem draws as usual."""
    import conftest
    import torch

    from rescore.inputs.strategies import CaseSpec

    source = (conftest.TOY / "problem_scale.py").read_text().replace(
        "def get_init_inputs():\n    return []", "def get_init_inputs():\n    return [torch.rand(3)]")
    assert "torch.rand(3)" in source
    (tmp_path / "problem_scale_init.py").write_text(source)
    (tmp_path / "scale_correct.py").write_text((conftest.TOY / "scale_correct.py").read_text())
    monkeypatch.setattr(conftest, "TOY", tmp_path)
    make_inputs = _case_inputs_of("problem_scale_init.py")
    spec = CaseSpec("default", 7, "float32", {"batch_size": 4, "dim": 64}, "normal", "contiguous")
    (values, init), (drawn_values, drawn_init) = make_inputs(spec), make_inputs(spec, True)
    assert torch.equal(values[0], drawn_values[0]) and torch.equal(init[0], drawn_init[0])
    again_values, again_init = make_inputs(spec)  # known to draw now: no init made to be thrown away
    assert torch.equal(again_values[0], values[0]) and torch.equal(again_init[0], init[0])


def test_the_statement_names_ops_never_tested_past_the_benchmarks_size():
    from rescore.analysis.uncertainty import never_past_the_benchmark

    def row(sid, oracle, shape, outcome="pass"):
        return {"submission_id": sid, "oracle": oracle, "shapes": json.dumps([shape]), "outcome": outcome}

    cases = pd.DataFrame([
        row("t", "fixed", [32, 2048]), row("t", "fuzz", [7, 2048]), row("t", "fuzz", [32, 2048]),
        row("t", "fuzz", [64, 2048], outcome="skipped"),  # skipped: nothing was learnt at that size
        row("r", "fixed", [32, 2048]), row("r", "fuzz", [33, 2048]),
    ])
    ops = pd.Series({"t": "tanh", "r": "relu"})
    assert never_past_the_benchmark(cases, ops) == [("tanh", 65536, 65536)]


def test_a_case_whose_free_draws_the_reference_rejects_varies_one_size_at_a_time(worker):
    """Tied sizes (a residual add: out_features == in_features) make the reference reject free
    draws. The load finds the tie on the meta device and every draw keeps it; where it cannot be
    found (a reference that cannot run on meta), after SIZE_RETRIES rejected draws a case varies one
    size with the others at the benchmark's own, so it still runs instead of being `skipped`."""
    import json
    from dataclasses import replace

    from conftest import toy_submission

    import rescore.worker.executor as ex
    from rescore.engine.runner import RunConfig, run_submission
    from rescore.model.schema import Relation
    from rescore.worker import case_inputs
    from rescore.worker.protocol import job_of

    sub = toy_submission("problem_residual.py", "residual_correct.py", dtypes=("float32",))
    executor = ex.Executor("cpu", 1 << 15)
    executor.load(job_of(sub))
    schema = executor.loaded.schema
    defaults = dict(schema.defaults())
    assert set(defaults) == {"batch_size", "in_features", "out_features"}
    assert schema.relations == (Relation("equal", "in_features", "out_features"),)
    untied = replace(schema, relations=())  # what a problem whose reference cannot run on meta gets
    for seed in range(20):
        held = case_inputs.held_draw(executor.loaded.problem, untied, executor.budget, "default", seed,
                                     "float32").sizes
        assert sum(held[k] != defaults[k] for k in defaults) <= 1
    rows = run_submission(sub, RunConfig(device="cpu", strategies={"default": 8}, dtypes=("float32",)), worker)
    fuzz = [r for r in rows if r["oracle"] == "fuzz"]
    assert [r["outcome"] for r in fuzz] == ["pass"] * 8
    sizes = [json.loads(r["sizes"]) for r in fuzz]
    assert all(s["in_features"] == s["out_features"] for s in sizes)  # the tie kept in every case
    assert any(s["in_features"] != defaults["in_features"] for s in sizes)  # and moved with it
