"""The rules behind causes, each on its own (issue 28 item 4, issue 30 items 1 to 4): when an
experiment may name `shape_specialised` (worker/specialised.py), a kernel's cause from its cases
(analysis/study.py), the cause x bug-class table (analysis/causes.py), the numerics flags a
submission sets (worker/guard.py), and the output as the caller's stream sees it (worker/streams.py).
The end-to-end runs are in tests/test_causes.py."""

from __future__ import annotations

import types

import pandas as pd
import pytest
import torch

from rescore.analysis.causes import NO_CAUSE, causes_table, load_classes, precision_summary
from rescore.analysis.study import submission_cause
from rescore.corpus.catalog import load_corpus
from rescore.inputs.strategies import CaseSpec
from rescore.worker import specialised, streams
from rescore.worker.experiments import NUMERICS_FLAGS, Cause, Explainer, precision_flags
from rescore.worker.guard import Guard
from rescore.worker.integrity import Harness, torch_state
from rescore.worker.job import Loaded
from rescore.worker.streams import as_seen_from
from rescore.worker.usage import OpRecorder

BENCH = {"batch_size": 8, "dim": 1024}
SMALL = {"batch_size": 3, "dim": 100}


# -- shape_specialised: every condition of worker/specialised.py ------------------------------------

def _context() -> types.SimpleNamespace:
    schema = types.SimpleNamespace(defaults=lambda: dict(BENCH))
    return types.SimpleNamespace(loaded=types.SimpleNamespace(schema=schema), explainer=Explainer())


def _specialised(fails, values: str = "normal", dtype: str = "float32"):
    """`specialised.confirm` on a failing case at SMALL sizes, with a stand-in for the trigger runs:
    `fails(trigger)` says whether the kernel fails that explicit trigger. Returns (the answer, the
    triggers run)."""
    runs = []

    def run_case(strategy, seed, dtype, trigger):
        runs.append(trigger)
        return {"outcome": "mismatch" if fails(trigger) else "pass"}

    spec = CaseSpec("default", 7, dtype, SMALL, values, "contiguous")
    found = specialised.confirm(_context(), spec, {"outcome": "mismatch"}, run_case)
    return found, runs


def _at(trigger: dict, sizes: dict) -> bool:
    return trigger["sizes"] == sizes


def test_a_kernel_wrong_only_at_other_sizes_is_shape_specialised():
    found, runs = _specialised(lambda t: _at(t, SMALL))
    assert found is not None and found.cause == Cause.SHAPE_SPECIALISED, found
    assert "fails again as an explicit trigger" in found.evidence and "native, normal, small" in found.evidence
    assert {t["values"] for t in runs if _at(t, BENCH)} == set(specialised.BENCHMARK_VALUES)


@pytest.mark.parametrize("shows", ["small", "negative"])
def test_a_kernel_wrong_at_the_benchmark_sizes_on_some_ordinary_values_is_not(shows):
    """As CUDA-L1 level2/task36: at the benchmark's sizes normal values saturate the op and hide the bug,
    small values there show it; a max that starts at 0 meets no all-negative row of normals there."""
    found, _ = _specialised(lambda t: _at(t, SMALL) or t["values"] == shows)
    assert found is None


def test_a_failure_that_does_not_come_back_as_a_trigger_is_not_the_sizes():
    """Wrong after the decoy call only (state kept from an earlier call): the case at its own sizes as a
    trigger, with no call before it, passes; the sizes explain nothing."""
    found, _ = _specialised(lambda t: False)
    assert found is None


def test_special_values_that_normal_values_at_the_same_sizes_do_not_fail_are_a_value_effect():
    found, _ = _specialised(lambda t: _at(t, SMALL) and t["values"] == "nan_few", values="nan_few")
    assert found is None
    found, _ = _specialised(lambda t: _at(t, SMALL), values="nan_few")  # normal values fail there too
    assert found is not None and found.cause == Cause.SHAPE_SPECIALISED
    assert "with normal values it fails too" in found.evidence


def test_the_answers_are_asked_once_per_kernel_dtype_and_values():
    ctx = _context()
    runs = []

    def run_case(strategy, seed, dtype, trigger):
        runs.append(trigger)
        return {"outcome": "mismatch" if _at(trigger, SMALL) else "pass"}

    for seed in (1, 2, 3):
        spec = CaseSpec("default", seed, "float32", SMALL, "normal", "contiguous")
        assert specialised.confirm(ctx, spec, {"outcome": "mismatch"}, run_case).cause == Cause.SHAPE_SPECIALISED
    assert len(runs) == len(specialised.BENCHMARK_VALUES) + 2  # right at B, the same values at B, again at S


