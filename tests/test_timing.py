"""The timing stage without a GPU (every row `skipped`, said in the log), the measurement's statistics
through a fake clock, and the whole path (worker, executor, measurement) on CPU tensors timed by the
host's clock, and the stage's integrity: fresh input values before every call (a cache of answers
never hits) and the last timed output judged (a kernel that cheats only when timed is left out of
speedups and P4). The GPU path itself (CUDA events, L2 flush) is scripts/gpu/timing_smoke.py's, on the H200."""

from __future__ import annotations

import itertools
import json
import logging
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import torch
from conftest import toy_submission

from rescore.analysis.papers import p4
from rescore.engine.timing_stage import run_timing, settings, time_submissions
from rescore.model.records import submission_to_dict
from rescore.model.tables import read_parquet
from rescore.worker import timing

HACKS = Path(__file__).parent / "fixtures" / "hacks"
CONFIG = {"device": "cpu", "fixed": {"profile": "kernelbench-v0.1", "dtype": "float32"}, "timeout_s": 2,
          "budget": {"cpu": 4096, "cuda": 65536}, "timing": {"warmup": 2, "repeats": 5, "budget_s": 0.5}}


class FakeClock:
    """A clock that each call of `run` moves forward by the next of `durations` milliseconds."""

    def __init__(self, durations):
        self.now, self.durations, self.flushes = 0.0, iter(durations), 0

    def run(self) -> None:
        self.now += next(self.durations)

    def flush(self) -> None:
        self.flushes += 1

    def mark(self) -> float:
        return self.now

    def wait(self) -> None:
        pass

    def ms(self, start: float, end: float) -> float:
        return end - start


def test_the_median_and_spread_are_those_of_the_timed_calls_only():
    clock = FakeClock([50.0, 7.0, 5.0, 1.0, 3.0, 2.0, 4.0])  # two warm-up calls (the first compiles), five timed
    timed = timing.measure(clock.run, clock, clock.flush, warmup=2, repeats=5, budget_s=60)
    assert timed.samples_ms == [5.0, 1.0, 3.0, 2.0, 4.0] and clock.flushes == 5 and not timed.capped
    assert timing.columns(timed) == pytest.approx({"median_ms": 3.0, "min_ms": 1.0, "p10_ms": 1.4, "p25_ms": 2.0,
                                                   "p75_ms": 4.0, "p90_ms": 4.6, "max_ms": 5.0, "repeats": 5})
    with pytest.raises(ValueError, match="nothing was timed"):
        timing.spread([])


def test_a_slow_kernel_runs_as_many_repeats_as_its_budget_holds_but_never_too_few():
    # warm-up: 900 ms (compiling), then 100 ms a call: a 0.35 s budget holds 3 calls, MIN_REPEATS run
    slow = FakeClock(itertools.chain([900.0], itertools.repeat(100.0)))
    timed = timing.measure(slow.run, slow, slow.flush, warmup=3, repeats=50, budget_s=0.35)
    assert len(timed.samples_ms) == timing.MIN_REPEATS and timed.capped
    roomy = FakeClock(itertools.chain([900.0], itertools.repeat(100.0)))
    timed = timing.measure(roomy.run, roomy, roomy.flush, warmup=3, repeats=50, budget_s=2.0)
    assert len(timed.samples_ms) == 20 and timed.capped  # 2 s of 100 ms calls
    timed = timing.measure(roomy.run, roomy, roomy.flush, warmup=3, repeats=50, budget_s=60)
    assert len(timed.samples_ms) == 50 and not timed.capped


def test_a_torch_forward_and_its_reference_are_timed_on_cpu_tensors_through_the_executor():
    import rescore.worker.executor as ex
    from rescore.worker.protocol import job_of

    executor = ex.Executor("cpu", 1 << 20)
    executor.load(job_of(toy_submission("problem_scale.py", "torch_correct.py")))
    row = executor.run_timing("float32", warmup=2, repeats=7, budget_s=5, host_clock=True, flush_bytes=1 << 16)
    assert (row["outcome"], row["ref_outcome"], row.get("findings")) == ("ok", "ok", None), row
    assert row["repeats"] == row["ref_repeats"] == 7 and row["flush_bytes"] == 1 << 16 and not row["capped"]
    for p in ("", "ref_"):
        assert 0 < row[f"{p}min_ms"] <= row[f"{p}p10_ms"] <= row[f"{p}median_ms"] <= row[f"{p}p90_ms"] <= row[
            f"{p}max_ms"]
    without = executor.run_timing("float32", warmup=2, repeats=7, budget_s=5)  # no GPU: never the host's clock
    assert (without["outcome"], without["reason"]) == ("skipped", timing.NEEDS_GPU)


