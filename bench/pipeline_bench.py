"""Speed targets, measured (not asserted by tests).

python bench/pipeline_bench.py throughput [--device cuda] [--workers 8] [--cases 400] [--entry relu_triton]
    fuzz cases per second for one kernel, float64 reference included, several workers at once
    (the H200 target: >= 500 cases/s for an elementwise kernel at sizes up to 1M elements)
python bench/pipeline_bench.py pipeline [--cores 8] [--profile local] [--snakemake-args "..."]
    wall time of `snakemake --cores N all` from a clean results folder (targets: CPU < 15 min, H200 < 3 min)
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
    from rescore.inputs.seeds import case_seed
    from rescore.runner import job_of
    from rescore.sandbox import Worker, run_with_retry

    sub = next(s for s in load_corpus() if s.name == args.entry)
    budget = args.budget

    def work(w_index: int) -> tuple[int, float, dict]:
        worker = Worker(args.device, budget)
        counts: dict[str, int] = {}
        try:
            run_with_retry(worker, ("load", job_of(sub)), 600)
            worker.job = job_of(sub)
            # warm-up: module import and JIT compilation stay out of the numbers
            run_with_retry(worker, ("case", {"strategy": "default", "seed": 1, "dtype": "float32"}), 600)
            start = time.perf_counter()
            n = args.cases // args.workers
            for i in range(n):
                seed = case_seed(0, sub.problem.problem_id, "default", w_index * n + i)
                row = run_with_retry(worker, ("case", {"strategy": "default", "seed": seed, "dtype": args.dtype}), 600)
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
    return out


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
    p.add_argument("--snakemake-args", default="", help='more snakemake options, e.g. "--set-threads cuda_prebuild=16"')
    args = parser.parse_args()
    result = throughput(args) if args.bench == "throughput" else pipeline(args)
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
