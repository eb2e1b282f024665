"""Shard assignment: every submission in exactly one shard, the expected work balanced, the same
answer on every call, and a submission without a recorded cost counted as the median."""

from __future__ import annotations

import json

from conftest import REPO

from rescore.corpus.catalog import load_corpus
from rescore.engine.shards import COSTS, assign, load_costs, shard_threads
from rescore.runtime.device import machine_cores


def test_every_submission_lands_in_exactly_one_shard_and_the_work_is_balanced():
    costs = {f"s{i}": float(c) for i, c in enumerate([50, 40, 30, 20, 10, 10, 5, 5, 5, 5, 1, 1])}
    shards = assign(list(costs), 3, costs)
    assert sorted(shards) == sorted(costs) and set(shards.values()) == {0, 1, 2}
    load = [sum(c for s, c in costs.items() if shards[s] == k) for k in range(3)]
    assert max(load) - min(load) <= 5  # longest-first fill: within the smallest cost but one
    hashed = [sum(c for i, c in enumerate(costs.values()) if i % 3 == k) for k in range(3)]
    assert max(load) < max(hashed)


def test_the_assignment_is_the_same_whatever_the_order_of_the_manifest():
    costs = {f"s{i}": float(i % 7) for i in range(40)}
    ids = list(costs)
    assert assign(ids, 8, costs) == assign(list(reversed(ids)), 8, costs)


def test_a_submission_without_a_recorded_cost_counts_as_the_median():
    costs = {"a": 1.0, "b": 2.0, "c": 100.0}
    shards = assign(["a", "b", "c", "new1", "new2"], 2, costs)
    assert shards["new1"] == shards["new2"] != shards["c"]  # each counts 2: both go beside the 2, not the 100
    assert assign(["x", "y", "z"], 2, {}) == {"x": 0, "y": 1, "z": 0}  # no costs at all: dealt in turn


def test_heavy_submissions_get_shards_of_their_own_where_the_others_can_carry_the_rest_else_few_shards():
    """At most three heavy shards run on a device at once. On an H100 three of the seven heavy shards also
    held light submissions, and the last of them ran a light one's cases after every other shard was
    done: with shards to spare each heavy submission gets one of its own. With few shards, closing them
    would leave the rest nearly all the work (seven of eight: 141 min replayed against 45), and spreading
    the heavy ones over as many shards makes most shards heavy: they are packed into at most three,
    which the rest then fills."""
    from rescore.engine.shards import HEAVY_SHARE, fit_alone

    heavy = {f"heavy{i}" for i in range(5)}
    costs = {**{h: 30.0 for h in heavy}, **{f"light{i}": float(10 + i % 7) for i in range(60)}}
    spread = assign(list(costs), 32, costs, heavy=heavy)
    assert sorted(spread) == sorted(costs) and fit_alone(heavy, costs, 32)
    for h in heavy:
        assert [s for s in spread if spread[s] == spread[h]] == [h]  # a shard of its own
    rest = [sum(c for s, c in costs.items() if spread[s] == k) for k in set(range(32)) - {spread[h] for h in heavy}]
    assert max(rest) - min(rest) <= 16  # longest-first over the others: within the largest light cost
    assert not fit_alone(heavy, costs, 24)  # 24 shards: the other 19 would carry more than their share

    few = assign(list(costs), 6, costs, heavy=heavy)
    assert sorted(few) == sorted(costs) and not fit_alone(heavy, costs, 6)
    assert len({few[h] for h in heavy}) == HEAVY_SHARE  # packed: three heavy shards, not five
    assert len({k for h in heavy for k in [assign(list(costs), 6, costs)[h]]}) == 5  # plain longest-first: five
    loads = [sum(c for s, c in costs.items() if few[s] == k) for k in range(6)]
    assert max(loads) - min(loads) <= 30  # the rest still balances them

    two_gpus = assign(list(costs), 32, costs, gpus=2, heavy=heavy)
    assert all([s for s in two_gpus if two_gpus[s] == two_gpus[h]] == [h] for h in heavy)
    assert {two_gpus[h] % 2 for h in heavy} == {0, 1}  # both GPUs' shards (shard k on GPU k % 2)
    packed = assign(list(costs), 6, costs, gpus=2, heavy=heavy)
    assert all(len({packed[h] for h in heavy if packed[h] % 2 == g}) <= HEAVY_SHARE for g in (0, 1))


