"""The sandbox: a kernel that segfaults, one that hangs, one that mutates its input, one that
declines, one that does not parse; each gets its outcome and the run goes on."""

from collections import Counter

from conftest import toy_submission

from rescore.engine.runner import RunConfig, run_submission
from rescore.engine.sandbox import Worker

CFG = RunConfig(strategies={"default": 1}, dtypes=("float32", "float16"), timeout_s=15)


def outcomes(rows, oracle="fuzz"):
    return Counter(r["outcome"] for r in rows if r["oracle"] == oracle)


def test_segfault_is_crash_and_the_worker_comes_back(worker):
    rows = run_submission(toy_submission("problem_scale.py", "segfault.py"), CFG, worker)
    assert outcomes(rows, "fixed") == {"crash": 1} and outcomes(rows) == {"crash": 1, "skipped": 1}
    assert "signal 11" in rows[1]["reason"]
    assert rows[2]["reason"].startswith("settled: 2 cases in a row crashed the worker the same way (signal 11)")
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

    import pytest

    from rescore.worker import exceptions

    refused = RuntimeError("CUDA error: invalid configuration argument")
    monkeypatch.setattr(exceptions, "exceeds_worker_memory", lambda exc, device: False)
    monkeypatch.setattr(exceptions, "cuda_context_usable", lambda: True)
    verdict = exceptions.verdict_of(refused, set(), None, "cuda")
    assert verdict.outcome == "crash" and "invalid configuration argument" in verdict.reason
    monkeypatch.setattr(exceptions, "cuda_context_usable", lambda: False)
    with pytest.raises(exceptions.NeedsRestart):
        exceptions.verdict_of(RuntimeError("CUDA error: an illegal memory access was encountered"), set(), None, "cuda")


def test_without_a_gpu_the_cuda_context_counts_as_unusable():
    import torch

    from rescore.worker.exceptions import cuda_context_usable

    assert cuda_context_usable() is torch.cuda.is_available()


def test_large_tensors_hash_in_chunks_the_same_on_any_number_of_threads(monkeypatch):
    """A 2^31-element trigger is hashed in chunks on all cores; the hash must not depend on the
    thread count, must see a change anywhere, and small tensors hash as one plain buffer."""
    import hashlib

    import torch

    from rescore.worker import integrity

    x = torch.arange(4096, dtype=torch.float64)
    plain = hashlib.sha256()
    integrity.hash_tensor(plain, x)
    expected = hashlib.sha256(f"{tuple(x.shape)}{x.dtype}".encode() + x.numpy().tobytes()).hexdigest()
    assert plain.hexdigest() == expected
    monkeypatch.setattr(integrity, "HASH_CHUNK_BYTES", 1024)
    digests = set()
    for cores in (1, 3, 8):
        monkeypatch.setattr(integrity.os, "cpu_count", lambda n=cores: n)
        h = hashlib.sha256()
        integrity.hash_tensor(h, x)
        digests.add(h.hexdigest())
    assert len(digests) == 1 and expected not in digests
    y = x.clone()
    y[4000] += 1
    assert integrity.digest([y]) != integrity.digest([x]) == integrity.digest([x.clone()])


def test_triton_compile_error_names_its_source_line_and_cause():
    """A Triton CompilationError's first line is only a position; the recorded reason carries the
    line it points at and the cause (here: tl.exp refusing float16 on triton 3.6)."""
    import ast

    from triton.compiler.errors import CompilationError

    from rescore.worker.exceptions import classify_exception

    src = "def k(z):\n    th = 1.0 - 2.0 / (tl.exp(2.0 * z) + 1.0)\n"
    node = ast.parse(src).body[0].body[0].value
    exc = CompilationError(src, node, "ValueError(\"Expected dtype ['fp32', 'fp64'] but got fp16\")")
    verdict = classify_exception(exc, None)
    assert verdict.outcome == "compile_error"
    assert "tl.exp(2.0 * z)" in verdict.reason and "but got fp16" in verdict.reason


def test_a_workers_log_says_where_its_start_went(worker):
    """Each worker's log opens with how long its start took and in which steps (a worker started in
    7 to 12 s on an H100 host against 1.5 s here, and the logs did not say where)."""
    import re

    run_submission(toy_submission("problem_scale.py", "torch_correct.py"), CFG, worker)
    line = next(x for x in worker.log_path.read_text().splitlines() if " ready in " in x)
    m = re.search(r"ready in ([\d.]+) s \(torch and the device ([\d.]+) s, the harness's imports ([\d.]+) s, "
                  r"triton ([\d.]+) s, the harness's snapshots ([\d.]+) s\)$", line)
    assert m, line
    total, *steps = map(float, m.groups())
    assert abs(total - sum(steps)) < 0.02 and steps[1] > 0