def test_timing_mode_puts_the_harness_settings_back():
    from torch.utils import deterministic

    before = (deterministic.fill_uninitialized_memory, torch.are_deterministic_algorithms_enabled(),
              torch.is_deterministic_algorithms_warn_only_enabled())
    deterministic.fill_uninitialized_memory = True
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        with timing.timing_mode():
            assert not deterministic.fill_uninitialized_memory and not torch.are_deterministic_algorithms_enabled()
            assert not torch.is_grad_enabled()
        assert deterministic.fill_uninitialized_memory and torch.are_deterministic_algorithms_enabled()
        assert torch.is_deterministic_algorithms_warn_only_enabled()
    finally:
        deterministic.fill_uninitialized_memory = before[0]
        torch.use_deterministic_algorithms(before[1], warn_only=before[2])


def _manifest(tmp_path, subs) -> str:
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps([submission_to_dict(s) for s in subs]))
    return str(path)


@pytest.mark.parametrize("device", ["cpu", "auto"])
def test_without_a_gpu_every_row_is_skipped_and_the_log_says_so(tmp_path, caplog, monkeypatch, device):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # `auto` on a machine without CUDA
    subs = [toy_submission("problem_scale.py", "torch_correct.py", dump="toy"),
            toy_submission("problem_scale.py", "scale_correct.py", dump="toy")]
    out = tmp_path / "timing.parquet"
    with caplog.at_level(logging.INFO, logger="rescore"):
        run_timing({"toy": _manifest(tmp_path, subs)}, settings(dict(CONFIG, device=device), ["toy"]), str(out),
                   str(tmp_path / "workers"))
    df = read_parquet(out, "timing")
    assert list(df["name"]) == ["torch_correct", "scale_correct"]
    assert (df["status"] == "skipped").all() and (df["reason"] == timing.NEEDS_GPU).all()
    assert df["median_ms"].isna().all() and df["torch"].notna().all()
    assert "NO TIMINGS" in caplog.text and "every one of the 2 rows" in caplog.text.lower()
    assert not (tmp_path / "workers").exists()  # no worker was started


def test_settings_default_to_the_papers_dump_and_the_fixed_dtype():
    cfg = settings({"device": "auto", "fixed": {"dtype": "float16"}, "timeout_s": 30, "budget": {"cuda": 99}}, ["p"])
    assert (cfg["dumps"], cfg["dtype"], cfg["timeout_s"], cfg["budget"]) == (["p"], "float16", 30.0, 99)
    assert settings({"timing": {"dumps": ["a", "b"], "repeats": 7}}, ["p"])["dumps"] == ["a", "b"]


def test_a_submission_that_hangs_or_cannot_load_gets_a_row_and_the_stage_goes_on(tmp_path):
    good = toy_submission("problem_scale.py", "torch_correct.py", dump="toy")
    broken = replace(good, name="unread", extra={"ingest_error": "meta.json: unreadable JSON"})
    subs = [toy_submission("problem_scale.py", "syntax_error.py", dump="toy"), broken, good,
            toy_submission("problem_scale.py", "hang.py", dump="toy")]  # last: no second worker to start
    rows = time_submissions(subs, settings(CONFIG, ["toy"]), str(tmp_path), device="cpu", host_clock=True,
                            flush_bytes=1 << 16)
    by_name = {r["name"]: r for r in rows}
    assert [r["name"] for r in rows] == ["syntax_error", "unread", "torch_correct", "hang"]
    assert by_name["syntax_error"]["status"] == "compile_error" and "SyntaxError" in by_name["syntax_error"]["reason"]
    assert by_name["hang"]["status"] == "timeout" and "no answer within" in by_name["hang"]["reason"]
    assert by_name["unread"]["status"] == "skipped" and "meta.json" in by_name["unread"]["reason"]
    ok = by_name["torch_correct"]
    assert ok["status"] == "ok" and ok["repeats"] == 5 and ok["median_ms"] > 0 and ok["speedup"] > 0
    assert ok.get("findings") is None  # timing's own settings are put back before the harness looks


