"""The GPU measurement command on the CPU (scripts/gpu/measure_external.sh, external_config.py,
pack_steps.py): the config it writes for the external dumps validates and ingests, a step's pack
holds its tables and logs and never the dumps' sources, what one call returns stays within the
device tool's limits, and a dry run goes through every step."""

from __future__ import annotations

import importlib.util
import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import yaml
from conftest import REPO

DUMPS = REPO / "tests" / "fixtures" / "dumps"
GPUEMU, CUDAL1 = DUMPS / "gpuemu" / "data", DUMPS / "cudal1" / "optimized_cuda_code" / "h100_xsm.json"


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / "gpu" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


external_config = _script("external_config")
pack_steps = _script("pack_steps")


def test_the_external_config_validates_and_its_dumps_ingest(tmp_path):
    from rescore.ingest import read_dump

    out = tmp_path / "ext.yaml"
    assert external_config.main([str(GPUEMU), str(CUDAL1), "--out", str(out), "--sanitizer-budget", "90"]) == 0
    config = yaml.safe_load(out.read_text())
    assert external_config.validate(config)
    assert config["papers"] == {"dump": "gpuemu"} and config["sanitizer"]["budget_s"] == 90
    assert config["dumps"]["gpuemu"]["controls"] == {"softmax_llm_buggy": "softmax", "^(.+)_buggy$": "\\1"}
    assert config["dumps"]["cudal1"]["levels"] == [1, 2] and Path(config["dumps"]["cudal1"]["path"]).is_absolute()
    subs = {name: read_dump(name, spec) for name, spec in config["dumps"].items()}
    assert all(subs.values()) and not any(s.extra.get("ingest_error") for v in subs.values() for s in v)
    assert {s.name: s.control for s in subs["gpuemu"]}["bias_add_buggy"] == "bias_add"
    assert external_config.main([str(tmp_path), str(CUDAL1), "--out", str(out)]) == 2  # no gpuemu entry there


def _step(work: Path, name: str, done: bool, cases_table: bool = True) -> Path:
    """A pipeline step's folder in the layout a run leaves."""
    step = work / name
    files = {"snakemake.out": b"done", "config/config.yaml": b"dumps: {}",
             "results/tables/illusion.parquet": b"t", "results/logs/check/ext/shard-0.log": b"log",
             "results/cases/ext/shard-0.parquet": b"shard", "results/ingest/ext/manifest.json": b"sources",
             "results/phases/ext/shard-0.parquet": b"phases",
             "results/failures/reproducers/f.json": b"r", "results/failures/failures.parquet": b"f",
             "results/sanitizer.md": b"s", ".rescore-cache/static/x": b"c",
             "results/tables/cases.parquet": b"c" if cases_table else None}
    for rel, data in files.items():
        if data is not None:
            (step / rel).parent.mkdir(parents=True, exist_ok=True)
            (step / rel).write_bytes(data)
    if done:
        (work / f"{name}.done").touch()
    return step


def test_a_steps_pack_holds_its_tables_and_logs_and_the_shards_only_when_it_has_no_cases_table(tmp_path):
    _step(tmp_path, "ext", done=True)
    names = sorted(str(p) for p in pack_steps.members(tmp_path / "ext", finished=True))
    assert names == ["config/config.yaml", "results/failures/failures.parquet", "results/logs/check/ext/shard-0.log",
                     "results/sanitizer.md", "results/tables/cases.parquet", "results/tables/illusion.parquet",
                     "snakemake.out"]
    running = {str(p) for p in pack_steps.members(tmp_path / "ext", finished=False)}
    assert running == {*names, "results/cases/ext/shard-0.parquet", "results/phases/ext/shard-0.parquet"}
    _step(tmp_path, "cold", done=True, cases_table=False)  # ended without its cases table: the shards come
    assert "results/cases/ext/shard-0.parquet" in {str(p) for p in pack_steps.members(tmp_path / "cold", True)}
    (tmp_path / "fixtures" / "logs").mkdir(parents=True)
    (tmp_path / "fixtures" / "wild_exploits.md").write_text("| fixture |")
    (tmp_path / "fixtures" / "logs" / "a.log").write_text("=========")
    assert sorted(str(p) for p in pack_steps.members(tmp_path / "fixtures", True)) == ["logs/a.log",
                                                                                       "wild_exploits.md"]


