"""The same DAG on a real SLURM cluster (config/profiles/slurm + snakemake-executor-plugin-slurm).

Needs a cluster: `bash scripts/slurm/start.sh` starts a single-node one on this machine. Without
one these tests are skipped, unless RESCORE_SLURM=1 (set by .ci/run after start.sh), which turns
"no cluster" into a failure.

Each case runs one workflow twice, locally and on SLURM, each in its own working directory, and
checks that the files under the case's `compare` directories are identical. It also prints
`sacct` for the SLURM jobs of the run and checks that they all COMPLETED.

Settings (environment):
  RESCORE_SLURM=1                  the cluster must be there (fail instead of skip)
  RESCORE_SLURM_PARTITION=NAME     partition to submit to (default: the cluster's default one)
  RESCORE_SLURM_ACCOUNT=NAME       account (default: the user's default account in sacctmgr)
  RESCORE_SLURM_SNAKEFILE=PATH     add a case: this Snakefile ...
  RESCORE_SLURM_CONFIGFILE=PATH    ... with this config file (optional) ...
  RESCORE_SLURM_TARGETS="a b"      ... these targets (default: all) ...
  RESCORE_SLURM_COMPARE="results"  ... and compare these directories (default: results)
  RESCORE_SLURM_TMP=DIR            where the working directories go (must be on a file system
                                   the compute nodes share; default: pytest's tmp_path)
"""

from __future__ import annotations

import getpass
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[1]
PROFILE = REPO / "config" / "profiles" / "slurm"
TOY = REPO / "tests" / "fixtures" / "slurm_toy"
SNAKEMAKE = [sys.executable, "-m", "snakemake"]
# Columns that legitimately differ between two runs of the same DAG (timings, where it ran).
VOLATILE_COLUMNS = frozenset({"wall_ms", "limit_s", "device", "versions", "host", "hostname"})
TERMINAL_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL")


@dataclass(frozen=True)
class Case:
    """One workflow to run locally and on SLURM. Paths are absolute or relative to the repo."""

    name: str
    snakefile: Path
    configfiles: tuple[Path, ...] = ()
    targets: tuple[str, ...] = ("all",)
    config: tuple[str, ...] = ()  # extra --config KEY=VALUE for both runs
    compare: tuple[str, ...] = ("results",)  # directories of the working dir to compare
    copy: tuple[Path, ...] = ()  # files or directories copied into each working dir first
    files: tuple[tuple[str, str], ...] = ()  # (relative path, text) written into each working dir
    slurm_args: tuple[str, ...] = ()  # extra arguments for the SLURM run only
    local_cores: int = 2
    expect_slurm_jobs: int | None = None  # how many SLURM jobs the run must submit
    timeout_s: int = 900
    ignore_columns: frozenset[str] = field(default=VOLATILE_COLUMNS)


# The real DAG on a tiny config: one op, float32, a few cases per strategy, two check shards.
TINY_DAG = {
    "dumps": {"tiny": {"format": "corpus", "ops": ["relu"]}},
    "device": "cpu",
    "master_seed": 0,
    "shards": 2,
    "fixed": {"profile": "kernelbench-v0.1", "dtype": "float32"},
    "fuzz": {"dtypes": ["float32"], "strategies": {"default": 2, "boundary": 2}},
    "study": {"strategies": ["adversarial"], "seeds": 2},
    "calibration": {"strategies": {"default": 2}},
    "budget": {"cpu": 4096, "cuda": 65536},
    "timeout_s": 120,
    "tolerance": {"quantile": 1.0, "multiplier": 2.0, "sweep": [1.0, 2.0]},
    "static": {"archs": [90]},
}

CASES = [
    Case(
        "rescore-dag",
        REPO / "Snakefile",
        targets=("results/tables/illusion.parquet", "results/tables/strategies.parquet",
                 "results/tables/tolerances.parquet", "results/failures/failures.parquet"),
        files=(("config/config.yaml", yaml.safe_dump(TINY_DAG)),),
        compare=("results/tables", "results/failures"),
        slurm_args=("--cores", "2"),
        timeout_s=1500,
    ),
]
if os.environ.get("RESCORE_SLURM_SNAKEFILE"):
    CASES.append(
        Case(
            "env",
            Path(os.environ["RESCORE_SLURM_SNAKEFILE"]),
            tuple(Path(p) for p in os.environ.get("RESCORE_SLURM_CONFIGFILE", "").split() if p),
            tuple(os.environ.get("RESCORE_SLURM_TARGETS", "all").split()),
            compare=tuple(os.environ.get("RESCORE_SLURM_COMPARE", "results").split()),
            timeout_s=int(os.environ.get("RESCORE_SLURM_TIMEOUT_S", "1800")),
        )
    )