def test_a_row_an_identical_run_measured_is_read_from_the_results_cache(tmp_path, monkeypatch, caplog):
    """The second run sends no request for the submission the first measured; the one that failed to
    compile (never stored) is run again; the rows are the first run's."""
    from rescore.engine import timing_stage

    sent = []
    real = timing_stage.run_with_retry

    def recording(worker, msg, timeout):
        sent.append((worker.job or {}).get("submission", {}).get("name") if type(msg).__name__ == "Time"
                    else msg.job["submission"]["name"])
        return real(worker, msg, timeout)

    monkeypatch.setattr(timing_stage, "run_with_retry", recording)
    subs = [toy_submission("problem_scale.py", "torch_correct.py", dump="toy"),
            toy_submission("problem_scale.py", "syntax_error.py", dump="toy")]
    cfg, cache = settings(CONFIG, ["toy"]), str(tmp_path / "cache")
    first = time_submissions(subs, cfg, str(tmp_path / "a"), device="cpu", host_clock=True, result_cache=cache)
    assert [r["status"] for r in first] == ["ok", "compile_error"]
    assert sent == ["torch_correct", "torch_correct", "syntax_error", "syntax_error"]  # each a load and a time
    sent.clear()
    with caplog.at_level("INFO", logger="rescore"):
        second = time_submissions(subs, cfg, str(tmp_path / "b"), device="cpu", host_clock=True, result_cache=cache)
    assert sent == ["syntax_error", "syntax_error"] and second[0] == first[0] and second[1]["status"] == "compile_error"
    assert "timing 1/2 torch_correct: ok" in caplog.text and "read from the results cache" in caplog.text
    assert "timing: 1 of 2 submissions read from the results cache" in caplog.text
    other = time_submissions(subs[:1], dict(cfg, repeats=6), str(tmp_path / "c"), device="cpu", host_clock=True,
                             result_cache=cache)
    assert other[0]["repeats"] == 6  # other settings: measured again


def test_fresh_values_are_written_before_every_call_outside_the_measured_interval():
    clock = FakeClock([50.0, 7.0, 5.0, 1.0, 3.0, 2.0, 4.0])
    order = []

    def refill() -> None:  # a slow copy: it would show in every sample if it were inside the interval
        order.append("refill")
        clock.now += 1000.0

    def run() -> None:
        order.append("run")
        clock.run()

    def flush() -> None:
        order.append("flush")

    timed = timing.measure(run, clock, flush, warmup=2, repeats=5, budget_s=60, refill=refill)
    assert timed.samples_ms == [5.0, 1.0, 3.0, 2.0, 4.0]
    assert order == ["refill", "run"] * 2 + ["refill", "flush", "run"] * 5


def _executor(candidate: str):
    import rescore.worker.executor as ex
    from rescore.worker.protocol import job_of

    executor = ex.Executor("cpu", 1 << 20)
    executor.load(job_of(toy_submission("problem_scale.py", candidate)))
    return executor


@pytest.mark.parametrize("hack", ["cache_by_version.py", "cache_by_content.py"])
def test_a_cache_of_answers_never_hits_while_timed(hack):
    """Keyed by pointer and `_version`, or by a sample of the content: every call computes its answer
    (one cache entry per call), the last timed output is right and the times are the work's. (These two
    hacks only keep a dict, so they run in this process, where their cache can be counted.)"""
    executor = _executor(str(HACKS / hack))
    row = executor.run_timing("float32", warmup=2, repeats=7, budget_s=5, host_clock=True, flush_bytes=1 << 16)
    assert (row["outcome"], row["timed_output"], row["timed_reason"], row.get("findings")) == ("ok", "pass", "", None)
    assert row["value_sets"] == 2 + 7 and len(executor.loaded.candidate._cache) == 2 + 7
    # the same calls on unchanged inputs: one answer computed, every other call a hit
    executor.loaded.candidate._cache.clear()
    model = executor.loaded.candidate.ModelNew()
    inputs = timing.benchmark_inputs(executor.loaded.problem, "cpu", "float32")
    clock = timing.HostClock()
    timing.measure(lambda: model(*inputs), clock, lambda: None, warmup=2, repeats=7, budget_s=5)
    assert len(executor.loaded.candidate._cache) == 1


