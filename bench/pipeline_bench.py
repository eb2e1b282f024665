"""Speed targets, measured (not asserted by tests).

python bench/pipeline_bench.py throughput [--device cuda] [--workers 8] [--cases 400] [--entry relu_triton]
    fuzz cases per second for one kernel, float64 reference included, several workers at once
    (the H200 target: >= 500 cases/s for an elementwise kernel at sizes up to 1M elements)
python bench/pipeline_bench.py pipeline [--cores 8] [--profile local] [--snakemake-args "..."] [--warm]
    wall time of `snakemake --cores N all` from a clean results folder (targets: CPU < 10 min, H200 < 3 min);
    --warm: then again after `rm -rf results .snakemake`, the work folder's caches kept (its results
    cache: README, "Warm runs"), and whether the second run's case outcomes are the first's
python3 bench/pipeline_bench.py fresh [--runs 2] [--cores 8] [--rev HEAD] [--test] [--pip-cache] [--keep] [--out F]
    what a newcomer's `make all` costs: each run clones this repository afresh (tracked files only: no
    .venv, results, .snakemake or .rescore-cache), times the set-up (`make venv`: a new .venv, pip
    without its download cache unless --pip-cache) and then the main job (`make all`, the set-up done),
    with Snakemake's own times per stage; --test then times `make test` in the last clone, the
    yardstick beside them. Run it with the system's python3 (it builds its own environments); the
    targets on a 2-core CPU machine: main job < 10 min, with the set-up < 12 min.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def throughput(args: argparse.Namespace) -> dict:
    from rescore.corpus.catalog import load_corpus
    from rescore.engine.sandbox import Worker, run_with_retry
    from rescore.inputs.seeds import case_seed
    from rescore.worker.protocol import Case, Load, job_of

    sub = next(s for s in load_corpus() if s.name == args.entry)
    budget = args.budget

    def work(w_index: int) -> tuple[int, float, dict]:
        worker = Worker(args.device, budget)
        counts: dict[str, int] = {}
        try:
            run_with_retry(worker, Load(job_of(sub)), 600)
            worker.job = job_of(sub)
            # warm-up: module import and JIT compilation stay out of the numbers
            run_with_retry(worker, Case("default", 1, "float32"), 600)
            start = time.perf_counter()
            n = args.cases // args.workers
            for i in range(n):
                seed = case_seed(0, sub.problem.problem_id, "default", w_index * n + i)
                row = run_with_retry(worker, Case("default", seed, args.dtype), 600)
                counts[row["outcome"]] = counts.get(row["outcome"], 0) + 1
            return n, time.perf_counter() - start, counts
        finally:
            worker.stop()

    wall = time.perf_counter()
    with ThreadPoolExecutor(args.workers) as pool:
        parts = list(pool.map(work, range(args.workers)))
    wall = time.perf_counter() - wall
    done = sum(p[0] for p in parts)
    busiest = max(p[1] for p in parts)
    outcomes: dict[str, int] = {}
    for p in parts:
        for k, v in p[2].items():
            outcomes[k] = outcomes.get(k, 0) + v
    return {
        "bench": "throughput",
        "entry": args.entry,
        "device": args.device,
        "dtype": args.dtype,
        "workers": args.workers,
        "budget_elements": budget,
        "cases": done,
        "cases_per_s": done / busiest,
        "ms_per_case_per_worker": 1e3 * busiest / max(1, done // args.workers),
        "wall_s_including_startup": wall,
        "outcomes": outcomes,
    }


def pipeline(args: argparse.Namespace) -> dict:
    work = Path(tempfile.mkdtemp(prefix="rescore-bench-"))
    shutil.copytree(REPO / "config", work / "config")
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(REPO / "Snakefile"),
        "-d",
        str(work),
        "--cores",
        str(args.cores),
    ]
    if args.profile:
        cmd += ["--profile", str(REPO / "config" / "profiles" / args.profile)]
    cmd += ["all", *shlex.split(args.snakemake_args)]  # the target first: `--set-threads a=1 b=2` takes a list
    start = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    out = {
        "bench": "pipeline",
        "cores": args.cores,
        "profile": args.profile,
        "snakemake_args": args.snakemake_args,
        "wall_s": wall,
        "ok": r.returncode == 0,
        "results": str(work / "results"),
    }
    if r.returncode == 0:
        import pandas as pd

        cases = pd.read_parquet(work / "results" / "tables" / "cases.parquet")
        out.update(
            cases=len(cases),
            cases_executed=int((cases["outcome"] != "skipped").sum()),
            submissions=int(cases["submission_id"].nunique()),
        )
        fuzz = cases[(cases["oracle"] == "fuzz") & (cases["purpose"] == "evaluation") & (cases["outcome"] != "skipped")]
        per = fuzz.groupby(["submission_id", "dtype"]).size()
        if len(per):
            out.update(fuzz_cases_per_kernel_dtype_min=int(per.min()),
                       fuzz_cases_per_kernel_dtype_median=float(per.median()))
    else:
        out["stderr_tail"] = r.stderr[-2000:]
    if args.warm and r.returncode == 0:
        shutil.move(work / "results", work / "results.cold")
        shutil.rmtree(work / ".snakemake", ignore_errors=True)
        start = time.perf_counter()
        warm = subprocess.run(cmd, capture_output=True, text=True)
        out.update(warm_wall_s=time.perf_counter() - start, warm_ok=warm.returncode == 0)
        if warm.returncode == 0:
            out["warm_outcomes_differ"] = outcomes_differ(work / "results.cold", work / "results")
        else:
            out["warm_stderr_tail"] = warm.stderr[-2000:]
    return out


def outcomes_differ(a: Path, b: Path) -> int:
    """How many cases of run `a` have another outcome, or no row, in run `b` (by submission, oracle,
    strategy, purpose, dtype and case index)."""
    import pandas as pd

    key = ["submission_id", "oracle", "strategy", "purpose", "dtype", "case_index"]
    left, right = (pd.read_parquet(p / "tables" / "cases.parquet", columns=[*key, "outcome"]) for p in (a, b))
    both = left.merge(right, on=key, how="outer", suffixes=("_a", "_b"), indicator=True)
    return int(((both["_merge"] != "both") | (both["outcome_a"] != both["outcome_b"])).sum())


def stage_times(log: str) -> dict:
    """Seconds per stage from Snakemake's log: the static study, the check shards (first start to last
    end, and their sum), and what ran after the last shard (tables, figures, papers)."""
    from rescore.engine.progress import job_spans

    done = [j for j in job_spans(log) if j.end_s is not None]
    if not done:
        return {}
    first, last = min(j.start_s for j in done), max(j.end_s for j in done)
    out = {"snakemake_s": last - first}
    checks = [j for j in done if j.rule == "check_shard"]
    if checks:
        begin, end = min(j.start_s for j in checks), max(j.end_s for j in checks)
        out.update(checks_s=end - begin, check_shards=len(checks),
                   shard_seconds=sum(j.end_s - j.start_s for j in checks),
                   slowest_shard_s=max(j.end_s - j.start_s for j in checks),
                   before_checks_s=begin - first, after_checks_s=last - end)
    static = [j for j in done if j.rule == "static_study"]
    if static:
        out["static_study_s"] = sum(j.end_s - j.start_s for j in static)
    return out


def machine() -> dict:
    """What the timings were taken on: cores, CPU model, hardware threads per core, load."""
    import os
    import platform

    info: dict = {"cpus": os.cpu_count(), "python": platform.python_version(), "load_1_5_15": os.getloadavg()}
    if hasattr(os, "sched_getaffinity"):
        info["cpus_usable"] = len(os.sched_getaffinity(0))
    try:
        blocks = [dict(line.split(":", 1) for line in block.splitlines() if ":" in line)
                  for block in Path("/proc/cpuinfo").read_text().split("\n\n") if block.strip()]
    except OSError:
        return info
    blocks = [{k.strip(): v.strip() for k, v in b.items()} for b in blocks]
    cores = {(b.get("physical id"), b.get("core id")) for b in blocks}
    info.update(cpu_model=blocks[0].get("model name") if blocks else None, hardware_threads=len(blocks),
                physical_cores=len(cores))  # 2 threads on 1 core run two shards at about the speed of one
    return info


def fresh(args: argparse.Namespace) -> dict:
    """Set-up and main job of a fresh clone, `args.runs` times (see the module docstring)."""
    import os

    base = Path(tempfile.mkdtemp(prefix="rescore-fresh-"))
    rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", args.rev], capture_output=True, text=True,
                         check=True).stdout.strip()
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env.pop("VIRTUAL_ENV", None)
    if not args.pip_cache:
        env["PIP_NO_CACHE_DIR"] = "1"  # a first set-up downloads everything
    out: dict = {"bench": "fresh", "commit": rev, "cores": args.cores, "machine_before": machine(), "runs": []}

    def timed(cmd: list[str], cwd: Path, log: Path) -> tuple[float, int]:
        start = time.perf_counter()
        with open(log, "w") as f:
            rc = subprocess.run(cmd, cwd=cwd, env=env, stdout=f, stderr=subprocess.STDOUT).returncode
        return time.perf_counter() - start, rc

    clone = base
    for i in range(args.runs):
        clone = base / f"run-{i + 1}"
        subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(REPO), str(clone)], check=True)
        subprocess.run(["git", "-C", str(clone), "checkout", "--quiet", rev], check=True)
        setup_s, setup_rc = timed(["make", "venv", f"PYTHON={args.python}"], clone, base / f"setup-{i + 1}.log")
        run: dict = {"clone": str(clone), "setup_s": round(setup_s, 1), "setup_ok": setup_rc == 0}
        if setup_rc == 0:
            main_s, main_rc = timed(["make", "all", f"CORES={args.cores}"], clone, base / f"main-{i + 1}.log")
            run.update(main_s=round(main_s, 1), main_ok=main_rc == 0, total_s=round(setup_s + main_s, 1),
                       load_after=os.getloadavg())
            logs = sorted((clone / ".snakemake" / "log").glob("*.snakemake.log"))
            if logs:
                run["stages"] = {k: round(v, 1) for k, v in stage_times(logs[-1].read_text()).items()}
            cases = clone / "results" / "tables" / "cases.parquet"
            if main_rc == 0 and cases.exists():
                run.update(summarize_cases(cases))
        out["runs"].append(run)
        print(json.dumps(run), file=sys.stderr, flush=True)
        if not args.keep and not (args.test and i == args.runs - 1):
            shutil.rmtree(clone / ".venv", ignore_errors=True)  # a CPU torch: about a GB each
    if args.test and out["runs"] and out["runs"][-1].get("setup_ok"):
        test_s, test_rc = timed(["make", "test"], clone, base / "test.log")
        out["make_test"] = {"s": round(test_s, 1), "ok": test_rc == 0, "log": str(base / "test.log")}
        if not args.keep:
            shutil.rmtree(clone / ".venv", ignore_errors=True)
    out["logs"] = str(base)  # the clones (results included) and the logs of each step
    return out


def summarize_cases(path: Path) -> dict:
    import pandas as pd

    cases = pd.read_parquet(path, columns=["submission_id", "oracle", "purpose", "outcome"])
    ran = cases[cases["outcome"] != "skipped"]
    fuzz = ran[(ran["oracle"] == "fuzz") & (ran["purpose"] == "evaluation")]
    return {"cases": len(cases), "cases_executed": len(ran), "submissions": int(cases["submission_id"].nunique()),
            "fuzz_cases_per_kernel_median": float(fuzz.groupby("submission_id").size().median()) if len(fuzz) else 0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--out", help="also write the result as JSON here")
    sub = parser.add_subparsers(dest="bench", required=True)
    t = sub.add_parser("throughput", parents=[common])
    t.add_argument("--device", default="cpu")
    t.add_argument("--workers", type=int, default=2)
    t.add_argument("--cases", type=int, default=100)
    t.add_argument("--entry", default="relu_triton")
    t.add_argument("--dtype", default="float32")
    t.add_argument("--budget", type=int, default=1 << 20)
    p = sub.add_parser("pipeline", parents=[common])
    p.add_argument("--cores", type=int, default=8)
    p.add_argument("--profile", default="")
    p.add_argument("--snakemake-args", default="", help='more snakemake options, e.g. "--set-threads check_shard=2"')
    p.add_argument("--warm", action="store_true", help="then again, results removed and the caches kept")
    f = sub.add_parser("fresh", parents=[common])
    f.add_argument("--runs", type=int, default=2)
    f.add_argument("--cores", type=int, default=8, help="make all CORES=N (the README's command: 8)")
    f.add_argument("--rev", default="HEAD", help="the commit to clone")
    f.add_argument("--python", default="python3", help="the Python that builds .venv (make PYTHON=...)")
    f.add_argument("--pip-cache", action="store_true", help="let pip use its download cache")
    f.add_argument("--test", action="store_true", help="also time `make test` in the last clone")
    f.add_argument("--keep", action="store_true", help="keep each clone's .venv (removed after its run)")
    args = parser.parse_args()
    result = {"throughput": throughput, "pipeline": pipeline, "fresh": fresh}[args.bench](args)
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
