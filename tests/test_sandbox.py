"""The sandbox: a kernel that segfaults, one that hangs, one that mutates its input, one that
declines, one that does not parse; each gets its outcome and the run goes on."""

from collections import Counter

from conftest import toy_submission

from rescore.runner import RunConfig, run_submission
from rescore.sandbox import Worker

CFG = RunConfig(strategies={"default": 1}, dtypes=("float32", "float16"), timeout_s=15)


def outcomes(rows, oracle="fuzz"):
    return Counter(r["outcome"] for r in rows if r["oracle"] == oracle)


def test_segfault_is_crash_and_the_worker_comes_back(worker):
    rows = run_submission(toy_submission("problem_scale.py", "segfault.py"), CFG, worker)
    assert outcomes(rows) == {"crash": 2}
    assert "signal 11" in rows[1]["reason"]
    after = run_submission(toy_submission("problem_scale.py", "torch_correct.py"), CFG, worker)
    assert outcomes(after) == {"pass": 2}


def test_hang_is_timeout():
    cfg = RunConfig(strategies={"default": 1}, dtypes=("float32",), timeout_s=3)
    w = Worker("cpu", 1 << 15)
    try:
        rows = run_submission(toy_submission("problem_scale.py", "hang.py"), cfg, w, fixed=False)
    finally:
        w.stop()
    assert outcomes(rows) == {"timeout": 1}
    assert "3 s" in rows[0]["reason"]


def test_input_mutation_is_caught(worker):
    rows = run_submission(toy_submission("problem_scale.py", "mutates.py"), CFG, worker)
    assert outcomes(rows) == {"mutated_input": 2}


def test_refusal_from_own_code_is_declined(worker):
    rows = run_submission(toy_submission("problem_scale.py", "declines.py"), CFG, worker)
    assert outcomes(rows) == {"pass": 1, "declined": 1}
    declined = [r for r in rows if r["outcome"] == "declined"]
    assert all("TypeError" in r["reason"] and "declines.py" in r["reason"] for r in declined)


def test_syntax_error_is_compile_error(worker):
    rows = run_submission(toy_submission("problem_scale.py", "syntax_error.py"), CFG, worker)
    assert outcomes(rows) == {"compile_error": 2}
    assert outcomes(rows, "fixed") == {"compile_error": 1}
    assert "SyntaxError" in rows[0]["reason"]


def test_bfloat16_under_the_interpreter_is_skipped_with_reason(worker):
    cfg = RunConfig(strategies={"default": 1}, dtypes=("bfloat16",))
    rows = run_submission(toy_submission("problem_scale.py", "scale_correct.py", dtypes=("bfloat16",)), cfg, worker)
    fuzz = [r for r in rows if r["oracle"] == "fuzz"]
    assert [r["outcome"] for r in fuzz] == ["skipped"]
    assert "interpreter" in fuzz[0]["reason"]


def test_a_refused_cuda_launch_keeps_the_worker_a_poisoned_context_restarts_it(monkeypatch):
    """A grid of 0 blocks is refused at launch and leaves the CUDA context usable: that case is a
    `crash`, and the worker (its CUDA process, its loaded kernel) goes on with the next case. Only a
    context the error poisoned costs a restart."""
    import types

    import pytest

    from rescore import execute

    harness = types.SimpleNamespace(findings=set(), candidate_file=None, _hog=lambda exc: False)
    refused = RuntimeError("CUDA error: invalid configuration argument")
    monkeypatch.setattr(execute, "cuda_context_usable", lambda: True)
    verdict = execute.Executor._verdict_of(harness, refused)
    assert verdict.outcome == "crash" and "invalid configuration argument" in verdict.reason
    monkeypatch.setattr(execute, "cuda_context_usable", lambda: False)
    with pytest.raises(execute.NeedsRestart):
        execute.Executor._verdict_of(harness, RuntimeError("CUDA error: an illegal memory access was encountered"))


def test_without_a_gpu_the_cuda_context_counts_as_unusable():
    import torch

    from rescore.execute import cuda_context_usable

    assert cuda_context_usable() is torch.cuda.is_available()
