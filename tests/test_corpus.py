"""The built-in corpus: its size and coverage, every trigger real, every control passing the fuzz
oracle on a fixed seed set."""

from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor

import pytest

from rescore.corpus.catalog import catalog_markdown, load_corpus
from rescore.engine.runner import RunConfig, run_submission
from rescore.engine.sandbox import Worker
from rescore.engine.triggers import check_triggers

GPU_ONLY = {"int32_offset_overflow", "race_nonatomic"}

# The pattern each bug class must show on its trigger (oracle/diagnose.py), where a class has one:
# unwritten last programs leave a NaN tail, a dropped max-subtraction overflows, a NaN-dropping max
# returns finite values where the reference is NaN, an in-place write is caught as such.
EXPECTED_DIAGNOSIS = {
    "grid_too_small": {"tail_region"},
    "no_max_subtraction": {"nonfinite_leak"},
    "nan_dropping": {"nonfinite_dropped", "scattered"},  # scattered: an integer argmax output
    "inplace_input_write": {"mutated_input"},
    "tail_mask_leak": {"constant_factor", "everywhere"},  # padding enters each row's normaliser
    "mask_off_by_one": {"boundary_row_col", "tail_region", "everywhere", "out_of_bounds"},
}


@pytest.fixture(scope="module")
def corpus():
    return load_corpus()


def test_corpus_size_and_coverage(corpus):
    ops = {s.problem.op for s in corpus}
    controls = [s for s in corpus if s.label == "correct"]
    buggy = [s for s in corpus if s.label == "buggy"]
    assert len(ops) >= 40
    assert len(controls) >= 40
    assert len(buggy) >= 100
    ops_per_class = defaultdict(set)
    for s in buggy:
        ops_per_class[s.bug_class].add(s.problem.op)
    assert len(ops_per_class) >= 15
    thin = {c: sorted(o) for c, o in ops_per_class.items() if len(o) < 3}
    assert not thin, f"bug classes with variants on fewer than 3 ops: {thin}"
    langs = Counter((s.language, s.label) for s in corpus)
    assert langs[("cuda", "correct")] >= 10 and langs[("cuda", "buggy")] >= 10
    assert sum(1 for s in controls if s.declines) >= 5


def test_every_entry_is_documented(corpus):
    for s in corpus:
        assert s.provenance, s.name
        assert s.dtypes, s.name
        if s.label == "buggy":
            assert s.description and s.trigger and s.control, s.name
    md = catalog_markdown(corpus)
    assert md.count("\n|") >= len(corpus)


def test_every_trigger_is_real(corpus):
    """The variant fails on its trigger while its control passes on the same input (CPU triggers)."""
    results = check_triggers([s for s in corpus if s.language != "cuda"])
    cpu = [r for r in results if r.bug_class not in GPU_ONLY]
    unreal = [(r.variant, r.variant_outcome, r.control_outcome, r.reason) for r in cpu if not r.real]
    assert not unreal
    wrong = [
        (r.variant, r.bug_class, r.diagnosis or r.variant_outcome)
        for r in cpu
        if r.bug_class in EXPECTED_DIAGNOSIS
        and (r.diagnosis or r.variant_outcome) not in EXPECTED_DIAGNOSIS[r.bug_class]
    ]
    assert not wrong
    gpu = [r for r in results if r.bug_class in GPU_ONLY]
    assert all(r.skipped for r in gpu)  # needs a GPU: skipped with the reason, never a verdict


def test_every_control_passes_the_fuzz_oracle(corpus, worker):
    """Every control, half of them on a second worker beside the session's (one per core)."""
    cfg = RunConfig(strategies={"default": 3, "boundary": 3}, dtypes=("float32", "float16"), master_seed=7)
    controls = [s for s in corpus if s.label == "correct" and s.language != "cuda"]

    def failures(subs: list, w: Worker) -> list:
        bad = []
        for s in subs:
            rows = run_submission(s, cfg, w, fixed=False)
            counts = Counter(r["outcome"] for r in rows)
            allowed = {"pass", "declined", "skipped"} if s.declines else {"pass", "skipped"}
            if set(counts) - allowed:
                bad.append((s.name, dict(counts), next(r["reason"] for r in rows if r["outcome"] not in allowed)[:200]))
        return bad

    second = Worker("cpu", 1 << 15)
    try:
        with ThreadPoolExecutor(2) as pool:
            halves = pool.map(failures, [controls[0::2], controls[1::2]], [worker, second])
            bad = [b for half in halves for b in half]
    finally:
        second.stop()
    assert len(controls) >= 40 and not bad