def test_dtype_specialised_needs_the_failure_back_as_a_trigger_and_no_value_effect():
    found, _ = _specialised(lambda t: t["dtype"] == "float16", dtype="float16")
    assert found is not None and found.cause == Cause.DTYPE_SPECIALISED
    found, _ = _specialised(lambda t: False, dtype="float16")
    assert found is None
    # special values that overflow float16 only, on a kernel wrong at float32 on normal values
    found, _ = _specialised(lambda t: t["values"] == "normal" or t["dtype"] == "float16", dtype="float16",
                            values="special")
    assert found is None
    found, _ = _specialised(lambda t: t["dtype"] == "float16" and t["values"] == "special", dtype="float16",
                            values="special")
    assert found is None


# -- a kernel's cause from its cases (analysis/study.py) ----------------------------------------------

def _rows(*cases) -> pd.DataFrame:
    rows = []
    for i, (oracle, outcome, sizes, values, cause) in enumerate(cases):
        rows.append({"oracle": oracle, "strategy": "fixed" if oracle == "fixed" else "default", "dtype": "float32",
                     "case_index": i, "outcome": outcome, "sizes": sizes, "values": values, "layout": "contiguous",
                     "cause": cause, "cause_evidence": f"evidence {i}" if cause else None})
    return pd.DataFrame(rows)


def test_a_kernels_cause_is_its_worst_failures_not_the_majority():
    """level1/task70 had 8 cases called precision_downgrade and 5 unsynchronized_stream: the kernel's cause
    is the one of its most severe failure (here the one at the benchmark's own sizes)."""
    other = '{"batch_size": 3, "dim": 100}'
    bench = '{"batch_size": 8, "dim": 1024}'
    cases = [("fuzz", "mismatch", other, "normal", "precision_downgrade")] * 8
    cases += [("fuzz", "mismatch", bench, "normal", "unsynchronized_stream")] * 5
    rows = _rows(("fixed", "pass", bench, "native", None), *cases)
    assert submission_cause(rows, BENCH) == ("unsynchronized_stream", "evidence 9")


def test_a_kernel_wrong_at_the_benchmark_sizes_is_never_shape_specialised():
    other = '{"batch_size": 3, "dim": 100}'
    rows = _rows(("fixed", "mismatch", '{"batch_size": 8, "dim": 1024}', "native", None),
                 ("fuzz", "mismatch", other, "normal", "shape_specialised"),
                 ("fuzz", "nonfinite", other, "special", "result_reuse"))
    assert submission_cause(rows, BENCH) == ("result_reuse", "evidence 2")
    assert submission_cause(rows.iloc[:2], BENCH) == (None, None)


# -- the cause x bug-class table (analysis/causes.py) -------------------------------------------------

def test_every_class_the_causes_explain_is_a_bug_class_of_the_corpus():
    classes = load_classes()
    corpus = {s.bug_class for s in load_corpus() if s.bug_class}
    assert set(classes.explains) <= {c.value for c in Cause}
    for cause, named in classes.explains.items():
        assert named <= corpus, (cause, named - corpus)
    assert {c for _, _, c in classes.notes} <= corpus


def test_the_table_counts_each_cause_against_the_classes_it_explains():
    subs = pd.DataFrame([
        {"submission_id": "a", "name": "k_tail", "dump": "d", "label": "buggy", "bug_class": "tail_mask_leak"},
        {"submission_id": "b", "name": "k_eps", "dump": "d", "label": "buggy", "bug_class": "eps_swapped"},
        {"submission_id": "c", "name": "ctrl", "dump": "d", "label": "correct", "bug_class": None},
        {"submission_id": "e", "name": "gelu_triton_buggy", "dump": "g", "label": "buggy", "bug_class": None,
         "description": "Real Triton GELU with the 0.5 factor dropped"},
        {"submission_id": "f", "name": "k_unknown", "dump": "d", "label": "buggy", "bug_class": None},
    ])
    illusion = pd.DataFrame({"submission_id": list("abcef"), "dump": ["d", "d", "d", "g", "d"],
                             "fuzz_verdict": ["flagged"] * 5,
                             "cause": ["shape_specialised", "shape_specialised", "shape_specialised", None,
                                       "shape_specialised"]})
    cases = pd.DataFrame({"submission_id": ["a", "a", "b", "e"], "oracle": "fuzz", "purpose": "evaluation",
                          "outcome": ["mismatch", "mismatch", "mismatch", "mismatch"],
                          "cause": ["shape_specialised", None, "shape_specialised", "shape_specialised"]})
    table = causes_table(illusion, cases, subs, load_classes())
    shape = table[(table["dump"] == "d") & (table["cause"] == "shape_specialised")].set_index("bug_class", drop=False)
    assert shape.loc["tail_mask_leak", "explained"] and not shape.loc["eps_swapped", "explained"]
    assert shape["judged"].iloc[0] == 3  # the unknown-class kernel is not judged
    assert shape["precision"].iloc[0] == pytest.approx(1 / 3)
    assert shape["case_precision"].iloc[0] == pytest.approx(1 / 2)
    notes = table[table["dump"] == "g"]
    assert set(notes["class_source"]) == {"notes"} and set(notes["bug_class"]) == {"dropped_constant"}
    assert set(notes["cause"]) == {NO_CAUSE, "shape_specialised"}  # the kernel had none, one of its cases one
    summary = precision_summary(table)
    assert set(summary["cause"]) == {"shape_specialised"}


