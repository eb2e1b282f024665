"""The results cache: a second identical run reads what the first measured and runs nothing; anything
that decides a result (settings, source, rescore's code, the machine) measures again; a harness fault,
a sanitizer run cut short and a GPU nvidia-smi cannot name are never stored."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from conftest import toy_submission
from test_sanitizer import _stage_inputs

from rescore import stages
from rescore.engine import result_cache, sanitizer
from rescore.engine.phase_log import RESULT_CACHE
from rescore.engine.result_cache import SUBMISSION, ResultCache, submission_identity
from rescore.engine.shards import CACHED_AT_INGEST
from rescore.model.outcomes import HARNESS_FAULT
from rescore.model.records import submission_to_dict
from rescore.model.tables import read_parquet

CONFIG = {"device": "cpu", "fixed": {"profile": "kernelbench-v0.1", "dtype": "float32"},
          "fuzz": {"dtypes": ["float32"], "strategies": {"default": 3}}, "budget": {"cpu": 4096}, "timeout_s": 60}


def _manifest(tmp_path: Path, subs: list) -> str:
    manifest = tmp_path / "ingest" / "toy" / "manifest.json"
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps([submission_to_dict(s) for s in subs]))
    return str(manifest)


def _shard(tmp_path: Path, manifest: str, run: str, cache: Path | None, config: dict = CONFIG) -> dict[str, str]:
    out = {k: str(tmp_path / run / f"{k}.parquet") for k in ("cases", "shrunk", "phases", "degenerate")}
    stages.run_shard(manifest, 0, 1, config, out["cases"], out["shrunk"], str(tmp_path / run / "logs"),
                     out_phases=out["phases"], out_degenerate=out["degenerate"],
                     result_cache=None if cache is None else str(cache))
    return out


def test_a_second_identical_shard_reads_every_result_and_runs_nothing(tmp_path, monkeypatch):
    subs = [toy_submission("problem_scale.py", name, dtypes=("float32",))
            for name in ("torch_correct.py", "scale_tail_bug.py")]
    manifest = _manifest(tmp_path, subs)
    cache = tmp_path / "cache"
    first = _shard(tmp_path, manifest, "first", cache)
    assert len(list((cache / SUBMISSION).rglob("*.pkl.z"))) == 2 and len(list((cache / "nulls").rglob("*.pkl.z"))) == 1

    def refuse(*args, **kw):
        raise AssertionError("a stored submission or problem was run again")

    monkeypatch.setattr(stages, "run_submission", refuse)
    monkeypatch.setattr(stages, "degenerate_table", lambda problems, *a, **kw: refuse() if problems else
                        pd.read_parquet(first["degenerate"]).iloc[:0])
    second = _shard(tmp_path, manifest, "second", cache)
    for table in ("cases", "shrunk", "degenerate"):
        pd.testing.assert_frame_equal(pd.read_parquet(first[table]), pd.read_parquet(second[table]))
    assert len(pd.read_parquet(first["shrunk"])) == 1  # the flagged one's shrunk failure came back too
    phases = read_parquet(second["phases"], "phases")
    assert set(phases["phase"]) == {RESULT_CACHE} and set(phases["name"]) == {s.name for s in subs}
    assert not list((tmp_path / "second" / "logs").glob("worker-*.log"))  # no worker started


def test_with_the_cache_off_every_case_runs(tmp_path, monkeypatch):
    sub = toy_submission("problem_scale.py", "torch_correct.py", dtypes=("float32",))
    manifest = _manifest(tmp_path, [sub])
    _shard(tmp_path, manifest, "first", tmp_path / "cache")
    ran = []
    real = stages.run_submission
    monkeypatch.setattr(stages, "run_submission", lambda s, *a, **kw: ran.append(s.name) or real(s, *a, **kw))
    again = _shard(tmp_path, manifest, "again", None)
    assert ran == [sub.name]
    assert RESULT_CACHE not in set(read_parquet(again["phases"], "phases")["phase"])


def test_a_submission_with_a_harness_fault_is_never_stored(tmp_path, monkeypatch):
    sub = toy_submission("problem_scale.py", "torch_correct.py", dtypes=("float32",))
    manifest = _manifest(tmp_path, [sub])
    real = stages.run_submission

    def faulty(s, *args, **kw):
        rows = real(s, *args, **kw)
        return [dict(rows[0], outcome="skipped", reason=f"{HARNESS_FAULT}: MemoryError in the harness"), *rows[1:]]

    monkeypatch.setattr(stages, "run_submission", faulty)
    _shard(tmp_path, manifest, "first", tmp_path / "cache")
    assert not list((tmp_path / "cache" / SUBMISSION).rglob("*.pkl.z"))


def test_anything_that_decides_a_result_changes_its_key(monkeypatch, tmp_path):
    sub = toy_submission("problem_scale.py", "torch_correct.py", dtypes=("float32",))
    other = toy_submission("problem_scale.py", "scale_tail_bug.py", dtypes=("float32",))
    base = ResultCache(tmp_path, CONFIG, "cpu")
    key = base.key(SUBMISSION, submission_identity(sub))
    assert key == ResultCache(tmp_path, dict(CONFIG), "cpu").key(SUBMISSION, submission_identity(sub))
    assert key != base.key(SUBMISSION, submission_identity(other))
    assert key != ResultCache(tmp_path, dict(CONFIG, master_seed=1), "cpu").key(SUBMISSION, submission_identity(sub))
    monkeypatch.setattr(result_cache, "code_hash", lambda: "rescore, edited")
    assert key != ResultCache(tmp_path, CONFIG, "cpu").key(SUBMISSION, submission_identity(sub))
    monkeypatch.setattr(result_cache, "machine", lambda device, gpu=None: {"torch": "another"})
    assert key != ResultCache(tmp_path, CONFIG, "cpu").key(SUBMISSION, submission_identity(sub))


def test_whether_its_build_was_cached_at_ingest_is_not_part_of_a_submissions_key(tmp_path):
    """Every run after the first reads the dump with the CUDA C builds cached (`shards.note_cached_builds`);
    that deals the shards out, and must not make every CUDA C submission a miss (it did, on an H100)."""
    sub = replace(toy_submission("problem_scale.py", "torch_correct.py", dtypes=("float32",)), language="cuda")
    cache = ResultCache(tmp_path, CONFIG, "cpu")

    def key(**extra):
        return cache.key(SUBMISSION, submission_identity(replace(sub, extra=extra)))

    assert key(level=1, **{CACHED_AT_INGEST: False}) == key(level=1, **{CACHED_AT_INGEST: True}) == key(level=1)
    assert key(level=1) != key(level=2)


def test_a_gpu_nvidia_smi_cannot_name_turns_the_cache_off(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(result_cache, "gpu_identity", lambda gpu: None)
    with caplog.at_level("WARNING", logger="rescore"):
        cache = ResultCache(tmp_path / "cache", CONFIG, "cuda", "0")
    assert not cache.enabled and "results cache off" in caplog.text
    cache.put(SUBMISSION, {"a": 1}, {"rows": []})
    assert cache.get(SUBMISSION, {"a": 1}) is None and not (tmp_path / "cache").exists()
    monkeypatch.setattr(result_cache, "gpu_identity", lambda gpu: "NVIDIA H100 80GB HBM3, 81559 MiB, 580.1")
    named = ResultCache(tmp_path / "cache", CONFIG, "cuda", "0")
    named.put(SUBMISSION, {"a": 1}, {"rows": [1]})
    assert named.get(SUBMISSION, {"a": 1}) == {"rows": [1]}


def test_a_damaged_entry_is_a_miss_that_says_where(tmp_path, caplog):
    cache = ResultCache(tmp_path, CONFIG, "cpu")
    cache.put(SUBMISSION, {"a": 1}, {"rows": [1]})
    (entry,) = (tmp_path / SUBMISSION).rglob("*.pkl.z")
    entry.write_bytes(b"half an entry")
    with caplog.at_level("WARNING", logger="rescore"):
        assert cache.get(SUBMISSION, {"a": 1}) is None
    assert str(entry) in caplog.text and "measured again" in caplog.text


@pytest.mark.parametrize("status, stored", [("clean", True), ("found", True), ("incomplete", False)])
def test_a_sanitizer_run_is_stored_only_when_it_finished(tmp_path, monkeypatch, status, stored):
    subs = [toy_submission("problem_scale.py", "scale_unmasked.py", dtypes=("float32",))]
    runs = []

    def one_run(sub, case, tool, cfg, log_dir, version=None, limit_s=None):
        runs.append(tool)
        return [dict(sanitizer._base(sub, case), tool=tool, status=status, reason=f"{tool}: stand-in")]

    monkeypatch.setattr(sanitizer, "sanitize_case", one_run)
    monkeypatch.setattr(sanitizer, "availability", lambda cfg: ("/bin/compute-sanitizer", "stand-in"))
    monkeypatch.setattr(sanitizer, "sanitizer_version", lambda exe: "stand-in")
    monkeypatch.setattr(result_cache, "gpu_identity", lambda gpu: "NVIDIA H100 80GB HBM3, 81559 MiB, 580.1")
    config = {"device": "cuda", "sanitizer": {"tools": ["memcheck", "racecheck"], "jobs": 1}}  # runs in their order
    inputs = _stage_inputs(tmp_path, subs)
    first = sanitizer.run_sanitizer(*inputs, config, str(tmp_path / "a.parquet"), str(tmp_path / "logs"),
                                    result_cache=str(tmp_path / "cache"))
    second = sanitizer.run_sanitizer(*inputs, config, str(tmp_path / "b.parquet"), str(tmp_path / "logs"),
                                     result_cache=str(tmp_path / "cache"))
    assert runs == ["memcheck", "racecheck"] * (1 if stored else 2)
    pd.testing.assert_frame_equal(first, second)
