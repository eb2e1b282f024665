"""The Snakemake DAG end to end on a tiny config: outputs, lint, a second run that does nothing,
and one table rebuilt alone."""

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import REPO

SNAKEMAKE = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile")]

TINY = {
    "dumps": {"toy": {"format": "corpus", "ops": ["softmax"]}},
    "device": "cpu",
    "master_seed": 0,
    "shards": 2,
    "fixed": {"profile": "kernelbench-v0.1", "dtype": "float32"},
    "fuzz": {"dtypes": ["float32"], "strategies": {"default": 3, "boundary": 3}},
    "study": {"strategies": ["adversarial", "layout"], "seeds": 2},
    "calibration": {"strategies": {"default": 2}},
    "budget": {"cpu": 4096, "cuda": 65536},
    "timeout_s": 60,
    "tolerance": {"quantile": 1.0, "multiplier": 2.0, "sweep": [1.0, 2.0]},
    "static": {"archs": [90]},
}


def snakemake(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*SNAKEMAKE, "-d", str(workdir), *args], capture_output=True, text=True, timeout=900)


def run_all(work: Path, config: dict) -> Path:
    """`snakemake all` in `work` with `config` as its config/config.yaml; fails the test if it fails."""
    (work / "config").mkdir()
    (work / "config" / "config.yaml").write_text(yaml.safe_dump(config))
    r = snakemake(work, "--cores", "2", "all")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return work


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    return run_all(tmp_path_factory.mktemp("dag"), TINY)


def test_all_outputs_exist(run_dir):
    for out in [
        "tables/submissions.parquet",
        "tables/cases.parquet",
        "tables/illusion.parquet",
        "tables/causes.parquet",
        "failures/failures.parquet",
        "figures/verdicts.png",
        "figures/verdicts.pdf",
        "failures/shrunk.parquet",
        "tables/strategies.parquet",
        "tables/tolerances.parquet",
        "tables/calibrated_tolerances.parquet",
        "tables/static.parquet",
        "figures/static_delta_heatmap.png",
        "uncertainty.md",
    ]:
        assert (run_dir / "results" / out).stat().st_size > 0, out
    illusion = pd.read_parquet(run_dir / "results/tables/illusion.parquet")
    assert set(illusion["fixed_verdict"]) <= {"pass", "fail", "skipped"}
    controls = illusion[(illusion["label"] == "correct") & (illusion["language"] == "triton")]
    assert len(controls) >= 2 and (controls["fuzz_verdict"].isin(["pass", "declined"])).all()
    # one row per submission with a failing evaluation case: robustness findings too (model/evidence.py)
    shrunk = pd.read_parquet(run_dir / "results/failures/shrunk.parquet")
    flagged = illusion[illusion["fuzz_verdict_all"] == "flagged"]
    assert len(flagged) and sorted(shrunk["name"]) == sorted(flagged["name"])
    timing = pd.read_parquet(run_dir / "results/tables/timing.parquet")  # a CPU run: no kernel is timed
    assert len(timing) == len(pd.read_parquet(run_dir / "results/tables/submissions.parquet"))
    assert (timing["status"] == "skipped").all()
    assert (timing["reason"] == "timing needs a CUDA GPU").all()
    assert "NO TIMINGS" in (run_dir / "results/logs/timing.log").read_text()
    sanitized = pd.read_parquet(run_dir / "results/tables/sanitizer.parquet")  # a CPU run: the stage says why not
    assert len(sanitized) and (sanitized["status"] == "not_run").all()
    assert "did not run: compute-sanitizer needs a CUDA GPU" in (run_dir / "results/sanitizer.md").read_text()


def test_the_check_shards_leave_their_progress_and_rescore_progress_reads_it(run_dir):
    """Each check shard kept a progress file (rescore.engine.progress): its counts are the cases it wrote."""
    cases = pd.read_parquet(run_dir / "results/tables/cases.parquet")
    plan = json.loads((run_dir / "results/progress/toy/plan.json").read_text())
    shards = [json.loads((run_dir / f"results/progress/toy/shard-{k}.json").read_text()) for k in range(TINY["shards"])]
    assert all(s["finished"] for s in shards) and len(plan["shards"]) == TINY["shards"]
    fuzz = cases[cases["oracle"] == "fuzz"]
    assert sum(s["cases_done"] for s in shards) == sum(p["cases"] for p in plan["shards"].values()) == len(fuzz)
    assert sum(s["submissions_done"] for s in shards) == cases["submission_id"].nunique()
    r = subprocess.run([sys.executable, "-m", "rescore.cli", "progress", "--directory", str(run_dir)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and f"checks done ({TINY['shards']} shards, {len(fuzz):,} cases)" in r.stdout


def test_uncertainty_statement_and_report(run_dir):
    text = (run_dir / "results" / "uncertainty.md").read_text()
    assert "## The input space covered" in text and "What no test here can establish" in text
    assert "upper bound" in text
    # the tiny budget (4,096 elements) is below the benchmark's softmax input: the statement says so
    assert "passes every case: softmax (" in text
    r = snakemake(run_dir, "--report", "results/report.zip")
    assert r.returncode == 0, r.stderr[-2000:]
    assert (run_dir / "results" / "report.zip").stat().st_size > 10_000


def test_notebook_reads_the_tables(run_dir):
    env = dict(__import__("os").environ, RESCORE_RESULTS=str(run_dir / "results"))
    r = subprocess.run([sys.executable, str(REPO / "notebooks" / "illusion.py")], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "illusions" in r.stdout and (run_dir / "results/figures/verdicts_notebook.png").exists()


def test_second_run_does_nothing(run_dir):
    r = snakemake(run_dir, "-n", "--cores", "2", "all")
    assert "Nothing to be done" in r.stdout + r.stderr


def test_one_table_rebuilds_alone(run_dir):
    (run_dir / "results/tables/illusion.parquet").unlink()
    dry = snakemake(run_dir, "-n", "--cores", "2", "results/tables/illusion.parquet")
    assert "illusion_table" in dry.stdout and "check_shard" not in dry.stdout
    r = snakemake(run_dir, "--cores", "2", "results/tables/illusion.parquet")
    assert r.returncode == 0 and (run_dir / "results/tables/illusion.parquet").exists()


def test_lint_and_dry_run_are_clean():
    lint = subprocess.run([*SNAKEMAKE, "-d", str(REPO), "--lint"], capture_output=True, text=True, timeout=300)
    assert lint.returncode == 0 and "good condition" in lint.stdout + lint.stderr


def test_bad_config_fails_its_schema(tmp_path):
    (tmp_path / "config").mkdir()
    bad = dict(TINY, device="tpu")
    (tmp_path / "config" / "config.yaml").write_text(yaml.safe_dump(bad))
    r = snakemake(tmp_path, "-n", "--cores", "1")
    assert r.returncode != 0 and "tpu" in r.stdout + r.stderr