def _run(cmd: list[str], timeout: float = 60, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)


def _cluster_problem() -> str | None:
    """Why this machine cannot submit to SLURM, or None if it can."""
    if shutil.which("sinfo") is None or shutil.which("sbatch") is None:
        return "no SLURM client commands (sinfo, sbatch); run scripts/slurm/start.sh"
    try:
        r = _run(["sinfo", "-h", "-o", "%P %a %D %T"], timeout=30)
    except subprocess.TimeoutExpired:
        return "sinfo did not answer in 30 s"
    if r.returncode != 0 or not r.stdout.strip():
        return f"sinfo does not answer ({r.stderr.strip() or 'no partitions'})"
    try:
        import snakemake_executor_plugin_slurm  # noqa: F401
    except ImportError:
        return "snakemake-executor-plugin-slurm is not installed"
    return None


@pytest.fixture(scope="module")
def cluster() -> dict[str, str]:
    problem = _cluster_problem()
    if problem:
        if os.environ.get("RESCORE_SLURM") == "1":
            pytest.fail(f"RESCORE_SLURM=1 but {problem}")
        pytest.skip(problem)
    partition = os.environ.get("RESCORE_SLURM_PARTITION", "")
    if not partition:
        out = _run(["sinfo", "-h", "-o", "%P"]).stdout.split()
        partition = next((p.rstrip("*") for p in out if p.endswith("*")), out[0].rstrip("*"))
    account = os.environ.get("RESCORE_SLURM_ACCOUNT", "")
    if not account and shutil.which("sacctmgr"):
        r = _run(["sacctmgr", "-n", "-P", "show", "user", getpass.getuser(), "format=defaultaccount"])
        account = r.stdout.strip().splitlines()[0] if r.returncode == 0 and r.stdout.strip() else ""
    return {"partition": partition, "account": account}


def _abs(p: Path) -> Path:
    return p if p.is_absolute() else REPO / p


def _workdir(case: Case, base: Path, kind: str) -> Path:
    wd = base / f"{case.name}-{kind}"
    if wd.exists():
        shutil.rmtree(wd)
    wd.mkdir(parents=True)
    for p in case.copy:
        src = _abs(p)
        dst = wd / (p if not p.is_absolute() else p.name)
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst)
        else:
            shutil.copy2(src, dst)
    for rel, text in case.files:
        (wd / rel).parent.mkdir(parents=True, exist_ok=True)
        (wd / rel).write_text(text)
    return wd


def _common_args(case: Case, wd: Path) -> list[str]:
    args = ["--snakefile", str(_abs(case.snakefile)), "--directory", str(wd), "--nocolor"]
    if case.configfiles:
        args += ["--configfile", *[str(_abs(c)) for c in case.configfiles]]
    if case.config:
        args += ["--config", *case.config]
    return args


def profile_default_resources() -> list[str]:
    """The profile's default-resources as KEY=VALUE. A command-line --default-resources replaces
    the profile's whole block, so adding a partition means repeating these."""
    with open(PROFILE / "config.yaml") as f:
        prof = yaml.safe_load(f)
    return [f"{k}={v}" for k, v in (prof.get("default-resources") or {}).items()]


def slurm_command(case: Case, wd: Path, cluster: dict[str, str], *extra: str) -> list[str]:
    res = profile_default_resources() + [f"slurm_partition={cluster['partition']}"]
    if cluster["account"]:
        res.append(f"slurm_account={cluster['account']}")
    # Targets first: options such as --default-resources or --group-components take any number
    # of values and would swallow them.
    return [
        *SNAKEMAKE,
        *case.targets,
        *_common_args(case, wd),
        "--profile",
        str(PROFILE),
        "--default-resources",
        *res,
        # A test cluster answers at once: poll every 2 s, not the plugin's 40 s.
        "--slurm-init-seconds-before-status-checks",
        "2",
        "--seconds-between-status-checks",
        "2",
        "--slurm-keep-successful-logs",
        "--verbose",
        *case.slurm_args,
        *extra,
    ]


def _files(root: Path, dirs: tuple[str, ...]) -> dict[str, Path]:
    out = {}
    for d in dirs:
        for p in sorted((root / d).rglob("*")):
            if p.is_file():
                out[str(p.relative_to(root))] = p
    return out


def _same(a: Path, b: Path, ignore_columns: frozenset[str]) -> bool:
    if a.read_bytes() == b.read_bytes():
        return True
    if a.suffix == ".parquet":
        import pandas as pd

        da, db = pd.read_parquet(a), pd.read_parquet(b)
        if list(da.columns) != list(db.columns):
            return False
        keep = [c for c in da.columns if c not in ignore_columns]
        da = da[keep].sort_values(keep, ignore_index=True)
        db = db[keep].sort_values(keep, ignore_index=True)
        return da.equals(db)
    return False


