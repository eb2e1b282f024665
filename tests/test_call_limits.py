"""Timeouts that scale with the work: a candidate's calls limited by the reference's own time at their
sizes (a hang costs seconds and is a `timeout` in both oracles), the harness's own slowness never
blamed on a kernel, and a failed case's experiments asked for apart, so that they cannot cost the
case its verdict."""

from __future__ import annotations

from conftest import toy_submission
from test_stragglers import hack

from rescore.engine.check import summarize
from rescore.engine.pacing import Pace, call_limit
from rescore.engine.runner import RunConfig, run_submission


def test_a_calls_limit_is_a_floor_plus_a_multiple_of_the_references_own_time():
    assert call_limit(5.0, 50.0, 0.0) == 5.0 and call_limit(5.0, 50.0, 2.0) == 105.0
    assert call_limit(0.0, 50.0, 2.0) is None  # floor 0: the per-case timeout alone


def test_a_timeout_at_its_calls_own_limit_is_judged_even_under_the_shortened_timeout():
    pace = Pace(timeout_s=30, total=4, settle_timeout_s=10)
    pace.record({"outcome": "timeout"}, "timeout", 30)
    at_limit = {"outcome": "timeout", "reason": "no answer within 5 s, the limit of a call", "limit_s": 5.0}
    assert pace.record(at_limit, "timeout", pace.timeout()) is at_limit  # not `skipped`: its limit was its own
    assert pace.stop_reason() == ("settled: 2 cases in a row timed out (1 at its call's own limit, 1 at the full "
                                  "30 s); its verdict cannot change, remaining cases not run")


def test_an_infinite_loop_is_a_timeout_in_both_oracles_at_its_calls_limit(worker):
    cfg = RunConfig(strategies={"default": 6}, dtypes=("float32",), timeout_s=60, call_floor_s=2,
                    load_timeout_s=300)
    rows = run_submission(hack("infinite_loop"), cfg, worker)
    assert [r["outcome"] for r in rows] == ["timeout", "timeout"] + ["skipped"] * 5
    for row in rows[:2]:
        assert row["limit_s"] < cfg.timeout_s and "the limit of a call at these sizes" in row["reason"]
    assert "2 cases in a row timed out (2 at its call's own limit)" in rows[2]["reason"]
    doc = summarize(rows)
    assert doc["fixed"]["outcome"] == "timeout" and doc["fuzz"]["verdict"] == "flagged"
    assert doc["fuzz"]["outcomes"] == {"timeout": 1, "skipped": 5} and doc["fuzz"]["stopped"] == rows[2]["reason"]


def test_a_check_says_where_its_time_went():
    """`rescore check --json` gives its seconds per phase: on a kernel that never returns, the two
    calls' limits as `timeout_wait` and each killed worker's exit as `kill`, adding up to its time."""
    from rescore.engine.check import check_pair

    cfg = RunConfig(strategies={"default": 6}, dtypes=("float32",), timeout_s=60, call_floor_s=2,
                    load_timeout_s=300)
    doc, _ = check_pair(hack("infinite_loop"), cfg)
    time_doc = doc["time"]
    phases = time_doc["phases"]
    assert doc["fuzz"]["outcomes"] == {"timeout": 1, "skipped": 5}
    assert phases["timeout_wait"] >= 4.0 and "kill" in phases and phases["worker_start"] > 0
    assert abs(sum(phases.values()) - time_doc["elapsed_s"]) < 0.01


def test_a_reference_too_slow_for_the_machine_is_the_harnesss_limit_not_the_kernels(worker):
    """The problem's own Model takes a minute at its own sizes: the benchmark's check is `skipped`
    for this machine, not a `timeout` of the correct kernel, whose fuzz cases pass; the cases at the
    benchmark's own sizes are not run (each would cost the per-case timeout again)."""
    cfg = RunConfig(strategies={"default": 2, "benchmark_shape": 2}, dtypes=("float32",), timeout_s=4,
                    load_timeout_s=300)
    sub = toy_submission("problem_slow_at_own_size.py", "torch_correct.py", dtypes=("float32",))
    rows = run_submission(sub, cfg, worker)
    outcomes = [r["outcome"] for r in rows]
    assert outcomes == ["skipped", "pass", "pass", "skipped", "skipped"], [r.get("reason") for r in rows]
    assert "the harness's own work" in rows[0]["reason"] and "not the kernel's" in rows[0]["reason"]
    assert rows[3]["reason"].startswith("not run at the benchmark's own sizes, which are beyond this machine: in "
                                        "the fixed check the harness's own work")


def test_experiments_that_hang_cost_the_failed_case_nothing(worker):
    """Wrong everywhere, and it hangs at the benchmark's sizes, where an experiment asks whether it
    passes: each case keeps its mismatch (asked inline, the first one became a timeout), and after
    the experiments of one case ran out of time the later cases are not explained."""
    cfg = RunConfig(strategies={"default": 3}, dtypes=("float32",), timeout_s=60, call_floor_s=2,
                    load_timeout_s=300)
    sub = toy_submission("problem_scale.py", "wrong_and_hangs_at_benchmark_size.py", dtypes=("float32",))
    rows = run_submission(sub, cfg, worker)
    outcomes = [r["outcome"] for r in rows]
    assert outcomes == ["timeout", "mismatch", "mismatch", "mismatch"], [r.get("reason") for r in rows]
    assert not any(r.get("cause") for r in rows) and not any("_explain" in r for r in rows)