def test_the_recorded_costs_cover_the_built_in_corpus(tmp_path):
    costs = load_costs()
    timed = {s.submission_id for s in load_corpus() if s.language != "cuda"}  # a CPU run skips CUDA C
    assert COSTS.is_file() and len(timed & set(costs)) >= 0.9 * len(timed)
    assert not {s.submission_id for s in load_corpus() if s.language == "cuda"} & set(costs)
    assert all(v >= 0 for v in costs.values())
    bad = tmp_path / "costs.json"
    bad.write_text("{not json")
    assert load_costs(bad) == {}
    bad.write_text(json.dumps({"a": 3}))
    assert load_costs(bad) == {"a": 3.0}


def test_a_shard_claims_its_share_of_cores_when_asked_for_more_than_the_machine_has():
    cores = machine_cores()
    assert shard_threads(None) == 1 and shard_threads(cores) == 1
    assert shard_threads(4 * cores) == 4  # `--cores 8` on 2 cores: 2 shards at a time


def test_a_gpu_run_balances_by_gpu_costs_where_they_were_measured(tmp_path, monkeypatch):
    """On the H200 the CPU's costs put 134 s in one shard of a 202 s check stage (the GPU costs
    differ in kind: Triton's JIT, not the interpreter); a GPU run reads the GPU's own file."""
    from rescore.engine import shards

    subs = load_corpus()
    gpu = shards.load_costs(shards.COSTS_CUDA)
    assert {s.submission_id for s in subs} <= set(gpu)  # CUDA C included: a GPU run times it
    assert shards.expected_costs(subs, "cuda") == gpu
    assert shards.expected_costs(subs, "cpu") != gpu
    monkeypatch.setattr(shards, "COSTS_CUDA", tmp_path / "absent.json")
    assert shards.expected_costs(subs, "cuda") == shards.load_costs(shards.COSTS)


def test_a_dump_never_gets_more_shards_than_submissions_to_run(tmp_path):
    from dataclasses import replace

    from conftest import toy_submission

    from rescore.engine.shards import shard_count
    from rescore.model.records import submission_to_dict

    good = toy_submission("problem_scale.py", "torch_correct.py")
    broken = replace(good, name="unreadable", extra={"ingest_error": "no ModelNew"})
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps([submission_to_dict(s) for s in (good, replace(good, name="other"), broken)]))
    assert shard_count(manifest, 48) == 2 and shard_count(manifest, 1) == 1
    manifest.write_text("[]")
    assert shard_count(manifest, 48) == 1  # one shard, which writes empty tables


def test_a_cuda_c_source_not_built_yet_weighs_a_cold_build_on_a_gpu(tmp_path, monkeypatch):
    from dataclasses import replace

    from conftest import toy_submission

    from rescore.engine import shards
    from rescore.model.records import content_hash

    monkeypatch.setenv("RESCORE_CUDA_CACHE", str(tmp_path))
    torch_sub = toy_submission("problem_scale.py", "torch_correct.py")
    cuda_sub = replace(torch_sub, name="ext", language="cuda", source="load_inline(...)\n" + torch_sub.source)
    assert shards.build_costs([torch_sub, cuda_sub], "cuda") == {cuda_sub.submission_id: shards.COLD_BUILD_S}
    assert shards.build_costs([torch_sub, cuda_sub], "cpu") == {}
    (tmp_path / content_hash(cuda_sub.source)).mkdir()  # built by an earlier run
    assert shards.build_costs([torch_sub, cuda_sub], "cuda") == {}
    (tmp_path / content_hash(cuda_sub.source)).rmdir()
    where, weight = shards.shard_assignment([torch_sub, cuda_sub], 2, "cuda")
    assert weight[cuda_sub.submission_id] == weight[torch_sub.submission_id] + shards.COLD_BUILD_S
    assert where[cuda_sub.submission_id] != where[torch_sub.submission_id]


