"""Does a setting still flag every buggy corpus kernel? Measured on this machine, cheaply.

python tools/plan_coverage.py [--configfile config/config.yaml ...] [--compare config/config.full.yaml]
                              [--workers 2] [--only NAME ...] [--out FILE]

The config files are merged as Snakemake merges them (the first is the base; on the CPU its `light`
block applies). Each buggy corpus submission is run as a check shard runs it (loaded, the fixed check,
then its planned fuzz cases in plan order, in a sandboxed worker) until its first flagged case, so a
flagged kernel costs only the cases up to its first failure, and a kernel that is not flagged runs its
whole plan. With `--compare`, each kernel the first setting does not flag is run again under the other
setting's plan: flagged there means the lighter setting lost it, not flagged means no setting flags it
on this device (the GPU-only classes, races and 32-bit offset overflow, under the interpreter).

Prints one JSON line per kernel and a summary; `--out` also writes everything as JSON.
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent


def load_config(paths: list[str]) -> dict:
    from rescore.model.settings import merge

    config: dict = {}
    for path in paths:
        config = merge(config, yaml.safe_load(Path(path).read_text()) or {})
    return config


def first_flag(worker, sub, cfg, cases: list[dict]) -> dict:
    """Run `sub` as `runner.run_submission` does, up to its first flagged fuzz case."""
    from rescore.engine.runner import job_of
    from rescore.engine.sandbox import run_with_retry
    from rescore.model.outcomes import FLAGGING

    start = time.perf_counter()
    load = run_with_retry(worker, ("load", job_of(sub)), cfg.load_timeout_s)
    worker.job = job_of(sub)
    if load.get("outcome") in ("crash", "timeout"):
        return {"flagged": load["outcome"] in FLAGGING, "cases_run": 0, "first": None,
                "note": f"load: {load.get('reason')}", "seconds": time.perf_counter() - start}
    run_with_retry(worker, ("fixed", cfg.fixed_profile, cfg.fixed_dtype), cfg.timeout_s)  # as a shard does
    outcomes: dict[str, int] = {}
    for n, case in enumerate(cases, 1):
        msg = ("case", {"strategy": case["strategy"], "seed": case["seed"], "dtype": case["dtype"], "override": None})
        row = run_with_retry(worker, msg, cfg.timeout_s)
        outcomes[row["outcome"]] = outcomes.get(row["outcome"], 0) + 1
        if row["outcome"] in FLAGGING:
            first = {k: case[k] for k in ("strategy", "dtype", "case_index", "purpose")}
            return {"flagged": True, "cases_run": n, "first": dict(first, outcome=row["outcome"]),
                    "seconds": time.perf_counter() - start}
    return {"flagged": False, "cases_run": len(cases), "first": None, "outcomes": outcomes,
            "seconds": time.perf_counter() - start}


def coverage(subs: list, cfg, workers: int, on_result) -> list[dict]:
    """`first_flag` for every submission under `cfg`'s plan, `workers` sandboxed workers at once."""
    from rescore.engine.runner import plan_cases
    from rescore.engine.sandbox import Worker

    chunks = [subs[i::workers] for i in range(workers)]

    def work(chunk: list) -> list[dict]:
        worker = Worker(cfg.device, cfg.budget)
        out = []
        try:
            for sub in chunk:
                plan = [c for c in plan_cases(sub, cfg) if c["purpose"] == "evaluation"]
                res = dict(first_flag(worker, sub, cfg, plan), name=sub.name, bug_class=sub.bug_class,
                           planned=len(plan), gpu_only_trigger=bool((sub.trigger or {}).get("device") == "cuda"))
                on_result(res)
                out.append(res)
        finally:
            worker.stop()
        return out

    with ThreadPoolExecutor(workers) as pool:
        return [r for part in pool.map(work, chunks) for r in part]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configfile", nargs="+", default=[str(REPO / "config" / "config.yaml")])
    parser.add_argument("--compare", nargs="*", default=[], help="config files merged over the first setting's")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--only", nargs="*", default=[], help="these corpus entries only")
    parser.add_argument("--out")
    args = parser.parse_args()
    from rescore.corpus.catalog import load_corpus
    from rescore.stages import run_config

    config = load_config(args.configfile)
    cfg = run_config(config)
    subs = [s for s in load_corpus() if s.label == "buggy" and s.language != "cuda"]
    if args.only:
        subs = [s for s in subs if s.name in args.only]
    skipped_cuda = [s.name for s in load_corpus() if s.label == "buggy" and s.language == "cuda"]

    def show(res: dict) -> None:
        print(json.dumps(res, default=str), flush=True)

    start = time.perf_counter()
    results = coverage(subs, cfg, args.workers, show)
    missed = [r for r in results if not r["flagged"]]
    summary = {
        "setting": args.configfile,
        "device": cfg.device,
        "buggy_kernels": len(results),
        "flagged": len(results) - len(missed),
        "not_flagged": [r["name"] for r in missed],
        "not_flagged_gpu_only_trigger": [r["name"] for r in missed if r["gpu_only_trigger"]],
        "cases_run": sum(r["cases_run"] for r in results),
        "seconds": round(time.perf_counter() - start, 1),
        "cuda_c_not_run_here": len(skipped_cuda) if cfg.device == "cpu" else 0,
    }
    if args.compare and missed:
        other = run_config(load_config(args.configfile + args.compare))
        again = coverage([s for s in subs if s.name in set(summary["not_flagged"])], other, args.workers, show)
        summary["compare"] = args.compare
        summary["flagged_only_by_compare"] = [r["name"] for r in again if r["flagged"]]
        summary["flagged_by_neither"] = [r["name"] for r in again if not r["flagged"]]
        results += [dict(r, setting="compare") for r in again]
    print(json.dumps(summary, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps({"summary": summary, "kernels": results}, indent=2, default=str))


if __name__ == "__main__":
    main()
