"""Causes confirmed by a second experiment (worker/experiments.py, issue 21): each fixture in
tests/fixtures/causes/ fails for one known reason, and the row of its failing case names that cause
with the experiment's evidence; a correct kernel's rows name none."""

from __future__ import annotations

import pytest
import torch
from conftest import REPO, toy_submission

from rescore.engine.runner import RunConfig, run_submission
from rescore.model.language import detect_language
from rescore.model.records import Problem, Submission
from rescore.worker import experiments

CAUSES = REPO / "tests" / "fixtures" / "causes"
HACKS = REPO / "tests" / "fixtures" / "hacks"
# The problems the fixtures answer: the toy relu(x) * 2 and the built-in corpus's matmul.
PROBLEMS = {
    "problem_scale.py": REPO / "tests" / "fixtures" / "toy" / "problem_scale.py",
    "problem_matmul.py": REPO / "src" / "rescore" / "corpus" / "ops" / "matmul" / "problem.py",
}
CFG = RunConfig(strategies={"default": 2, "boundary": 1}, dtypes=("float32", "float16"), timeout_s=60,
                load_timeout_s=300)


def submission(problem: str, candidate: str, folder=CAUSES) -> Submission:
    path = PROBLEMS[problem]
    name = problem.removesuffix(".py")
    p = Problem(problem_id=f"causes/{name}", source=path.read_text(), path=str(path), op=name)
    src = (folder / candidate).read_text()
    return Submission(name=candidate.removesuffix(".py"), problem=p, source=src, path=str(folder / candidate),
                      language=detect_language(src), dtypes=("float32", "float16"))


# fixture -> (problem, the cause every failing fuzz case names, an excerpt of its evidence)
EXPECTED = {
    "matmul_tf32.py": ("problem_matmul.py", "precision_downgrade", "cuda_matmul_tf32"),
    "scale_output_buffer.py": ("problem_scale.py", "output_aliasing", "overwrote output 0"),
    "scale_fixed_batch.py": ("problem_scale.py", "shape_specialised", "passes at the benchmark's sizes"),
    "scale_float32_bits.py": ("problem_scale.py", "dtype_specialised", "passes at float32"),
}


@pytest.mark.parametrize("candidate", sorted(EXPECTED))
def test_the_experiment_confirms_the_cause(candidate, worker):
    problem, cause, evidence = EXPECTED[candidate]
    rows = [r for r in run_submission(submission(problem, candidate), CFG, worker) if r["oracle"] == "fuzz"]
    failed = [r for r in rows if r["outcome"] != "pass"]
    assert failed, "the fixture must fail somewhere"
    for r in failed:
        assert r.get("cause") == cause, (r["outcome"], r.get("reason"), r.get("cause"), r.get("cause_evidence"))
        assert evidence in r["cause_evidence"], r["cause_evidence"]


def test_a_pointer_keyed_cache_is_result_reuse(worker):
    rows = run_submission(submission("problem_scale.py", "cache_by_ptr.py", folder=HACKS),
                          RunConfig(strategies={"default": 1}, dtypes=("float32",), timeout_s=60), worker, fixed=False)
    (row,) = [r for r in rows if r["oracle"] == "fuzz"]
    assert row["outcome"] == "mismatch" and row["cause"] == "result_reuse", row
    assert "earlier call on the same tensors" in row["cause_evidence"]


def test_a_second_call_answering_for_the_first_is_result_reuse(worker):
    cfg = RunConfig(strategies={"default": 2}, dtypes=("float32",), timeout_s=60)
    rows = run_submission(submission("problem_scale.py", "scale_stale_input.py"), cfg, worker, fixed=False)
    first, second = [r for r in rows if r["oracle"] == "fuzz"]
    assert first["outcome"] == "mismatch" and first["cause"] == "result_reuse", first
    assert first["reason"].startswith("call 2 of 4 on a fresh model at the case's sizes"), first["reason"]
    assert "returned call 1's answer" in first["reason"], first["reason"]
    assert second["outcome"] == "pass" and not second.get("cause")  # asked once per dtype of a load


