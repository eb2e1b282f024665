"""The timing stage without a GPU (every row `skipped`, said in the log), the measurement's statistics
through a fake clock, and the whole path (worker, executor, measurement) on CPU tensors timed by the
host's clock. The GPU path itself (CUDA events, L2 flush) is scripts/gpu/timing_smoke.py's, on the H200."""

from __future__ import annotations

import itertools
import json
import logging
from dataclasses import replace

import pytest
import torch
from conftest import toy_submission

from rescore.engine.timing_stage import run_timing, settings, time_submissions
from rescore.model.records import submission_to_dict
from rescore.model.tables import read_parquet
from rescore.worker import timing

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
    from rescore.engine.runner import job_of

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
