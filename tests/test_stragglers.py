"""No stragglers: a submission's budget, settling one that hangs or kills its worker on every case,
CUDA builds reused whatever their extension's name, heavy float64 references kept off the host."""

from __future__ import annotations

import json
import time

import pandas as pd
import torch
from conftest import REPO, toy_submission

from rescore.analysis.study import illusion_table
from rescore.analysis.uncertainty import statement
from rescore.engine.check import summarize
from rescore.engine.pacing import Pace
from rescore.engine.runner import RunConfig, run_submission
from rescore.model.language import detect_language
from rescore.model.outcomes import settled_reason, stopped_early
from rescore.model.records import Submission
from rescore.model.run import SUBMISSION_BUDGET_S, submission_budget
from rescore.worker.protocol import job_of

ROW = {"outcome": "crash", "reason": "the worker died"}


def hack(name: str) -> Submission:
    """A hack fixture (tests/fixtures/hacks/) against the toy problem it is written for."""
    path = REPO / "tests" / "fixtures" / "hacks" / f"{name}.py"
    problem = toy_submission("problem_scale.py", "torch_correct.py").problem
    src = path.read_text()
    return Submission(name=name, problem=problem, source=src, path=str(path), language=detect_language(src),
                      dtypes=("float32",))


# -- the pace of one submission ------------------------------------------------------------------


def test_the_same_death_twice_in_a_row_settles_and_anything_else_starts_the_count_again():
    pace = Pace(timeout_s=30, total=6)
    assert pace.record(ROW, "signal 11", 30) is ROW and pace.stop_reason() is None
    pace.record({"outcome": "pass"}, None, 30)  # an answer: the count starts again
    pace.record(ROW, "signal 11", 30)
    pace.record(ROW, "exit code 0", 30)  # another death: a count of one
    assert pace.stop_reason() is None
    pace.record(ROW, "exit code 0", 30)
    reason = pace.stop_reason()
    assert reason == ("settled: 2 cases in a row crashed the worker the same way (exit code 0); its verdict cannot "
                      "change, remaining cases not run") and stopped_early(reason)
    never = Pace(timeout_s=30, total=6, settle_after=0)
    for _ in range(4):
        never.record({"outcome": "timeout"}, "timeout", never.timeout())
    assert never.stop_reason() is None and never.timeout() == 30


def test_after_a_timeout_the_next_case_has_a_short_timeout_and_past_it_is_not_judged():
    pace = Pace(timeout_s=30, total=6, settle_timeout_s=2)
    assert pace.timeout() == 30
    genuine = {"outcome": "timeout", "reason": "no answer within 30 s"}
    assert pace.record(genuine, "timeout", 30) is genuine
    assert pace.timeout() == 2
    probe = pace.record({"outcome": "timeout", "reason": "no answer within 2 s"}, "timeout", 2)
    assert probe["outcome"] == "skipped" and "shortened timeout" in probe["reason"]
    assert pace.stop_reason() == ("settled: 2 cases in a row timed out (1 at the full 30 s, 1 at the shortened 2 s); "
                                  "its verdict cannot change, remaining cases not run")
    slow_once = Pace(timeout_s=30, total=6, settle_timeout_s=2)
    slow_once.record(genuine, "timeout", 30)
    slow_once.record({"outcome": "pass"}, None, 2)  # answered within the short timeout
    assert slow_once.timeout() == 30 and slow_once.stop_reason() is None


def test_a_spent_budget_stops_the_next_case_and_says_how_many_ran():
    pace = Pace(timeout_s=30, total=5, budget_s=4, started=time.monotonic() - 5)
    pace.record({"outcome": "pass"}, None, 30)
    assert pace.stop_reason() == "submission budget of 4 s spent after 1 of 5 cases"
    assert Pace(timeout_s=30, total=5, budget_s=4).stop_reason() is None
    assert submission_budget({}, "cpu") == SUBMISSION_BUDGET_S["cpu"]
    assert submission_budget({"submission_budget_s": {"cuda": 0}}, "cuda") is None  # 0: no budget


def test_a_budget_spent_partly_waiting_for_the_device_says_how_much():
    """The waits for a shared device count (a run's length stays bounded by its budgets), and the
    skipped cases' reason says how much of the budget they were: a limit of the run, not the kernel's."""
    waited = {"s": 7.0}  # the worker's waits before this submission: not this one's
    pace = Pace(timeout_s=30, total=5, budget_s=4, started=time.monotonic() - 3, waited=lambda: waited["s"])
    waited["s"] += 2.5
    assert pace.stop_reason() is None and 2.9 < pace.spent() < 3.5
    pace.started -= 1.5
    assert pace.stop_reason() == ("submission budget of 4 s spent after 0 of 5 cases (2 s of it waiting for the "
                                  "shared device: a limit of this run, not the kernel's)")