def test_a_steps_pack_keeps_its_workers_start_lines_and_not_their_logs(tmp_path):
    step = _step(tmp_path, "ext", done=True)
    workers = step / "results" / "logs" / "check" / "ext" / "shard-0.log.workers"
    workers.mkdir(parents=True)
    (workers / "worker-1-0.log").write_text("rescore worker 7: cwd /tmp/w, limits {}\nrescore worker 7: ready in "
                                            "12.00 s (torch and the device 4.00 s, triton 3.00 s)\nTraceback\n")
    pack = pack_steps.pack_step(tmp_path, "ext")
    with tarfile.open(pack) as tar:
        names = tar.getnames()
        starts = tar.extractfile("ext/results/logs/worker_starts.txt").read().decode()
    assert not any(".workers" in n for n in names)
    assert starts == ("check/ext/shard-0.log.workers/worker-1-0.log: rescore worker 7: ready in 12.00 s (torch and "
                      "the device 4.00 s, triton 3.00 s)\n")


def _big(step: Path, size: int, seed: int) -> None:
    (step / "results" / "tables" / "big.parquet").write_bytes(os.urandom(size) if seed else b"\0" * size)


def test_one_call_returns_at_most_8_files_within_the_byte_limit_split_in_parts_and_says_what_it_left_out(
        tmp_path, monkeypatch):
    work, out = tmp_path / "work", tmp_path / "out"
    monkeypatch.setattr(pack_steps, "PART", 40_000)
    monkeypatch.setattr(pack_steps, "MAX_BYTES", 260_000)
    monkeypatch.setattr(pack_steps, "STATUS_MAX", 10_000)
    _big(_step(work, "ext", done=True), 90_000, 1)  # random bytes: the pack stays about as large
    _big(_step(work, "extwarm", done=True), 20_000, 1)
    _big(_step(work, "running", done=False), 120_000, 1)  # over what is left: left out
    (work / "driver.log").write_text("12:00:00 ext start\n")
    pack_steps.pack_step(work, "ext")
    listing = pack_steps.out_call(work, out)
    files = sorted(p.name for p in out.iterdir())
    assert files == ["ext.tgz.part-aa", "ext.tgz.part-ab", "ext.tgz.part-ac", "extwarm.tgz", "status.tgz"]
    assert len(files) <= pack_steps.MAX_FILES and sum(p.stat().st_size for p in out.iterdir()) <= 260_000
    assert all(p.stat().st_size <= 40_000 for p in out.iterdir())
    whole = b"".join((out / f"ext.tgz.part-a{c}").read_bytes() for c in "abc")
    with tarfile.open(fileobj=io.BytesIO(whole)) as tar:
        assert "ext/results/tables/big.parquet" in tar.getnames()
        assert not any("ingest" in n or "reproducers" in n for n in tar.getnames())
    assert any(line.startswith("LEFT OUT (over the limits of one call): partial-running.tgz") for line in listing)
    with tarfile.open(out / "status.tgz") as tar:
        assert {"driver.log", "MANIFEST.txt", "ext.done", "extwarm.done"} <= set(tar.getnames())
        assert b"LEFT OUT" in tar.extractfile("MANIFEST.txt").read()