def test_the_value_ring_changes_every_input_in_place_and_keeps_to_its_memory():
    problem = _executor("torch_correct.py").loaded.problem
    ring = timing.ValueRing(problem, "cpu", "float32", calls=4)
    inputs = ring.fresh_inputs()
    (x,) = inputs
    ptr, seen = x.data_ptr(), []
    for _ in range(5):
        before = x._version
        ring.fill(inputs)
        assert x.data_ptr() == ptr and x._version > before and torch.equal(x, ring.last[0])
        seen.append(x.clone())
    assert torch.equal(seen[0], timing.benchmark_inputs(problem, "cpu", "float32")[0])  # the benchmark's own first
    assert all(not torch.equal(seen[i], seen[j]) for i in range(4) for j in range(i))
    assert torch.equal(seen[4], seen[0])  # four sets for four calls, then round again
    tight = timing.ValueRing(problem, "cpu", "float32", calls=100, ring_bytes=3 * timing.input_bytes(inputs))
    assert tight.count == 3
    assert timing.ValueRing(problem, "cpu", "float32", calls=100, ring_bytes=1).count == 2  # never the same twice
    drawn_sizes = iter([3, 3, 5, 3])  # a problem whose get_inputs() draws its sizes: sets of one shape only
    sizes = SimpleNamespace(get_inputs=lambda: [torch.randn(next(drawn_sizes)), 7])
    ring = timing.ValueRing(sizes, "cpu", "float32", calls=4)
    assert ring.count == 2 and [len(v[0]) for v in ring.sets] == [3, 3]


def test_the_timed_output_is_judged_like_the_fixed_check():
    ref = torch.randn(4, 8)
    assert timing.check_timed(ref + 1e-4, ref, "float32") == ("pass", "")
    verdict, why = timing.check_timed(torch.zeros_like(ref), ref, "float32")
    assert verdict == "mismatch" and "output 0 of the last timed call" in why
    assert timing.check_timed(ref[:2], ref, "float32")[0] == "bad_output"
    nan = torch.full((4, 8), float("nan"))
    assert timing.check_timed(nan.clone(), nan, "float32")[0] == "pass"  # NaN where the reference's is
    assert timing.check_timed(nan, torch.ones(4, 8), "float32")[0] == "nonfinite"
    assert timing.check_timed("done", torch.ones(2), "float32")[0] == "bad_output"
    assert timing.check_timed(torch.ones(3, dtype=torch.int64), torch.ones(3, dtype=torch.int64), "float32") == (
        "pass", "")


def test_a_kernel_that_cheats_only_when_timed_is_caught_and_left_out_of_speedups_and_p4(tmp_path):
    subs = [toy_submission("problem_scale.py", "torch_correct.py", dump="toy"),
            toy_submission("problem_scale.py", str(HACKS / "sniffs_harness.py"), dump="toy")]
    rows = time_submissions(subs, settings(CONFIG, ["toy"]), str(tmp_path), device="cpu", host_clock=True,
                            flush_bytes=1 << 16)
    good, cheat = rows
    assert (good["status"], good["timed_output"], good.get("findings")) == ("ok", "pass", None)
    assert good["speedup"] > 0 and good["value_sets"] == 2 + 5
    assert (cheat["status"], cheat["timed_output"], cheat["findings"]) == ("ok", "mismatch", "wrong_when_timed")
    assert "last timed call" in cheat["timed_reason"] and cheat.get("speedup") is None and cheat["median_ms"] > 0
    # P4 pairs a control with its buggy variant: a wrong timed output gives the pair no times, and says why
    timing_df = pd.DataFrame(rows)
    names = pd.DataFrame({"name": [r["name"] for r in rows], "submission_id": [r["submission_id"] for r in rows]})
    pair = p4.Times(timing_df, names).pair("torch_correct", "sniffs_harness")
    assert pd.isna(pair["d_ms_median"]) and pd.isna(pair["variant_ms"])
    assert pair["timing_note"].startswith("no times: buggy sniffs_harness's timed output is mismatch")
    legacy = timing_df.drop(columns=["timed_output", "timed_reason"])  # rows written before the check existed
    assert not pd.isna(p4.Times(legacy, names).pair("torch_correct", "sniffs_harness")["d_ms_median"])


def test_a_reference_that_fails_leaves_the_candidate_times_and_says_the_output_was_not_judged():
    row = timing.reference_failed({"median_ms": 1.0}, RuntimeError("boom"), "p.py")
    assert (row["median_ms"], row["ref_outcome"], row["timed_output"]) == (1.0, "crash", "skipped")
    assert row["timed_reason"] == "not judged: problem p.py: the reference failed: RuntimeError: boom"
    judged = timing.reference_failed({"timed_output": "mismatch", "timed_reason": "r"}, RuntimeError("x"), "p.py")
    assert (judged["timed_output"], judged["timed_reason"], judged["ref_outcome"]) == ("mismatch", "r", "crash")
    assert not p4.wrong_when_timed(row) and p4.wrong_when_timed(judged)
