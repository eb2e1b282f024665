"""The tolerance of a float64 reference rounded to the test dtype (gpuemu's ref_fp64.py scripts): its
low-precision reference is the reference script with every intermediate rounded once at float32
(Monte Carlo arithmetic), so a correct float32 kernel passes where the op is ill-conditioned and a
buggy one still fails. The fixture (tests/fixtures/dumps/gpuemu_rounded) is in the real gpuemu layout."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import REPO

from rescore.engine.sandbox import run_with_retry
from rescore.ingest import gpuemu
from rescore.oracle.reference import Reference, intermediate_rounding, reference_at, round_parameters
from rescore.worker.protocol import Case, Load, job_of

FIXTURE = REPO / "tests" / "fixtures" / "dumps" / "gpuemu_rounded"


@pytest.fixture(scope="module")
def entries() -> dict:
    return {s.name: s for s in gpuemu.read("rounded", {"path": str(FIXTURE)})}


def run_cases(worker, sub, dtype: str, values: str, sizes: dict, seeds: range) -> list[dict]:
    assert run_with_retry(worker, Load(job_of(sub)), 120).get("outcome") is None
    worker.job = job_of(sub)
    return [run_with_retry(worker, Case("op_domain", seed, dtype, {"sizes": sizes, "values": values}), 120)
            for seed in seeds]


def test_a_generated_gpuemu_problem_rounds_every_step_of_its_reference_once_when_asked(entries):
    import numpy as np

    from rescore.worker.loading import load_problem

    module, _ = load_problem(job_of(entries["layernorm"])["problem"])
    rounding = intermediate_rounding(module)
    assert rounding is not None
    x = (100 + torch.randn(3, 5, 64, dtype=torch.float64)).to(torch.float32).to(torch.float64)
    model = module.Model()
    exact = model(x)
    frombuffer = np.frombuffer
    with rounding(2.0**-24, 7):
        once = model(x)
    with rounding(2.0**-24, 7):
        again = model(x)
    with rounding(0.0, 7):
        unmoved = model(x)
    assert np.frombuffer is frombuffer and torch.equal(model(x), exact)  # nothing left behind
    assert torch.equal(once, again) and torch.equal(unmoved, exact)  # seeded; u = 0 rounds nothing
    moved = (once - exact).abs().max().item()
    assert 1e-7 < moved < 1e-3  # x - mean of values near 100 at float32: ~100 u / std, no more


def test_a_problem_that_does_not_round_keeps_the_reference_run_at_the_test_dtype(entries):
    """The built-in corpus and KernelBench problems: the low-precision reference is their module run
    at the test dtype, as before."""
    from conftest import TOY

    from rescore.runtime.modules import load_module

    problem = load_module((TOY / "problem_rowsum.py").read_text(), str(TOY / "problem_rowsum.py"), "problem")
    x = torch.randn(4, 300, dtype=torch.float64).to(torch.float32).to(torch.float64)
    low = [x.to(torch.float32)]
    _, lowps = Reference().run(problem, [x], [1], torch.float32, 3, "cpu", "cpu", low)
    expected = reference_at(round_parameters(problem.Model(1), torch.float32), low, "cpu", torch.float32)
    assert torch.equal(lowps[0], expected)


def test_a_correct_float32_layernorm_passes_where_its_mean_dwarfs_its_spread(worker, entries):
    """The H100 run flagged the corpus's float32 layernorm control here (offset_mean, H = 2: two values
    near 100 that differ in their fifth digit): rounding the mean at float32 moves x - mean by a
    fraction of a percent, which the reference rounded from float64 could not show."""
    rows = run_cases(worker, entries["layernorm"], "float32", "offset_mean", {"B": 3, "S": 35, "H": 2}, range(6))
    assert [r["outcome"] for r in rows] == ["pass"] * 6
    assert max(r["ref_lowp_err"] for r in rows) > 1e-4  # the rounded reference's own error was ~3e-8


def test_a_one_pass_variance_still_fails_where_it_cancels(worker, entries):
    rows = run_cases(worker, entries["layernorm_onepass"], "float32", "offset_mean", {"B": 2, "S": 7, "H": 1025},
                     range(3))
    assert {r["outcome"] for r in rows} == {"mismatch"}
    assert min(json.loads(r["policy_ratios"])["reference-lowp"] for r in rows) > 4


def test_a_correct_flash_attention_passes_at_large_values_and_a_dropped_rescale_still_fails(worker, entries):
    for sizes in ({"M": 6, "N": 2, "D": 11}, {"M": 8, "N": 64, "D": 16}):
        rows = run_cases(worker, entries["flash_attention"], "float32", "large", sizes, range(4))
        assert {r["outcome"] for r in rows} == {"pass"}, rows
    bad = run_cases(worker, entries["flash_attention_buggy"], "float32", "normal", {"M": 8, "N": 64, "D": 16},
                    range(3))
    assert {r["outcome"] for r in bad} == {"mismatch"}
    assert min(json.loads(r["policy_ratios"])["reference-lowp"] for r in bad) > 100