def test_an_input_written_is_input_mutation(worker):
    rows = run_submission(toy_submission("problem_scale.py", "mutates.py", dtypes=("float32",)),
                          RunConfig(strategies={"default": 1}, dtypes=("float32",), timeout_s=60), worker, fixed=False)
    (row,) = [r for r in rows if r["oracle"] == "fuzz"]
    assert row["outcome"] == "mutated_input" and row["cause"] == "input_mutation", row


def test_a_correct_kernel_names_no_cause(worker):
    rows = run_submission(toy_submission("problem_scale.py", "scale_correct.py"), CFG, worker)
    assert rows and all(r["outcome"] == "pass" and not r.get("cause") for r in rows), rows


def test_pinned_numerics_drops_writes_and_restores():
    before = experiments.numerics_state()
    with experiments.pinned_numerics() as pin:
        torch.backends.cuda.matmul.allow_tf32 = not before["cuda_matmul_tf32"]
        torch.backends.cudnn.allow_tf32 = not before["cudnn.allow_tf32"]
        torch.set_float32_matmul_precision("medium")
        assert experiments.numerics_state() == before
    assert {"cublas_allow_tf32", "cudnn.allow_tf32", "float32_matmul_precision"} <= set(pin.dropped)
    torch.backends.cudnn.allow_tf32 = not before["cudnn.allow_tf32"]  # writes apply again after the block
    assert torch.backends.cudnn.allow_tf32 != before["cudnn.allow_tf32"]
    torch.backends.cudnn.allow_tf32 = before["cudnn.allow_tf32"]
    assert experiments.numerics_state() == before


def test_serialised_streams_counts_switches_and_restores():
    stream_fn, set_stream = torch.cuda.stream, torch.cuda.set_stream
    with experiments.serialised_streams() as seen:
        with torch.cuda.stream(object()):
            pass
        torch.cuda.set_stream(object())
        with torch.cuda.stream(None):  # no stream asked for: not a switch
            pass
    assert seen.switches == 2
    assert torch.cuda.stream is stream_fn and torch.cuda.set_stream is set_stream


def test_flagged_submissions_are_counted_by_cause():
    import pandas as pd

    from rescore.analysis.rescored import rescored_table
    from rescore.analysis.study import submission_cause

    fuzz = pd.DataFrame({
        "outcome": ["mismatch", "mismatch", "nonfinite", "pass"],
        "cause": ["precision_downgrade", "precision_downgrade", None, None],
        "cause_evidence": ["flags a", "flags b", None, None],
        "strategy": ["default", "values", "boundary", "default"],
        "dtype": ["float32"] * 4,
        "case_index": [1, 0, 0, 0],
    })
    assert submission_cause(fuzz) == ("precision_downgrade", "flags a")
    assert submission_cause(fuzz[fuzz["cause"].isna()]) == (None, None)
    subs = pd.DataFrame({"submission_id": ["a", "b", "c"], "dump": ["d"] * 3, "problem_id": ["p"] * 3,
                         "claimed_verdict": [None] * 3, "ingest_error": [None] * 3})
    illusion = pd.DataFrame({"submission_id": ["a", "b", "c"], "fixed_verdict": ["pass"] * 3,
                             "fuzz_verdict": ["flagged", "flagged", "pass"],
                             "diagnosis": ["constant_factor", "tail_region", None],
                             "cause": ["precision_downgrade", None, None]})
    (row,) = rescored_table(illusion, subs).to_dict("records")
    assert row["by_cause"] == '{"pattern:tail_region": 1, "precision_downgrade": 1}'


def test_explain_off_runs_no_experiment():
    from rescore.engine.sandbox import Worker

    worker = Worker("cpu", 1 << 15, explain=False)
    try:
        rows = run_submission(submission("problem_scale.py", "scale_output_buffer.py"),
                              RunConfig(strategies={"default": 1}, dtypes=("float32",), timeout_s=60, explain=False),
                              worker, fixed=False)
    finally:
        worker.stop()
    (row,) = [r for r in rows if r["oracle"] == "fuzz"]
    assert row["outcome"] == "pass" and not row.get("cause"), row  # no second call: the reused buffer goes unseen