def test_every_shard_weighs_builds_by_the_cache_as_the_dump_was_read(tmp_path, monkeypatch):
    """The shards that start first build into the cache; one starting later deals the submissions
    out as they did (else some would run twice and some never)."""
    from dataclasses import replace

    from conftest import toy_submission

    from rescore.engine import shards
    from rescore.model.records import content_hash

    monkeypatch.setenv("RESCORE_CUDA_CACHE", str(tmp_path))
    torch_sub = toy_submission("problem_scale.py", "torch_correct.py")
    cuda_sub = replace(torch_sub, name="ext", language="cuda", source="load_inline(...)\n" + torch_sub.source,
                       extra={})
    shards.note_cached_builds([torch_sub, cuda_sub])  # at ingest: not built
    first = shards.shard_assignment([torch_sub, cuda_sub], 2, "cuda")
    (tmp_path / content_hash(cuda_sub.source)).mkdir()  # an early shard built it
    assert shards.shard_assignment([torch_sub, cuda_sub], 2, "cuda") == first
    assert first[1][cuda_sub.submission_id] == first[1][torch_sub.submission_id] + shards.COLD_BUILD_S


def test_a_protocol_key_left_in_a_case_row_is_logged_and_dropped_not_the_shard(caplog):
    """A worker-protocol key in a case row (a fault of rescore) would make the cases table refuse
    the shard, losing every result in it: it is dropped, and the log names it."""
    from rescore.stages import without_protocol_keys

    rows = [{"outcome": "pass", "wall_ms": 1.0}, {"outcome": "mismatch", "_alone": {"by": "the reference"}}]
    with caplog.at_level("ERROR", logger="rescore"):
        kept = without_protocol_keys(rows, 8)
    assert kept == [{"outcome": "pass", "wall_ms": 1.0}, {"outcome": "mismatch"}]
    assert "shard 8" in caplog.text and "_alone" in caplog.text
    clean = [{"outcome": "pass"}]
    assert without_protocol_keys(clean, 0) is clean


def test_a_shards_priority_is_its_expected_seconds_so_that_the_longest_start_first(tmp_path, monkeypatch):
    """Snakemake starts the shards of higher priority first where more wait than cores are free: a
    check shard's priority is the seconds its submissions are expected to take."""
    from dataclasses import replace

    from conftest import toy_submission

    from rescore.engine import shards
    from rescore.model.records import submission_to_dict

    base = toy_submission("problem_scale.py", "torch_correct.py")
    subs = [replace(base, name=f"k{cost}", source=base.source + f"\n# {cost}\n") for cost in (100, 30, 20, 10)]
    costs = tmp_path / "costs.json"
    costs.write_text(json.dumps({s.submission_id: float(s.name[1:]) for s in subs}))
    monkeypatch.setattr(shards, "COSTS", costs)
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps([submission_to_dict(s) for s in subs]))
    where, _ = shards.shard_assignment(subs, 2, "cpu")
    longest = where[subs[0].submission_id]
    assert shards.shard_priority(manifest, longest, 2, "cpu") == 100
    assert shards.shard_priority(manifest, 1 - longest, 2, "cpu") == 60  # 30 + 20 + 10
    assert shards.shard_priority(tmp_path / "not_read_yet.json", 0, 2, "cpu") == 0