def test_a_dry_run_goes_through_every_step_and_packs_them(tmp_path):
    env = dict(os.environ, WORK=str(tmp_path / "work"), OUT=str(tmp_path / "out"), DRY="1", PYTHON=sys.executable,
               PYTHONPATH=str(REPO / "src"))
    (tmp_path / "out").mkdir()
    # the dumps' paths relative to the checkout, as the device call gives them (scripts/gpu/README.md)
    r = subprocess.run(["bash", "scripts/gpu/measure_external.sh", str(GPUEMU.relative_to(REPO)),
                        str(CUDAL1.relative_to(REPO)), "60"], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    log = (tmp_path / "work" / "driver.log").read_text()
    assert "ext end rc=0" in log and "extwarm end rc=0" in log  # no CUDA here: the loop check and the
    assert "loop end rc=2" in log and "fixtures end rc=2" in log  # fixtures stop at once, with their reason
    assert "extphases end rc=2" in log  # a dry run ingests no dump for bench/case_phases.py to read
    # the steps ran from the copy of the checkout the first call made, the dumps read from it too: a
    # later call's copy of the working tree replaces no file under a running step
    snap = tmp_path / "work" / "repo"
    assert (snap / "src" / "rescore" / "stages.py").is_file() and not (snap / ".git").exists()
    assert f"path: {snap}/" in (tmp_path / "work" / "external.yaml").read_text()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["ext.tgz", "extphases.tgz", "extwarm.tgz",
                                                                     "fixtures.tgz", "loop.tgz", "status.tgz"]
    with tarfile.open(tmp_path / "out" / "ext.tgz") as tar:
        text = tar.extractfile("ext/snakemake.out").read().decode()
    assert "sanitizer" in text and "This was a dry-run" in text
    with tarfile.open(tmp_path / "out" / "fixtures.tgz") as tar:
        assert "needs a CUDA device" in tar.extractfile("fixtures/wild_exploits.err").read().decode()
    with tarfile.open(tmp_path / "out" / "extphases.tgz") as tar:
        assert "a dry run ingests nothing" in tar.extractfile("extphases/case_phases.txt").read().decode()


def test_submissions_by_minute_from_the_shards_logs_and_the_steps_start(tmp_path):
    """tools/by_minute.py: each `NAME: N cases` line against `ext start` in driver.log, past midnight too."""
    (tmp_path / "driver.log").write_text("23:50:00 loop start\n23:55:00 ext start\n")
    logs = tmp_path / "ext" / "results" / "logs" / "check"
    for dump, lines in (("a", ["23:59:00 INFO k1: 12 cases, 0 flagged", "00:06:00 INFO k2: 3 cases, 1 flagged"]),
                        ("b", ["00:04:59 INFO shard 0 of 2: 1 submissions", "00:05:00 INFO level1/task3: 9 cases"])):
        (logs / dump).mkdir(parents=True)
        (logs / dump / "shard-0.log").write_text("".join(f"2026-12-06 {line.replace(' INFO', ',123 INFO')}\n"
                                                         for line in lines))
    r = subprocess.run([sys.executable, str(REPO / "tools" / "by_minute.py"), str(tmp_path), "--marks", "4", "10"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["by minute 4: 1", "by minute 10: 2", "in all: 3, the last at minute 11.0"]


def test_job_spans_from_what_snakemake_printed_with_a_job_cut_short(tmp_path):
    """tools/job_spans.py: each job's start and end in minutes from the first timestamp, the check
    shards in one line, and a job never seen to finish named `running`."""
    out = tmp_path / "snakemake.out"
    out.write_text("\n".join([
        "Building DAG of jobs...",
        "[Mon Dec  7 21:42:10 2026]", "checkpoint check_shard:", "    jobid: 3", "    wildcards: dump=a, shard=0",
        "[Mon Dec  7 21:42:10 2026]", "rule check_shard:", "    jobid: 4", "    wildcards: dump=a, shard=1",
        "[Mon Dec  7 21:43:40 2026]", "Finished jobid: 4 (Rule: check_shard)",
        "[Mon Dec  7 21:45:10 2026]", "Finished jobid: 3 (Rule: check_shard)",
        "[Mon Dec  7 21:45:16 2026]", "localrule timing:", "    input: results/tables/cases.parquet", "    jobid: 9",
        "[Mon Dec  7 21:46:10 2026]", "Finished jobid: 9 (Rule: timing)",
        "[Mon Dec  7 21:46:13 2026]", "localrule sanitizer:", "    jobid: 10",
    ]) + "\n")
    r = subprocess.run([sys.executable, str(REPO / "tools" / "job_spans.py"), str(out)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "timing: 3.10 to 4.00", "sanitizer: 4.05 to running",
        "check_shard: 2 jobs, 2 finished; first start 0.00, last end 3.00, longest 3.00 (dump=a, shard=0)",
        "last end 4.00", "1 jobs never seen to finish"]
    only = subprocess.run([sys.executable, str(REPO / "tools" / "job_spans.py"), str(out), "--rule", "check_shard"],
                          capture_output=True, text=True, timeout=60)
    assert only.stdout.splitlines() == ["check_shard dump=a, shard=0: 0.00 to 3.00",
                                        "check_shard dump=a, shard=1: 0.00 to 1.50"]
    (tmp_path / "empty.out").write_text("Building DAG of jobs...\n")
    none = subprocess.run([sys.executable, str(REPO / "tools" / "job_spans.py"), str(tmp_path / "empty.out")],
                          capture_output=True, text=True, timeout=60)
    assert none.returncode == 2 and "has no job start" in none.stderr


def _results_with_one_shard_log(tmp_path: Path) -> Path:
    """A results folder with a one-case cases table of dump `d` and the path of its shard 0's log
    (its folder made), for tools/harness_faults.py to read."""
    import pandas as pd

    tables = tmp_path / "results" / "tables"
    tables.mkdir(parents=True)
    pd.DataFrame([{"submission_id": "s1", "oracle": "fixed", "outcome": "pass", "reason": ""}]).to_parquet(
        tables / "cases.parquet")
    pd.DataFrame([{"submission_id": "s1", "dump": "d"}]).to_parquet(tables / "submissions.parquet")
    log = tmp_path / "results" / "logs" / "check" / "d" / "shard-0.log"
    log.parent.mkdir(parents=True)
    return log


def test_the_harness_faults_tool_counts_each_way_a_request_was_retried_for_memory(tmp_path):
    """tools/harness_faults.py reads the retry lines as the sandbox writes them (`RETRY_LINE`, `NO_ROOM`):
    handed back, once the device had room (with the wait), alone (with the wait for the running requests);
    and the timeouts tried again with a longer limit, by how they ended (`CONFIRM_LINE`)."""
    from rescore.engine.sandbox import ALONE, HANDED_BACK, NO_ROOM, ROOM

    log = _results_with_one_shard_log(tmp_path)
    log.write_text("\n".join(f"2026-12-06 15:00:0{i},000 INFO {line}" for i, line in enumerate([
        f"retried {HANDED_BACK} on gpu-0 (out of memory in the reference: x): pass; 0.8 s",
        f"retried {ROOM} on gpu-0 (out of memory in the harness: x): pass; 5.8 s, 5.0 s of it waiting for room",
        f"retried {ROOM} on gpu-0 (out of memory in the reference: x): mismatch; 1.5 s, 0.5 s of it waiting for room",
        f"{NO_ROOM}gpu-0 after 60.0 s for 9.25 GiB (a request that asked for 8.00 GiB)",
        f"retried {ALONE} on gpu-0 (out of memory in the reference: x): pass; 212.9 s, 167.2 s of it waiting for the "
        "running requests",
        "timed out at its call's limit of 5.12 s beside 14 other workers' requests; tried again with 4x the "
        "limit: pass; 9.3 s",
        "timed out at its call's limit of 5.3 s beside 9 other workers' requests; tried again with 4x the "
        "limit: timeout; 23.0 s",
    ])) + "\n")
    r = subprocess.run([sys.executable, str(REPO / "tools" / "harness_faults.py"), str(tmp_path / "results")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert f"requests retried {HANDED_BACK}: 1, ending {{'pass': 1}}" in out
    assert f"requests retried {ROOM}: 2, ending {{'pass': 1, 'mismatch': 1}}" in out
    assert f"requests retried {ALONE}: 1, ending {{'pass': 1}}" in out
    assert "the retries alone took 213 s, 167 s of it waiting for the running requests" in out
    assert "waits for room before a retry alone: 2 found it in 6 s (longest 5 s), 1 did not" in out
    assert ("timeouts at a call's limit beside other workers, tried again with a longer limit: 2, ending "
            "{'pass': 1, 'timeout': 1}") in out


def test_the_harness_faults_tool_reads_the_shard_logs_of_a_run_cut_short_before_its_tables(tmp_path):
    """A warm run cut by the device budget has shard logs but no cases table: the tool says so, names
    the tool that makes the partial tables, and still counts the retries in the logs."""
    from rescore.engine.sandbox import HANDED_BACK

    log = _results_with_one_shard_log(tmp_path)
    for table in (tmp_path / "results" / "tables").iterdir():
        table.unlink()
    log.write_text(f"2026-12-07 14:40:00,000 INFO retried {HANDED_BACK} on gpu-0 (out of memory in the reference: "
                   "x): pass; 0.8 s\n")
    r = subprocess.run([sys.executable, str(REPO / "tools" / "harness_faults.py"), str(tmp_path / "results")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "no cases or submissions table" in r.stdout and "tools/partial_tables.py" in r.stdout
    assert f"requests retried {HANDED_BACK}: 1, ending {{'pass': 1}}" in r.stdout


def test_the_harness_faults_tool_splits_the_waits_at_their_limit_by_size_and_what_followed(tmp_path):
    """A wait for memory granted at its limit is counted as larger or no larger than BACKFILL of the
    capacity its line states, with its seconds, and as run out of memory all the same when the
    same worker's next line of note is a retry for memory (not its verdict, nor its next wait); where
    the line names the device's last report of free memory, by whether that had room for the growth."""
    from rescore.engine.sandbox import HANDED_BACK

    log = _results_with_one_shard_log(tmp_path)

    def waited(seconds: float, size: str, free: str = "", left: str = "") -> str:
        report = f" (the device's last report: {free} free 0.2 s before, {size} more asked{left})" if free else ""
        return (f"waited {seconds} s for {size} of gpu-0's memory (capacity 64.00 GiB; the others hold 90.00 GiB "
                f"in 9 reservations, the largest 20.00 GiB; 2 waiting); granted at its wait limit{report}")

    log.write_text("\n".join(f"2026-12-07 03:00:0{i},000 INFO {line}" for i, line in enumerate([
        waited(60.0, "30.00 GiB", free="40.00 GiB"),
        f"retried {HANDED_BACK} on gpu-0 (out of memory in the reference: x): pass; 0.8 s",
        waited(40.0, "20.00 GiB", free="5.00 GiB"),
        "level1/task9: 121 cases, 2 flagged (274.6 s for 9.8 s of cases)",
        f"retried {HANDED_BACK} on gpu-0 (out of memory in the reference: x): pass; 0.8 s",
        waited(3.0, "1.00 GiB"),
        waited(5.0, "2.00 GiB"),
        waited(4.0, "1.50 GiB", free="30.00 GiB", left="; 1.00 GiB lent against it, 29.00 GiB kept for a retry's room"),
        waited(4.0, "1.50 GiB", free="30.00 GiB", left="; 0 bytes lent against it, 20.00 GiB kept for a retry's room"),
    ])) + "\n")
    r = subprocess.run([sys.executable, str(REPO / "tools" / "harness_faults.py"), str(tmp_path / "results")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert ("at their wait limit, larger than BACKFILL of the capacity: 2, 100 s; then out of memory (the "
            "worker's next line a retry): 1") in r.stdout, r.stdout
    assert ("at their wait limit, no larger than BACKFILL of the capacity: 4, 16 s; then out of memory (the "
            "worker's next line a retry): 0") in r.stdout, r.stdout
    assert ("beside what it had to leave (lent against it, kept for a retry's room): 1 of 2") in r.stdout, r.stdout
    assert ("the device's last report then had room for the growth: 1 of 2 (then out of memory: 1); had not: 1 "
            "(then out of memory: 0)") in r.stdout, r.stdout


def test_the_fixtures_step_runs_the_fixtures_named_in_fixture_only(tmp_path):
    """FIXTURE_ONLY reaches wild_exploits.py as `--only`: a name it lacks is refused by name."""
    env = dict(os.environ, WORK=str(tmp_path / "work"), OUT=str(tmp_path / "out"), DRY="1", PYTHON=sys.executable,
               PYTHONPATH=str(REPO / "src"), STEPS="fixtures", FIXTURE_ONLY="unset_accumulator no_such_fixture",
               FIXTURE_TOOLS="initcheck")
    (tmp_path / "out").mkdir()
    r = subprocess.run(["bash", "scripts/gpu/measure_external.sh", str(GPUEMU.relative_to(REPO)),
                        str(CUDAL1.relative_to(REPO)), "30"], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    err = (tmp_path / "work" / "fixtures" / "wild_exploits.err").read_text()
    assert "--only: invalid choice: 'no_such_fixture'" in err
