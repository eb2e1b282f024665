"""Both oracles end to end on tiny Triton kernels under the interpreter."""

from collections import Counter

from conftest import toy_submission

from rescore.engine.runner import RunConfig, run_submission
from rescore.oracle.fixed import trial_seeds

CFG = RunConfig(strategies={"default": 6, "boundary": 6}, dtypes=("float32", "float16"))


def test_kernelbench_trial_seeds_follow_the_benchmark():
    import torch

    torch.manual_seed(42)
    expected = [int(torch.randint(0, 2**32 - 1, (1,)).item()) for _ in range(5)]
    assert trial_seeds() == expected


def test_null_check_judges_each_null_as_the_benchmarks_check_judges_a_candidate_that_returns_it():
    """One reference run a trial for all the nulls gives each the verdict and trials that the check
    gives a ModelNew built as the check builds it, running its own reference and returning that null;
    a null that does not apply is one whose candidate raises."""
    import types

    import torch

    from rescore.model.nulls import NULLS
    from rescore.oracle.fixed import kernelbench_check, null_check, null_output

    source = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, n, m):
        super().__init__()
        self.linear = nn.Linear(n, m)

    def forward(self, x):
        return {body}

def get_inputs():
    return [torch.randn(8, 16)]

def get_init_inputs():
    return [16, {m}]
"""

    def candidate(problem, kind):
        class ModelNew(torch.nn.Module):
            def __init__(self, *init):
                super().__init__()
                self.reference = problem.Model(*init)

            def forward(self, *inputs):
                null = null_output(kind, self.reference(*inputs), list(inputs))
                if null is None:
                    raise ValueError("this null does not apply")
                return null

        return types.SimpleNamespace(ModelNew=ModelNew)

    for body, m in (("self.linear(x) * 1e-3", 4), ("torch.tanh(self.linear(x)) + x", 16)):
        problem = types.ModuleType("stand_in")
        exec(source.format(body=body, m=m), problem.__dict__)
        nulls = null_check(problem, "cpu")["nulls"]
        seen = set()
        for kind in NULLS:
            try:
                expected = kernelbench_check(problem, candidate(problem, kind), "cpu")
            except ValueError:
                assert nulls[kind] is None, (body, kind)
                continue
            # a failing null's trials end at its first failure, where the check's verdict is settled
            trials = expected["trials"]
            settled = next((k + 1 for k, t in enumerate(trials) if not t["passed"]), len(trials))
            assert nulls[kind] == {"verdict": expected["verdict"], "trials": trials[:settled]}, (body, kind)
            seen.add(expected["verdict"])
        assert seen == ({"pass"} if m == 4 else {"fail"}), body


def test_null_check_runs_the_reference_once_when_every_null_fails_and_each_trial_while_one_passes():
    """The trials stop once every null is settled: the nulls of a problem none of them passes cost one
    run of its reference, those of a problem whose output is all zeros (zeros, the mean and noise pass)
    every trial's."""
    import types

    from rescore.oracle.fixed import TRIALS, null_check

    source = """
import torch
import torch.nn as nn

CALLS = []

class Model(nn.Module):
    def forward(self, x):
        CALLS.append(1)
        return {body}

def get_inputs():
    return [torch.randn(8, 16)]

def get_init_inputs():
    return []
"""
    for body, calls, verdicts in (("torch.tanh(x) * 3", 1, {"fail"}), ("x * 0", TRIALS, {"pass", "fail"})):
        problem = types.ModuleType("stand_in")
        exec(source.format(body=body), problem.__dict__)
        nulls = null_check(problem, "cpu")["nulls"]
        assert len(problem.CALLS) == calls, body
        assert {n["verdict"] for n in nulls.values()} == verdicts, body
        assert all(len(n["trials"]) == (TRIALS if n["verdict"] == "pass" else 1) for n in nulls.values()), body


def test_correct_kernel_passes_both_oracles(worker):
    rows = run_submission(toy_submission("problem_scale.py", "scale_correct.py"), CFG, worker)
    assert Counter(r["outcome"] for r in rows) == {"pass": 25}


def test_tail_bug_passes_the_fixed_check_but_not_fuzzing(worker):
    rows = run_submission(toy_submission("problem_scale.py", "scale_tail_bug.py"), CFG, worker)
    fixed = [r for r in rows if r["oracle"] == "fixed"]
    assert fixed[0]["outcome"] == "pass"  # 8 x 1024 is a multiple of the block: the illusion
    fuzz = Counter(r["outcome"] for r in rows if r["oracle"] == "fuzz")
    assert fuzz["nonfinite"] + fuzz["mismatch"] >= 20


def test_correct_block_reduction_is_not_flagged_against_float64(worker):
    """A 4096-term float32 row sum: assert_close defaults would flag it; the policy must not."""
    cfg = RunConfig(strategies={"default": 8}, dtypes=("float32",))
    sub = toy_submission("problem_rowsum.py", "rowsum_triton.py", dtypes=("float32",))
    rows = run_submission(sub, cfg, worker)
    assert Counter(r["outcome"] for r in rows) == {"pass": 9}
    fuzz = [r for r in rows if r["oracle"] == "fuzz"]
    assert all(r["bound"] is not None for r in fuzz)


def test_schema_inference_fuzzes_sizes_but_not_the_axis(worker):
    cfg = RunConfig(strategies={"default": 5}, dtypes=("float32",))
    rows = run_submission(toy_submission("problem_rowsum.py", "rowsum_triton.py", dtypes=("float32",)), cfg, worker)
    import json

    sizes = [json.loads(r["sizes"]) for r in rows if r["oracle"] == "fuzz"]
    assert all(set(s) == {"rows", "cols"} for s in sizes)
    assert len({(s["rows"], s["cols"]) for s in sizes}) > 1


def test_nan_the_reference_has_only_through_its_form_is_not_required(worker):
    """A dense reference spreads a NaN through 0 * NaN to outputs that do not depend on it; a
    kernel that never reads that input passes, one that drops a NaN it does read is flagged."""
    cfg = RunConfig(strategies={"nan_injected": 6}, dtypes=("float32",))
    correct = run_submission(toy_submission("problem_causal_mean.py", "causal_mean_prefix.py",
                                            dtypes=("float32",)), cfg, worker)
    assert Counter(r["outcome"] for r in correct if r["oracle"] == "fuzz") == {"pass": 6}
    buggy = run_submission(toy_submission("problem_causal_mean.py", "causal_mean_nan_drop.py",
                                          dtypes=("float32",)), cfg, worker)
    assert Counter(r["outcome"] for r in buggy if r["oracle"] == "fuzz") == {"nonfinite": 6}


def test_the_cases_record_whether_the_output_held_a_nan(worker):
    """Where the output is judged, the row says whether it held a NaN or Inf (the gpuemu papers' validator
    failed any): relu(x) * 2 keeps the NaN of its input, as the reference does, and passes."""
    cfg = RunConfig(strategies={"default": 2, "nan_injected": 3}, dtypes=("float32",))
    sub = toy_submission("problem_scale.py", "scale_correct.py", dtypes=("float32",))
    rows = [r for r in run_submission(sub, cfg, worker) if r["oracle"] == "fuzz"]
    held = {r["strategy"]: set() for r in rows}
    for r in rows:
        held[r["strategy"]].add((r["outcome"], r["output_nonfinite"]))
    assert held == {"default": {("pass", False)}, "nan_injected": {("pass", True)}}
