"""Several GPUs of one host (issue 23), on the CPU with fake device counts: each check shard's slot,
the work balanced across GPUs, CUDA_VISIBLE_DEVICES in a worker's environment (again after a
restart), the `gpu` column, the uncertainty statement for GPUs of different models, and a dry run
in which the shards get distinct slots. With one GPU or none nothing changes."""

from __future__ import annotations

import importlib.util
import json
import logging
import re
import subprocess
import sys
from dataclasses import replace

import pandas as pd
import pytest
import yaml
from conftest import REPO, toy_submission

from rescore.analysis.study import illusion_table
from rescore.analysis.uncertainty import statement
from rescore.engine import gpus as gpus_
from rescore.engine.gpus import (
    gpu_label,
    host_gpus,
    shard_slot,
    slot_resources,
    slot_shards,
    visible_device,
    with_gpu,
    worker_gpu,
)
from rescore.engine.sandbox import Worker, run_with_retry
from rescore.engine.shards import assign
from rescore.model.tables import conform
from rescore.worker.protocol import Load

COUNTS = (1, 2, 4, 8)


@pytest.mark.parametrize("gpus", COUNTS)
def test_each_shard_has_one_slot_and_every_gpu_gets_shards(gpus):
    shards = 16
    slots = [shard_slot(k, gpus) for k in range(shards)]
    if gpus == 1:  # one GPU: no slot, nothing set, no resource
        assert slots == [None] * shards and slot_resources(gpus, lambda w: 0) == {}
        assert slot_shards(shards, gpus) == [list(range(shards))]
        return
    assert set(slots) == set(range(gpus)) and all(slots.count(g) == shards // gpus for g in range(gpus))
    assert sorted(k for group in slot_shards(shards, gpus) for k in group) == list(range(shards))
    for k in range(shards):
        resources = {name: f(k) for name, f in slot_resources(gpus, lambda w: shard_slot(w, gpus)).items()}
        assert resources == {f"gpu_{g}": int(g == k % gpus) for g in range(gpus)}


def test_fewer_shards_than_gpus_leave_the_spare_gpus_out():
    assert slot_shards(3, 8) == [[0], [1], [2]]


def test_a_slot_names_a_device_the_job_was_given():
    assert visible_device(3, "") == "3"  # nothing inherited: the host's numbering
    assert visible_device(1, "4,6") == "6"  # a user's (or SLURM's) devices, in their order
    assert visible_device(5, "2") == "2"  # a SLURM job given one GPU: every slot is that GPU
    assert visible_device(1, "GPU-aa, GPU-bb") == "GPU-bb"
    assert worker_gpu(None) is None


def test_the_gpu_count_is_the_configs_else_the_machines(monkeypatch):
    def no_torch():
        raise AssertionError("the GPU count was asked on a CPU run")

    monkeypatch.setattr(gpus_, "gpu_count", no_torch)
    assert host_gpus("auto", "cpu") == 0 and host_gpus(None, "cpu") == 0
    assert [host_gpus(n, "cpu") for n in COUNTS] == list(COUNTS)  # an override counts even on the CPU
    monkeypatch.setattr(gpus_, "gpu_count", lambda: 4)
    assert host_gpus("auto", "cuda") == 4 and host_gpus(2, "cuda") == 2


@pytest.mark.parametrize("gpus", COUNTS)
def test_the_expected_work_is_balanced_across_gpus_then_shards(gpus):
    costs = {f"s{i}": float((i * 37) % 23 + 1) for i in range(60)}
    shards = 16
    out = assign(list(costs), shards, costs, gpus)
    assert sorted(out) == sorted(costs) and set(out.values()) == set(range(shards))
    load = [0.0] * max(gpus, 1)
    for sid, k in out.items():
        load[k % gpus] += costs[sid]
    assert max(load) - min(load) <= max(costs.values())  # longest-first: within one submission
    if gpus == 1:
        assert out == assign(list(costs), shards, costs)  # one GPU: today's assignment, unchanged


def test_two_gpus_finish_together_where_dealing_shards_alone_would_not():
    """Shards dealt alone put the 12 and a 5 on shards 0 and 2, both on the first GPU (17 against 7)."""
    costs = {"a": 12.0, "b": 5.0, "c": 5.0, "d": 2.0}

    def gpu_loads(out):
        return sorted(sum(c for s, c in costs.items() if out[s] % 2 == g) for g in range(2))

    assert gpu_loads(assign(list(costs), 4, costs)) == [7.0, 17.0]
    assert gpu_loads(assign(list(costs), 4, costs, 2)) == [12.0, 12.0]


def test_a_gpu_given_fewer_shards_gets_less_work():
    """Three shards on two GPUs: the second GPU runs one worker, so it gets a third of the work."""
    costs = {f"s{i}": 5.0 for i in range(6)}
    out = assign(list(costs), 3, costs, 2)
    assert [sum(1 for k in out.values() if k == shard) for shard in range(3)] == [2, 2, 2]


def test_a_worker_on_a_slot_sees_it_and_a_restarted_worker_the_same(tmp_path, monkeypatch):
    """A wrapper in place of compute-sanitizer records the worker's CUDA_VISIBLE_DEVICES and dies at
    once: the sandbox restarts it for the retry, on the same device."""
    seen = tmp_path / "seen"
    wrapper = tmp_path / "record_env.sh"
    wrapper.write_text(f'#!/bin/sh\necho "${{CUDA_VISIBLE_DEVICES-unset}}" >> {seen}\nexit 3\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6")
    job = {"problem": {}, "submission": {}}
    w = Worker("cpu", 1 << 12, str(tmp_path / "logs"), wrapper=[str(wrapper)], gpu=worker_gpu(1))
    try:
        row = run_with_retry(w, Load(job), timeout=30)
    finally:
        w.stop()
    assert row["outcome"] == "crash" and "after a retry" in row["reason"]
    assert seen.read_text().split() == ["6", "6"] and w.starts == 2
    seen.unlink()
    inherited = Worker("cpu", 1 << 12, str(tmp_path / "logs"), wrapper=[str(wrapper)])  # no slot: as given
    try:
        run_with_retry(inherited, Load(job), timeout=30, retries=0)
    finally:
        inherited.stop()
    assert seen.read_text().split() == ["4,6"]


def test_the_gpu_column_names_the_device_and_its_model():
    cuda = json.dumps({"device": "NVIDIA H200", "torch": "2.11"})
    cpu = json.dumps({"device": "cpu (TRITON_INTERPRET=1)"})
    assert gpu_label("1", cuda) == "1: NVIDIA H200"
    assert gpu_label("1", cpu) is None and gpu_label("1", None) is None
    rows = with_gpu([{"versions": cuda}, {"outcome": "skipped"}], "GPU-bb")
    assert [r["gpu"] for r in rows] == ["GPU-bb: NVIDIA H200", None]


def _cases(gpu_of: dict[str, str | None], subs: list) -> pd.DataFrame:
    rows = []
    for sub in subs:
        for i in range(3):
            rows.append({"submission_id": sub.submission_id, "name": sub.name, "problem_id": sub.problem.problem_id,
                         "oracle": "fuzz" if i else "fixed", "strategy": "default" if i else "fixed",
                         "purpose": "evaluation", "case_index": i, "seed": i, "dtype": "float32",
                         "sizes": json.dumps({"N": 8 * (i + 1)}), "shapes": json.dumps([[8 * (i + 1)]]),
                         "values": "normal", "layout": "contiguous", "outcome": "pass", "device": "cuda",
                         "gpu": gpu_of[sub.name]})
    return conform(pd.DataFrame(rows), "cases").to_pandas()  # every column, as read from the table


def test_the_uncertainty_statement_says_when_gpus_of_different_models_ran_the_cases():
    subs = [toy_submission("problem_scale.py", c) for c in ("torch_correct.py", "segfault.py")]
    table = pd.DataFrame([s.row() for s in subs])
    names = [s.name for s in subs]

    def text(gpu_of):
        cases = _cases(dict(zip(names, gpu_of)), subs)
        return statement(cases, table, illusion_table(cases, table), {"master_seed": 0})

    mixed = text(["0: NVIDIA H200", "1: NVIDIA H100 80GB HBM3"])
    assert "**The cases ran on GPUs of 2 different models**" in mixed
    assert "NVIDIA H100 80GB HBM3 (1 GPUs, 1 submissions, 2 cases); NVIDIA H200 (1 GPUs" in mixed
    same = text(["0: NVIDIA H200", "1: NVIDIA H200"])
    assert "The cases ran on 2 GPUs of one model (NVIDIA H200): 0: NVIDIA H200, 1: NVIDIA H200." in same
    one = text(["0: NVIDIA H200", "0: NVIDIA H200"])
    assert "GPUs of" not in one and one == text([None, None])  # one GPU: today's statement


def _softmax_dump_read(tmp_path) -> list[str]:
    """The Snakemake command line of a run of the corpus's softmax kernels in 4 shards in `tmp_path`,
    their dump already read: its shards are known once it is (`checkpoint ingest`)."""
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    config.update(dumps={"corpus": {"format": "corpus", "ops": ["softmax"]}}, device="cpu", shards=4)
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.yaml").write_text(yaml.safe_dump(config))
    snakemake = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(tmp_path)]
    subprocess.run([*snakemake, "--cores", "1", "results/ingest/corpus/manifest.json"], check=True, timeout=300,
                   capture_output=True)
    return snakemake


def test_a_dry_run_with_four_fake_gpus_gives_the_shards_distinct_slots(tmp_path):
    snakemake = _softmax_dump_read(tmp_path)
    r = subprocess.run([*snakemake, "-n", "--cores", "8", "all", "--config", "gpus=4"], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    job = (r"rule check_shard:.*?wildcards: dump=corpus, shard=(\d+)\n(?:\s+priority: \d+\n)?(?:\s+threads: \d+\n)?"
           r"\s+resources: ([^\n]*)")
    jobs = re.findall(job, r.stdout, re.S)
    slots = {}
    for shard, resources in jobs:
        used = [int(g) for g, n in re.findall(r"gpu_(\d+)=(\d+)", resources) if n == "1"]
        slots[int(shard)] = used
    assert slots == {0: [0], 1: [1], 2: [2], 3: [3]}, r.stdout[-3000:]
    # each shard's priority is its expected seconds, the longest started first (`shards.shard_priority`)
    from rescore.engine.shards import shard_priority

    manifest = tmp_path / "results" / "ingest" / "corpus" / "manifest.json"
    priorities = dict(re.findall(r"rule check_shard:.*?shard=(\d+)\n\s+priority: (\d+)\n", r.stdout, re.S))
    assert {int(k): int(v) for k, v in priorities.items()} == {
        k: shard_priority(manifest, k, 4, "cpu", 4) for k in range(4)}


def test_a_shard_whose_heaviest_submission_needs_a_third_of_the_gpu_is_heavy(tmp_path, monkeypatch):
    """On a GPU a check shard is heavy (`gpu_heavy=1`, at most HEAVY_SHARE of them at once) when its heaviest
    submission reserved at least a third of the device's usable memory in a GPU run ($RESCORE_SHARD_MEMORY
    here); the others, and every shard of a CPU run, ask for nothing."""
    import os

    from rescore.model.records import read_manifests

    snakemake = _softmax_dump_read(tmp_path)
    manifest = tmp_path / "results" / "ingest" / "corpus" / "manifest.json"
    heavy, light = read_manifests([str(manifest)])[:2]
    (tmp_path / "memory.json").write_text(json.dumps({heavy.submission_id: 30.0, light.submission_id: 2.5}))
    env = dict(os.environ, RESCORE_SHARD_MEMORY=str(tmp_path / "memory.json"))

    def asked(*config: str) -> dict[int, int | None]:
        r = subprocess.run([*snakemake, "-n", "--cores", "8", "results/tables/cases.parquet", "--config", *config],
                           capture_output=True, text=True, timeout=300, env=env)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        jobs = re.findall(r"rule check_shard:.*?wildcards: dump=corpus, shard=(\d+)\n.*?resources: ([^\n]*)",
                          r.stdout, re.S)
        return {int(k): int(m[1]) if (m := re.search(r"gpu_heavy=(\d+)", res)) else None for k, res in jobs}

    from rescore.engine.shards import shard_assignment, shard_count, usable_memory_mib

    monkeypatch.setenv("RESCORE_SHARD_MEMORY", str(tmp_path / "memory.json"))
    subs = read_manifests([str(manifest)])
    shards = shard_count(manifest, 4)
    # 40 GiB: 36 usable, a third 12 GiB: 30 GiB is heavy, 2.5 GiB is not; the shards' own dealing
    where, _ = shard_assignment(subs, shards, "cuda", 1, usable_memory_mib(40, 1))
    expected = {k: int(k == where[heavy.submission_id]) for k in range(shards)}
    assert asked("device=cuda", "gpus=1", "gpu_memory_gib=40") == expected
    assert set(asked("device=cuda", "gpus=1", "gpu_memory_gib=200").values()) == {0}  # 60 GiB a third
    assert set(asked("device=cpu").values()) == {None}


def test_the_usable_memory_is_the_smallest_visible_gpus_from_nvidia_smi_and_none_without_it(tmp_path, monkeypatch):
    from rescore.engine.shards import usable_memory_mib
    from rescore.engine.sharing import USABLE
    from rescore.runtime.device import gpu_memory_mib

    monkeypatch.setenv("PATH", str(tmp_path))
    assert gpu_memory_mib() is None and usable_memory_mib("auto", 1) == 0  # no nvidia-smi: nothing is heavy
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\nprintf '0, 81559\\n1, 143771\\n'\n")
    fake.chmod(0o755)
    assert gpu_memory_mib("") == 81559 and gpu_memory_mib("1") == 143771 and gpu_memory_mib("GPU-abc") == 81559
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert usable_memory_mib("auto", 1) == int(USABLE * 143771)
    assert usable_memory_mib(80, 2) == int(USABLE * 80 * 1024)
    assert usable_memory_mib(0, 1) == usable_memory_mib(80, 0) == 0


def test_the_shards_priorities_are_by_the_costs_of_the_device_auto_resolves_to(monkeypatch):
    """`device: auto` orders the check shards by the costs of the device they resolve it to: a GPU run's
    with a GPU (the H100 runs up to 9b1d577 ordered them by the CPU's, where CUDA-L1 is not listed: one
    submission counted as much as any other)."""
    from rescore.engine import gpus

    monkeypatch.setattr(gpus.os.path, "exists", lambda path: False)
    assert gpus.run_device("auto") == "cpu" and gpus.run_device("cuda") == "cuda"
    monkeypatch.setattr(gpus.os.path, "exists", lambda path: path == "/dev/nvidiactl")
    monkeypatch.setattr(gpus, "resolve_device", lambda device: "cuda")
    assert gpus.run_device("auto") == "cuda"


def test_the_cuda_prebuilds_test_loads_are_dealt_over_the_gpus(monkeypatch, tmp_path):
    from rescore.engine import cuda_build

    seen: dict[str, str | None] = {}

    def record(source, root, key, timeout_s, max_jobs, problem_source=None, gpu=None):
        seen[source] = gpu
        return {"status": "no_build", "ok": True, "seconds": 0.0}

    monkeypatch.setattr(cuda_build, "build_one", record)
    monkeypatch.setattr(cuda_build, "build_key", dict)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    base = toy_submission("problem_scale.py", "torch_correct.py")
    subs = [replace(base, language="cuda", source=f"# build {i}\n{base.source}") for i in range(5)]
    table = cuda_build.prebuild(subs, "cuda", tmp_path, jobs=2, gpus=2)
    assert len(table) == 5 and [seen[s.source] for s in subs] == ["0", "1", "0", "1", "0"]
    seen.clear()
    cuda_build.prebuild(subs, "cuda", tmp_path, jobs=2)  # one GPU: the builds inherit the device
    assert set(seen.values()) == {None}


def test_a_stage_of_one_job_pins_itself_and_its_workers(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6")
    assert gpus_.pin_process(None) is None and gpus_.os.environ["CUDA_VISIBLE_DEVICES"] == "4,6"
    assert gpus_.pin_process(1) == "6" and gpus_.os.environ["CUDA_VISIBLE_DEVICES"] == "6"


def _multi_gpu_report():
    spec = importlib.util.spec_from_file_location("multi_gpu", REPO / "scripts" / "gpu" / "multi_gpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_multi_gpu_figures_come_from_the_shards_logs_and_nvidia_smi(tmp_path, monkeypatch):
    """A real (empty) shard on slot 1 of 2 writes the log line the figures read; the walls come from
    the lease driver's log and the busy time from nvidia-smi's samples."""
    from rescore.stages import log as stage_log
    from rescore.stages import run_shard

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    report = _multi_gpu_report()
    config = dict(yaml.safe_load((REPO / "config" / "config.yaml").read_text()), device="cpu")
    work = tmp_path / "work"
    for step, shard, gpus in (("mg1", 0, 1), ("mgall", 1, 2)):
        results = work / step / "results"
        (results / "logs/check/toy").mkdir(parents=True)
        manifest = tmp_path / "manifest.json"
        manifest.write_text("[]")
        log = results / f"logs/check/toy/shard-{shard}.log"
        handler, level = logging.FileHandler(log), stage_log.level
        stage_log.addHandler(handler)
        stage_log.setLevel(logging.INFO)
        try:
            run_shard(str(manifest), shard, 2, config, str(tmp_path / f"{step}.parquet"),
                      str(tmp_path / f"{step}-shrunk.parquet"), str(tmp_path / "workers"), gpus=gpus)
        finally:
            stage_log.removeHandler(handler)
            stage_log.setLevel(level)
            handler.close()
    (work / "driver.log").write_text("08:00:00 mg1 start\n08:10:00 mg1 end rc=0 wall=600 s triton_cache=3\n"
                                     "08:10:01 mgall start\n08:15:01 mgall end rc=0 wall=300 s triton_cache=3\n")
    samples = [(1, 0, 50), (1, 1, 0), (2, 0, 0), (2, 1, 80), (3, 0, 0), (3, 1, 80)]  # (second, GPU, util %)
    (work / "mgall" / "smi.csv").write_text("".join(
        f"2026/12/05 08:10:0{t}.000, {g}, NVIDIA H200, {u} %, 1000 MiB\n" for t, g, u in samples))
    fig = report.figures(work)
    assert fig["speedup"] == 2.0 and fig["runs"]["one_gpu"]["wall_s"] == 600
    assert set(fig["runs"]["one_gpu"]["shards_by_gpu"]) == {"0"}  # one GPU: no slot, the first device
    by_gpu = fig["runs"]["all_gpus"]["shards_by_gpu"]
    assert set(by_gpu) == {"1"} and by_gpu["1"]["shards"] == 1
    sampled = fig["runs"]["all_gpus"]["gpus_sampled"]
    assert sampled["0"]["busy_s"] == 1.0 and sampled["1"]["busy_s"] == 1.0 and sampled["1"]["sampled_s"] == 2.0
    assert report.main([str(work)]) == 0 and "speedup: 2.0" in (work / "multi_gpu.md").read_text()
    assert json.loads((work / "multi_gpu.json").read_text())["speedup"] == 2.0