def _sacct(job_ids: list[str]) -> tuple[str, dict[str, str]]:
    """sacct's table for the run's jobs, and {job id: state}; waits for accounting to catch up."""
    fmt = "JobID,Comment%34,Partition,Account,AllocCPUS,ReqMem,MaxRSS,Elapsed,State,ExitCode"
    table, states = "", {}
    for _ in range(30):
        # Every job with its steps (batch, and the srun step that ran Snakemake's job).
        r = _run(["sacct", "-j", ",".join(job_ids), f"--format={fmt}"])
        table = r.stdout
        p = _run(["sacct", "-X", "-n", "-P", "-j", ",".join(job_ids), "--format=JobIDRaw,State"])
        states = dict(line.split("|", 1) for line in p.stdout.splitlines() if "|" in line)
        if set(states) >= set(job_ids) and all(s.startswith(TERMINAL_STATES) for s in states.values()):
            break
        time.sleep(1)
    return table, states


@pytest.mark.parametrize(
    "case",
    # Both runs must fit in pytest-timeout's limit (600 s by default in pyproject).
    [pytest.param(c, id=c.name, marks=pytest.mark.timeout(2 * c.timeout_s + 120)) for c in CASES],
)
def test_slurm_run_matches_local_run(case: Case, cluster, tmp_path, capsys):
    base = Path(os.environ.get("RESCORE_SLURM_TMP", tmp_path))

    local_wd = _workdir(case, base, "local")
    t0 = time.monotonic()
    local = _run(
        [*SNAKEMAKE, *case.targets, *_common_args(case, local_wd), "--cores", str(case.local_cores)],
        timeout=case.timeout_s,
    )
    t_local = time.monotonic() - t0
    assert local.returncode == 0, f"local run failed:\n{local.stdout[-4000:]}\n{local.stderr[-8000:]}"

    slurm_wd = _workdir(case, base, "slurm")
    t0 = time.monotonic()
    slurm = _run(slurm_command(case, slurm_wd, cluster), timeout=case.timeout_s)
    t_slurm = time.monotonic() - t0
    log = slurm.stdout + slurm.stderr
    assert slurm.returncode == 0, f"SLURM run failed:\n{log[-12000:]}"

    run_id = re.search(r"SLURM run ID: (\S+)", log).group(1)
    job_ids = list(dict.fromkeys(re.findall(r"submitted with SLURM jobid (\d+)", log)))
    assert job_ids, "the SLURM run submitted no job"
    table, states = _sacct(job_ids)
    with capsys.disabled():
        print(
            f"\n[{case.name}] local run {t_local:.1f} s, SLURM run {t_slurm:.1f} s, "
            f"{len(job_ids)} SLURM jobs (run {run_id}, partition {cluster['partition']}, "
            f"account {cluster['account'] or '-'})\n{table}"
        )
    assert all(s == "COMPLETED" for s in states.values()), states
    if case.expect_slurm_jobs is not None:
        assert len(job_ids) == case.expect_slurm_jobs, job_ids

    local_files = _files(local_wd, case.compare)
    slurm_files = _files(slurm_wd, case.compare)
    assert local_files, f"the local run wrote nothing under {case.compare}"
    assert sorted(slurm_files) == sorted(local_files)
    differ = [k for k in local_files if not _same(local_files[k], slurm_files[k], case.ignore_columns)]
    assert not differ, f"outputs differ between the local and the SLURM run: {differ}"


def test_gpu_resource_becomes_gpus_request(cluster, tmp_path):
    """A rule with `gpu=1` is submitted with --gpus=1 (--gpus=MODEL:1 with gpu_model). This
    GPU-less test node has no GRES, so Slurm refuses it at submission: the run must fail, and
    fail fast."""
    case = Case("toy-gpu", TOY / "Snakefile", (TOY / "config.yaml",), targets=("aggregate",))
    wd = _workdir(case, tmp_path, "gpu")
    cmd = slurm_command(case, wd, cluster, "--config", "gpu=1", "gpu_model=h200", "--retries", "0")
    r = _run(cmd, timeout=300)
    log = r.stdout + r.stderr
    calls = [line for line in log.splitlines() if "sbatch call:" in line]
    gpu_calls = [c for c in calls if "--gpus=h200:1" in c]
    assert gpu_calls, "no sbatch call asked for --gpus=h200:1:\n" + "\n".join(calls)
    assert all("make_cases" in c and "check" in c for c in gpu_calls)
    if r.returncode == 0:
        # A cluster that has GPUs runs it; then the GPU job saw its device.
        logs = "".join(p.read_text() for p in (wd / "logs" / "check").glob("*.log"))
        assert "cuda_visible_devices=unset" not in logs