def test_the_schedule_replay_runs_heavy_jobs_one_after_another_when_each_asks_its_memory():
    """bench/schedule_replay.py: two long jobs that each ask for most of the device's memory run one after
    the other, and the light jobs only after both (none fits beside them); counted as heavy jobs of which
    three may run at once, both start first and the light jobs run on the other cores beside them."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("schedule_replay", REPO / "bench" / "schedule_replay.py")
    replay_module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(replay_module)
    jobs = {("d", k): {"seconds": 100.0, "priority": 100, "gib": 60.0} for k in range(2)}
    jobs.update({("d", k): {"seconds": 30.0, "priority": 10, "gib": 20.0} for k in range(2, 10)})
    by_memory = replay_module.replay(jobs, {j: v["gib"] for j, v in jobs.items()}, 70.0, 4)
    by_count = replay_module.replay(jobs, {j: int(v["gib"] * 3 >= 70.0) for j, v in jobs.items()}, 3, 4)
    assert by_memory == 100.0 + 100.0 + 3 * 30.0  # then the eight light ones, three at a time (60 of 70 GiB)
    assert by_count == 4 * 30.0  # the light ones two at a time beside both, four at a time once they end


def test_the_schedule_replay_deals_a_runs_submissions_again_with_the_heavy_ones_apart(tmp_path):
    """bench/schedule_replay.py's `dealt_jobs`: the run's submissions dealt into as many shards as it had,
    as `shards.assign` deals them, the heavy ones apart or not; a shard's seconds are its submissions'
    own (the builds beside the rest), plus the run's median shard overhead, which here every shard had."""
    import importlib.util

    import pandas as pd

    spec = importlib.util.spec_from_file_location("schedule_replay", REPO / "bench" / "schedule_replay.py")
    replay_module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(replay_module)
    # (shard, submission, elapsed s, build s): none has a recorded cost, so each counts the same, and
    # longest-first in turn puts the heavy "h" beside "a"
    subs = [(0, "a", 10.0, 0.0), (0, "h", 100.0, 0.0), (1, "b", 20.0, 0.0), (2, "c", 30.0, 0.0),
            (3, "d", 40.0, 0.0), (4, "e", 50.0, 0.0)]
    rows = []
    for shard, sid, elapsed, build in subs:
        for phase, seconds in (("build", build), ("candidate", elapsed - build)):
            rows.append({"dump": "d", "shard": shard, "submission_id": sid, "phase": phase, "seconds": seconds,
                         "elapsed_s": elapsed})
    (tmp_path / "tables").mkdir()
    pd.DataFrame(rows).to_parquet(tmp_path / "tables" / "phases.parquet")
    logs = tmp_path / "logs" / "check" / "d"
    logs.mkdir(parents=True)
    for shard, done in enumerate((115.0, 25.0, 35.0, 45.0, 55.0)):  # each 5 s over its submissions'
        (logs / f"shard-{shard}.log").write_text(f"2026-12-07 14:00:00,000 INFO shard {shard}: done in {done} s\n")
    memory, usable_mib = {"h": 40.0, **{s: 1.0 for s in "abcde"}}, 72 * 1024
    as_run, error = replay_module.dealt_jobs(tmp_path, memory, usable_mib, apart=False)
    assert error == 0.0
    assert sorted(v["seconds"] for v in as_run.values()) == [25.0, 35.0, 45.0, 55.0, 115.0]
    apart, _ = replay_module.dealt_jobs(tmp_path, memory, usable_mib, apart=True)
    # the four other shards can carry the five light ones: "h" alone, then a, e | b | c | d
    assert sorted((v["gib"], v["seconds"]) for v in apart.values()) == [
        (1.0, 25.0), (1.0, 35.0), (1.0, 45.0), (1.0, 5.0 + 10.0 + 50.0), (40.0, 5.0 + 100.0)]
    builds = pd.DataFrame({"run": [20.0, 10.0], "build": [50.0, 0.0]})
    assert replay_module.modelled_seconds(builds) == 50.0  # a shard builds beside its other submissions