# -- the numerics flags a submission sets (worker/guard.py) ------------------------------------------

def test_precision_flags_are_tf32_reduced_reductions_and_matmul_precision_not_the_autotuner():
    harness = {"float32_matmul_precision": "highest", "cuda_matmul_tf32": False,
               "cuda_matmul_reduced": (False, False), "cudnn": (True, False, False, False)}
    assert precision_flags({"cudnn": (True, False, False, True)}, harness) == []  # cudnn.benchmark alone
    assert precision_flags({"cudnn": (True, True, False, True), "cuda_matmul_tf32": True,
                            "float32_matmul_precision": "medium"}, harness) == [
        "cudnn.allow_tf32=True", "cuda_matmul_tf32=True", "float32_matmul_precision=medium"]


@pytest.fixture
def guard():
    before = Harness()
    g = Guard(Loaded())
    g.harness = Harness()
    yield g
    before.restore()


def test_flags_a_submission_sets_stay_in_force_for_its_own_calls_only(guard):
    default = torch.backends.cuda.matmul.allow_tf32

    def build():
        torch.backends.cuda.matmul.allow_tf32 = not default  # at construction, as level1/task58

    guard.call(build)
    assert torch.backends.cuda.matmul.allow_tf32 == default  # the harness's, for the reference
    # (torch moves the float32 matmul precision with the TF32 flag: both are the submission's)
    assert guard.published["cuda_matmul_tf32"] == (not default) and "sets_numerics" in guard.findings
    published = dict(guard.published)
    assert guard.call(lambda: torch.backends.cuda.matmul.allow_tf32) == (not default)  # its own later call
    assert guard.call(lambda: torch.backends.cuda.matmul.allow_tf32) == (not default)
    with guard.harness_numerics():  # the precision experiment's calls
        assert guard.call(lambda: torch.backends.cuda.matmul.allow_tf32) == default
    assert guard.published == published

    def unset():
        torch.backends.cuda.matmul.allow_tf32 = default

    guard.call(unset)  # a call that puts it back: no longer the submission's
    assert guard.published == {} and guard.call(lambda: torch.backends.cuda.matmul.allow_tf32) == default
    guard.call(build)
    guard.forget_load_findings()  # the next submission
    assert guard.published == {} and guard.call(lambda: torch.backends.cuda.matmul.allow_tf32) == default


def test_flags_set_in_any_order_are_put_back_in_force(guard):
    def flip():
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        torch.backends.cudnn.benchmark = True
        torch.set_float32_matmul_precision("medium")

    guard.call(flip)
    assert {"float32_matmul_precision", "cuda_matmul_tf32", "cudnn"} <= set(guard.published)
    seen = guard.call(torch_state)
    assert all(seen[name] == value for name, value in guard.published.items())
    after = torch_state()
    assert {n: after[n] for n in NUMERICS_FLAGS} == {n: guard.harness.state[n] for n in NUMERICS_FLAGS}


# -- the output as the caller's stream sees it (worker/streams.py) ----------------------------------

def test_the_judged_output_is_a_copy_taken_on_the_callers_stream():
    out = torch.arange(6.0)
    assert as_seen_from(None, out) is out  # the CPU: one stream, nothing to order
    stand_in = object()  # a stream (torch.cuda.stream of one is a no-op without CUDA)
    seen = as_seen_from(stand_in, out)
    assert seen is not out and torch.equal(seen, out)
    out.fill_(-1.0)  # what a side stream writes after the caller's stream read the output
    assert torch.equal(seen, torch.arange(6.0))
    pair = as_seen_from(stand_in, (torch.ones(2), torch.zeros(3)))
    assert isinstance(pair, list) and [t.shape for t in pair] == [(2,), (3,)]
    odd = {"not": "tensors"}
    assert as_seen_from(stand_in, odd) is odd  # judged (and rejected) as it is


def test_the_copy_is_taken_the_moment_the_call_returns_before_the_guards_checks(monkeypatch):
    """The guard's checks after a call take host time in which a side stream can finish its writes:
    the output is copied on the caller's stream before they run, and the copy is not the candidate's op."""
    monkeypatch.setattr(streams, "caller_stream", lambda device: object())  # a stream stand-in, as above
    out = torch.zeros(4)

    class Checking:
        def call(self, fn, *args):
            result = fn(*args)
            out.fill_(1.0)  # the side stream's write lands while the guard checks the call
            return result

    record = OpRecorder()
    got, seen = streams.call_seen(Checking(), out.add_,
                                  torch.zeros(4), device="cuda", record=record)
    assert got is out and torch.equal(seen, torch.zeros(4))
    assert record.ops == {"add_"}  # the candidate's op, not the harness's copy