def test_a_settled_submission_or_a_spent_budget_is_not_shrunk():
    from rescore.engine.shrink import shrink_failure

    failure = {"seed": 1, "sizes": '{"dim": 64}', "dtype": "float32", "outcome": "crash"}
    settled = "settled: 2 cases in a row crashed the worker the same way (signal 11)"
    sub = toy_submission("problem_scale.py", "segfault.py")
    res = shrink_failure(None, sub, failure, settled=settled)  # no worker: nothing is run
    assert not res["shrunk"] and res["steps"] == 0 and res["note"] == f"not shrunk: {settled}"
    res = shrink_failure(None, sub, failure, deadline=time.monotonic() - 1)
    assert not res["shrunk"] and res["steps"] == 0 and "budget" in res["note"]


# -- whole submissions in a CPU worker -----------------------------------------------------------


def test_a_kernel_that_exits_on_every_case_is_settled_after_two(worker):
    cfg = RunConfig(strategies={"default": 4}, dtypes=("float32",), timeout_s=30, load_timeout_s=300)
    rows = run_submission(hack("os_exit"), cfg, worker)
    assert [r["outcome"] for r in rows] == ["crash", "crash", "skipped", "skipped", "skipped"]
    assert all("(after a retry)" in r["reason"] for r in rows[:2])
    assert {r["reason"] for r in rows[2:]} == {settled_reason(rows)}
    assert "crashed the worker the same way (exit code 0)" in settled_reason(rows)
    doc = summarize(rows)["fuzz"]
    assert doc["verdict"] == "flagged" and doc["run"] == 1 and doc["stopped"] == settled_reason(rows)


def test_the_fixed_checks_death_alone_neither_settles_the_fuzz_cases_nor_shortens_their_timeout():
    pace = Pace(timeout_s=30, total=4, settle_timeout_s=2)
    fixed = {"outcome": "timeout", "reason": "no answer within 30 s"}
    assert pace.record(fixed, "timeout", 30, settles=False) is fixed
    assert pace.timeout() == 30 and pace.stop_reason() is None  # the first fuzz case gets the full timeout
    pace.record({"outcome": "timeout"}, "timeout", pace.timeout())
    assert pace.timeout() == 2
    assert pace.stop_reason() == ("settled: 2 cases in a row timed out (2 at the full 30 s); its verdict cannot "
                                  "change, remaining cases not run")


def test_a_hang_costs_one_full_timeout_in_each_oracle_and_is_a_timeout_in_both(worker):
    """No call limit (its floor 0): the fixed check and the first fuzz case each time out at the full
    timeout, and the fuzz verdict is flagged, not `skipped` behind the fixed check's timeout."""
    cfg = RunConfig(strategies={"default": 4}, dtypes=("float32",), timeout_s=3, settle_timeout_s=1,
                    load_timeout_s=300)
    rows = run_submission(hack("infinite_loop"), cfg, worker)
    assert [r["outcome"] for r in rows] == ["timeout", "timeout", "skipped", "skipped", "skipped"]
    assert "no answer within 3 s" in rows[1]["reason"]
    assert "2 at the full 3 s" in rows[2]["reason"]
    doc = summarize(rows)
    assert doc["fixed"]["outcome"] == "timeout" and doc["fuzz"]["verdict"] == "flagged"


def test_a_kernel_that_hangs_on_one_size_only_is_not_cut_off(worker):
    """It times out at the benchmark's size (the fixed check); every other size answers within the
    short timeout, is judged, and the full timeout is back after it."""
    cfg = RunConfig(strategies={"default": 3}, dtypes=("float32",), timeout_s=3, settle_timeout_s=2,
                    load_timeout_s=300)
    sub = toy_submission("problem_scale.py", "hangs_at_benchmark_size.py", dtypes=("float32",))
    rows = run_submission(sub, cfg, worker)
    assert [r["outcome"] for r in rows] == ["timeout", "pass", "pass", "pass"], [r.get("reason") for r in rows]