def test_a_flag_set_at_construction_stays_in_force_and_explains_the_error(worker):
    """TF32 turned on in __init__ only (CUDA-L1 level1/task58): its calls run with it, as in the
    benchmark; the precision experiment, with the harness's flags, passes."""
    rows = run_submission(submission("problem_matmul.py", "matmul_tf32_init.py"),
                          RunConfig(strategies={"default": 2}, dtypes=("float32",), timeout_s=60), worker)
    fuzz = [r for r in rows if r["oracle"] == "fuzz"]
    assert all(r["outcome"] == "mismatch" for r in fuzz), [(r["outcome"], r.get("reason")) for r in fuzz]
    for r in fuzz:
        assert "sets_numerics" in r["findings"] and "cuda_matmul_tf32=True" in r["reason"], r
        assert r["cause"] == "precision_downgrade" and "cuda_matmul_tf32=True" in r["cause_evidence"], r
    after = run_submission(toy_submission("problem_scale.py", "scale_correct.py"),
                           RunConfig(strategies={"default": 1}, dtypes=("float32",), timeout_s=60), worker)
    assert all(r["outcome"] == "pass" and not r.get("findings") for r in after), after  # restored for the next


def test_a_failure_from_the_calls_before_it_is_not_shape_specialised(worker):
    """Wrong only after an earlier call on the same model (the decoy), and never that call's answer: the
    benchmark's sizes as a trigger (one call) pass, but so does the case's own (issue 28 item 4)."""
    rows = run_submission(submission("problem_scale.py", "scale_first_input_kept.py"), CFG, worker, fixed=False)
    failed = [r for r in rows if r["oracle"] == "fuzz" and r["outcome"] != "pass"]
    assert failed, "the decoy call of a load's first case exposes it"
    assert all(r.get("cause") != "shape_specialised" for r in failed), [(r["outcome"], r.get("cause")) for r in failed]


@pytest.mark.parametrize("fixture, where", [
    # capture on the 2nd call, replay from the 3rd: the 4th overwrites what the 3rd returned
    ("scale_capture_second.py", "call 4 of 4 on a fresh model at the case's sizes"),
    # a static output at the benchmark's exact shape only, which the case's random sizes never reach
    ("scale_static_at_benchmark.py", "call 2 of 4 on a fresh model at the benchmark's sizes"),
])
def test_later_calls_of_one_shape_hold_every_output(fixture, where, worker):
    rows = run_submission(submission("problem_scale.py", fixture),
                          RunConfig(strategies={"default": 2}, dtypes=("float32",), timeout_s=60), worker, fixed=False)
    first, second = [r for r in rows if r["oracle"] == "fuzz"]
    assert first["outcome"] == "bad_output" and first["cause"] == "output_aliasing", first
    assert first["cause_evidence"].startswith(where), first["cause_evidence"]
    assert second["outcome"] == "pass"


@pytest.fixture
def as_in_the_worker():
    """Fresh memory NaN, as the worker makes it (in-process executors below), and back after."""
    from torch.utils import deterministic

    from rescore.worker.loop import poison_fresh_memory

    before = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
              deterministic.fill_uninitialized_memory)
    poison_fresh_memory()
    yield
    torch.use_deterministic_algorithms(before[0], warn_only=before[1])
    deterministic.fill_uninitialized_memory = before[2]


def test_outcomes_that_differ_between_repeats_are_a_race(as_in_the_worker):
    """Repeats of the same failing case that end otherwise are a race before anything else: never
    the precision or reuse cause one lucky pass would give. (The interpreter runs program instances in
    order, so the worker repeats only on a GPU; a stand-in kernel whose answer depends on a global
    counter plays the race here, with repeats turned on.)"""
    import rescore.worker.executor as ex
    from rescore.worker.protocol import job_of

    executor = ex.Executor("cpu", 1 << 15)
    assert executor.explainer.race_repeats == 0  # the CPU default
    executor.arm()
    executor.load(job_of(submission("problem_scale.py", "scale_flaky.py")))
    executor.explainer.race_repeats = 3
    row = executor.run_case("default", 11, "float32")
    assert row["outcome"] == "mismatch", row
    assert row["cause"] == "race" and "pass" in row["cause_evidence"].split("; it was mismatch")[0], row
    assert "sets_numerics" in row["findings"]  # TF32 was in force, and is not what explains it