def test_the_experiments_stop_past_their_allowance_and_after_one_that_did_not_answer():
    from rescore.engine.runner import Experiments
    from rescore.engine.sandbox import WorkerDied

    class Stub:
        proc = object()  # alive

        def __init__(self, answer):
            self.answer, self.asked = answer, 0

        def request(self, msg, timeout):
            self.asked += 1
            if isinstance(self.answer, Exception):
                raise self.answer
            return self.answer

    pace = Pace(timeout_s=30, total=10)
    failed = {"outcome": "mismatch", "wall_ms": 2000.0, "_explain": True}
    worker = Stub({"cause": "result_reuse", "cause_evidence": "seen", "limit_s": 5.0})
    experiments = Experiments(floor_s=1.0, share=1.0)
    assert experiments.explain(worker, dict(failed), pace) == {"outcome": "mismatch", "wall_ms": 2000.0,
                                                                "cause": "result_reuse", "cause_evidence": "seen"}
    experiments.spent = 10.0  # more than 1 s + 2 x 2 s of cases
    assert "cause" not in experiments.explain(worker, dict(failed), pace) and worker.asked == 1
    assert "more than the cases allow" in experiments.broken
    passing = {"outcome": "pass", "wall_ms": 1.0}
    assert experiments.explain(worker, dict(passing), pace) == passing  # nothing to explain, nothing asked
    dead = Stub(WorkerDied("timeout", "no answer within 5 s"))
    experiments = Experiments()
    row = experiments.explain(dead, dict(failed), pace)
    assert row == {"outcome": "mismatch", "wall_ms": 2000.0} and experiments.broken == "no answer within 5 s"
    experiments.explain(dead, dict(failed), pace)
    assert dead.asked == 1  # not asked again
    # the experiments' own code failing is no verdict on the kernel: the case keeps its own
    passing = {"outcome": "pass", "wall_ms": 1.0, "_explain": True}  # due its probe of later calls
    oom = Stub({"outcome": "oom", "reason": "out of memory in the reference", "_alone": {"by": "the reference"}})
    experiments = Experiments()
    assert experiments.explain(oom, dict(passing), pace) == {"outcome": "pass", "wall_ms": 1.0}
    assert experiments.broken is None  # beside other workers: the next case's may fit
    crash = Stub({"outcome": "crash", "reason": "harness: KeyError: 'x'"})
    assert experiments.explain(crash, dict(failed), pace) == {"outcome": "mismatch", "wall_ms": 2000.0}
    assert experiments.broken == "harness: KeyError: 'x'"
    flagged = Stub({"outcome": "bad_output", "reason": "call 4 overwrote", "cause": "output_aliasing",
                    "cause_evidence": "call 4 overwrote"})
    assert Experiments().explain(flagged, dict(passing), pace)["outcome"] == "bad_output"  # the probe's own verdict


def test_the_worker_notes_whose_turn_it_is_and_a_compile_pauses_the_candidates():
    from rescore.worker.turns import Turns

    notes: list[dict] = []
    turns = Turns()
    turns.begin(notes.append)
    turns.candidate()  # a model built before any reference ran: no limit known
    turns.harness()
    turns.measured(0.25)
    turns.candidate()
    turns.candidate()  # no change: no note
    turns.compiling()
    turns.compiling()  # a compile inside an autotuner's benchmark
    turns.compiled()
    turns.compiled()
    turns.end()
    turns.harness()  # between requests: nothing is sent
    assert notes == [{"by": "candidate", "reference_s": None}, {"by": "harness", "reference_s": None},
                     {"by": "candidate", "reference_s": 0.25}, {"by": "compiler", "reference_s": None},
                     {"by": "candidate", "reference_s": 0.25}]


def test_whose_turn_ran_out_says_whose_fault_it_is():
    """Past its call limit the kernel is timed out; out of the harness's time, or out of the per-case
    timeout while the kernel's limit was still ahead (level1/task59's fixed check on a CPU: a minute
    of the reference's conv3d per call), it is the machine's limit."""
    import time

    from rescore.engine.turn_clock import TurnClock

    clock = TurnClock(True, 10.0, lambda ref: 1.0 + 2.0 * ref)
    clock.note({"by": "candidate", "reference_s": 0.5})
    assert 1.9 < clock.deadline - time.monotonic() <= 2.0 and clock.limit_s == 2.0
    end = clock.expired()
    assert (end.outcome, end.limit_s) == ("timeout", 2.0) and "the limit of a call" in end.reason
    clock.note({"by": "harness"})
    end = clock.expired()
    assert end.outcome == "skipped" and end.kind == "harness timeout" and "harness's own work" in end.reason
    clock.note({"by": "candidate", "reference_s": 100.0})  # allowed 201 s, more than the timeout has
    end = clock.expired()
    assert end.outcome == "skipped" and end.kind == "harness timeout" and "more than the 10 s" in end.reason
    clock.note({"by": "candidate", "reference_s": None})  # no reference to judge it by (its construction)
    assert clock.expired().reason.startswith("no answer within 10 s") and clock.expired().outcome == "timeout"
    load = TurnClock(False, 10.0, lambda ref: 1.0)
    load.note({"by": "candidate", "reference_s": 0.1})  # a load keeps one timeout
    assert load.limit is None and load.deadline - time.monotonic() > 9.0