def test_a_budget_spent_on_the_fixed_check_skips_every_fuzz_case_and_the_tables_say_so(worker):
    cfg = RunConfig(strategies={"default": 3}, dtypes=("float32",), submission_budget_s=1e-3)
    sub = toy_submission("problem_scale.py", "torch_correct.py", dtypes=("float32",))
    rows = run_submission(sub, cfg, worker)
    assert [r["outcome"] for r in rows] == ["pass", "skipped", "skipped", "skipped"]
    assert {r["reason"] for r in rows[1:]} == {"submission budget of 0.001 s spent after 1 of 4 cases"}
    cases = pd.DataFrame(rows)
    subs = pd.DataFrame([sub.row()])
    ill = illusion_table(cases, subs).iloc[0]
    assert ill["fixed_verdict"] == "pass" and ill["fuzz_verdict"] == "skipped" and ill["stopped_cases"] == 3
    assert ill["stopped_reason"].startswith("submission budget of 0.001 s")
    text = statement(cases, subs, illusion_table(cases, subs), {"master_seed": 0})
    assert "| torch_correct | 0 of 3 | submission budget of 0.001 s spent after 1 of 4 cases |" in text


# -- CUDA extensions: one library per content, whatever its name ----------------------------------


def test_two_load_inline_names_with_the_same_sources_resolve_to_one_library(tmp_path, monkeypatch):
    """A submission that names its extension after id(self) builds once: every later instance, and
    a fresh worker, imports that library; other sources or flags still build."""
    from torch.utils import cpp_extension

    from rescore.runtime import extensions
    from rescore.worker import prebuilt

    built, imported = [], []

    def fake_load_inline(name, cpp_sources, cuda_sources=None, functions=None, extra_cuda_cflags=None,
                         build_directory=None, verbose=False, is_python_module=True):
        """Builds as torch does: a library named after the call, in TORCH_EXTENSIONS_DIR/<name>."""
        import os
        from pathlib import Path

        folder = Path(os.environ["TORCH_EXTENSIONS_DIR"]) / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}.so").write_bytes(b"")
        built.append(name)
        return f"built {name}"

    monkeypatch.setattr(cpp_extension, "load_inline", fake_load_inline)
    monkeypatch.setattr(cpp_extension, "_import_module_from_library",
                        lambda module, path, is_python: imported.append((module, path)) or f"imported {module}")
    monkeypatch.setattr(cpp_extension, "JIT_EXTENSION_VERSIONER", cpp_extension.ExtensionVersioner())
    monkeypatch.setattr(prebuilt.PrebuiltState, "built", {})
    monkeypatch.setattr(prebuilt.PrebuiltState, "active", None)
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "before"))
    folder = prebuilt.activate("a submission that names its extension after id(self)", tmp_path)
    kernel = {"cpp_sources": "torch::Tensor f(torch::Tensor x);", "cuda_sources": "__global__ void k() {}",
              "functions": ["f"]}

    assert cpp_extension.load_inline(name="conv_140234", **kernel) == "built conv_140234"
    assert cpp_extension.load_inline(name="conv_140777", **kernel) == "imported conv_140234"
    assert imported == [("conv_140234", str(folder / "conv_140234"))]
    monkeypatch.setattr(prebuilt.PrebuiltState, "built", {})  # a fresh worker: the record in the folder remains
    assert cpp_extension.load_inline(name="conv_149999", verbose=True, **kernel) == "imported conv_140234"
    assert cpp_extension.load_inline(name="conv_150000", extra_cuda_cflags=["-O3"], **kernel) == "built conv_150000"
    assert built == ["conv_140234", "conv_150000"]
    fingerprint = extensions.call_fingerprint(fake_load_inline, (), dict(name="any other", **kernel))
    record = json.loads((folder / extensions.CALLS / f"{fingerprint}.json").read_text())
    assert record["name"] == record["module"] == "conv_140234"