@pytest.mark.parametrize("fixture, race", [("scale_racy_wrong.py", True), ("scale_jitter_wrong.py", False)])
def test_repeats_wrong_by_amounts_further_apart_than_the_tolerance_are_a_race(fixture, race, as_in_the_worker):
    """Repeats that all end `mismatch` are still a race when their greatest errors lie further apart
    than the comparison allows any element to be off (their outputs differ by more than rounding);
    errors that move by a few units in the last place (an atomic sum's order) are not."""
    import rescore.worker.executor as ex
    from rescore.worker.protocol import job_of

    executor = ex.Executor("cpu", 1 << 15)
    executor.arm()
    executor.load(job_of(submission("problem_scale.py", fixture)))
    executor.explainer.race_repeats = 3
    row = executor.run_case("default", 11, "float32")
    assert row["outcome"] == "mismatch", row
    assert (row.get("cause") == "race") == race, row
    if race:
        assert "ended 3 mismatch as it was" in row["cause_evidence"] and "further apart" in row["cause_evidence"]
    else:
        assert executor.explainer.answers[("repeated alike", "float32")] == 1


def test_a_repeat_runs_the_candidate_again_not_the_reference(as_in_the_worker):
    """A race's repeats call the candidate on the case's own values and judge it against the case's
    truth: the float64 reference runs for the case only (once to see that it takes the sizes, once for
    the truth), not again for each repeat (8 runs when each repeat was a full case)."""
    import rescore.worker.executor as ex
    from rescore.worker.protocol import job_of

    executor = ex.Executor("cpu", 1 << 15)
    executor.arm()
    executor.load(job_of(submission("problem_scale.py", "scale_racy_wrong.py")))
    executor.explainer.race_repeats = 3
    runs = []
    real = executor.reference.run
    executor.reference.run = lambda *a, **k: runs.append(1) or real(*a, **k)
    row = executor.run_case("default", 11, "float32")
    assert row["cause"] == "race" and "ended 3 mismatch as it was" in row["cause_evidence"], row
    assert len(runs) == 2


def test_a_repeat_the_machine_could_not_run_confirms_no_race(as_in_the_worker):
    """A repeat that ran out of device memory (other workers held it) ended otherwise than the case,
    but for the machine's reason, not the kernel's timing: no race is confirmed of it."""
    import rescore.worker.executor as ex
    from rescore.worker.protocol import job_of

    executor = ex.Executor("cpu", 1 << 15)
    executor.arm()
    executor.load(job_of(submission("problem_scale.py", "scale_wrong_then_oom.py")))
    executor.explainer.race_repeats = 3
    row = executor.run_case("default", 11, "float32", defer_explain=True)
    assert row["outcome"] == "mismatch", row
    found = executor.run_explain()
    assert found.get("cause") != "race", found


def test_a_failure_that_repeats_alike_stops_being_repeated(as_in_the_worker):
    """Each repeat is a full case: once RACE_CAP failing cases of a dtype repeated alike (a
    deterministic failure), the later ones of that dtype are not repeated."""
    import rescore.worker.executor as ex
    from rescore.worker.explain import RACE_CAP
    from rescore.worker.protocol import job_of

    executor = ex.Executor("cpu", 1 << 15)
    executor.load(job_of(submission("problem_scale.py", "scale_fixed_batch.py")))
    executor.explainer.race_repeats = 2
    failed = [r for r in (executor.run_case("boundary", seed, "float32") for seed in range(3 * RACE_CAP))
              if r["outcome"] != "pass"]
    assert len(failed) > RACE_CAP and not any(r.get("cause") == "race" for r in failed)
    assert executor.explainer.answers[("repeated alike", "float32")] == RACE_CAP