def test_a_prebuilt_library_is_matched_by_content_not_name(tmp_path, monkeypatch):
    from torch.utils import cpp_extension

    from rescore.runtime import extensions
    from rescore.worker import prebuilt

    def fake_load_inline(name, cpp_sources, functions=None, verbose=False, build_directory=None):
        raise AssertionError("built again")

    monkeypatch.setattr(cpp_extension, "load_inline", fake_load_inline)
    monkeypatch.setattr(cpp_extension, "_import_module_from_library", lambda module, path, is_python: module)
    monkeypatch.setattr(prebuilt.PrebuiltState, "built", {})
    monkeypatch.setattr(prebuilt.PrebuiltState, "active", None)
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "before"))
    source = "ext = load_inline(name=f'ext_{os.getpid()}', ...)"
    library = extensions.extensions_dir(source, tmp_path) / "ext_4242"
    library.mkdir(parents=True)
    (library / "ext_4242.so").write_bytes(b"")
    fingerprint = extensions.call_fingerprint(fake_load_inline, ("ext_4242", "int f();"), {})
    record = {"ok": True, "key": extensions.build_key(), "extensions": ["ext_4242"],
              "calls": [["ext_4242", fingerprint, "ext_4242"]]}
    (library.parent / extensions.MARKER).write_text(json.dumps(record))
    prebuilt.activate(source, tmp_path)
    assert cpp_extension.load_inline("ext_5151", "int f();") == "ext_4242"


# -- where a GPU case computes its float64 truth ---------------------------------------------------


def test_a_host_truth_measured_slow_moves_its_case_and_the_problems_heavier_cases_to_the_device():
    """A KernelBench level 2 convolution reads few elements and does much work: the size estimate
    sends it to the host, the timed host run (a convolution's, say 50 ms) moves it to the device."""
    import rescore.worker.executor as ex
    from rescore.worker import placement

    executor = ex.Executor("cpu", 1 << 20)
    sub = toy_submission("problem_scale.py", "torch_correct.py")
    executor.load(job_of(sub))
    where = executor.placement
    where.device = "cuda"  # the rule reads the device name only
    x = torch.ones(1, 3, 64, 64, dtype=torch.float64)  # 12,288 elements: far below the host's limits
    assert where.choose([x], reduction_len=1) == "cpu"
    where.truth_device = "cpu"
    where.measured([x], 1, 5 * placement.HOST_TRUTH_SECONDS)
    assert where.truth_device == "cuda" and where.host_truth_work == x.numel() // 5
    assert where.choose([x], 1) == "cuda" and where.choose([x[:, :1, :32]], 1) == "cpu"
    executor.load(job_of(sub))  # the next submission of the problem starts from what was measured
    assert where.host_truth_work == x.numel() // 5
    where.learned_truth_work.clear()
    executor.load(job_of(sub))
    where.device = "cuda"
    where.truth_device = "cpu"
    where.measured([x], 1, placement.HOST_TRUTH_SECONDS / 2)  # fast: nothing moves
    assert where.truth_device == "cpu" and where.host_truth_work == placement.HOST_TRUTH_WORK


def test_the_truth_run_on_the_host_is_timed_without_building_the_module():
    import rescore.worker.executor as ex

    executor = ex.Executor("cpu", 1 << 20)
    executor.load(job_of(toy_submission("problem_scale.py", "torch_correct.py")))
    executor.reference.seconds = -1.0
    truths, _ = executor.reference.run(executor.loaded.problem, [torch.ones(8, 1024, dtype=torch.float64)], [],
                                       torch.float32, 1, "cpu", "cpu")
    assert truths[0].dtype == torch.float64 and 0.0 <= executor.reference.seconds


def test_the_prebuild_instantiates_a_model_that_builds_in_its_init(tmp_path, monkeypatch, capsys):
    """A `load_inline` inside ModelNew.__init__ (named after id(self)) is built by the prebuild,
    which instantiates the model on the problem's init inputs; an __init__ that raises is reported,
    not fatal."""
    import json

    from torch.utils import cpp_extension

    from rescore.engine.cuda_build import _import_for_build

    monkeypatch.setattr(cpp_extension, "load_inline", lambda name, cpp_sources, **kw: f"lib {name}")
    sub = tmp_path / "submission.py"
    sub.write_text(
        "import torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n\n"
        "class ModelNew(nn.Module):\n    def __init__(self, width):\n        super().__init__()\n"
        "        assert width == 7\n        self.ext = load_inline(name=f'ext_{id(self)}', cpp_sources='int f();')\n"
    )
    problem = tmp_path / "problem.py"
    problem.write_text("def get_init_inputs():\n    return [7]\n")
    _import_for_build(str(sub), str(problem))
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert len(printed["extensions"]) == 1 and printed["extensions"][0].startswith("ext_")
    assert printed["construct_error"] is None

    problem.write_text("def get_init_inputs():\n    return [8]\n")  # the assert in __init__ fails
    _import_for_build(str(sub), str(problem))
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed["extensions"] == [] and printed["construct_error"].startswith("AssertionError")
