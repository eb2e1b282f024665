"""Where a fuzz case's time goes: the harness's phases timed in-process, per case, for some corpus
entries on one device.

python bench/case_phases.py [--device cpu|cuda] [--cases 32] [--budget N] [--profile N] relu_triton ...

Runs the Executor the way a worker does (armed: the harness's snapshots are checked after every
candidate call) and prints, per entry, milliseconds per case in total and in each phase. Phases nest
(`_call` runs inside `_rerun`, `digest` inside `_run_spec`), so they do not add up to the total.
With `--profile N` it also runs the cases under cProfile and prints the N functions with the most
time of their own.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import inspect
import json
import os
import pstats
import time

PHASES = ["draw", "make_inputs", "_reference", "_lowp", "_candidate_inputs", "_decoy_values", "_scrub",
          "_call", "_police", "_judge", "_rerun", "_judge_rerun"]
FUNCTIONS = ["digest", "inputs_hash", "_snapshot", "output_findings", "kernel_findings"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("entries", nargs="+")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--cases", type=int, default=32)
    parser.add_argument("--budget", type=int, default=0, help="0: the device's default")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--profile", type=int, default=0, help="print the N functions with most own time")
    args = parser.parse_args()
    if args.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    import rescore.worker.executor as ex
    from rescore.corpus.catalog import load_corpus
    from rescore.engine.runner import RunConfig
    from rescore.model.schema import largest_numel
    from rescore.worker.protocol import job_of

    spent: dict[str, float] = {}

    def timed(owner, name: str) -> None:
        original = getattr(owner, name)

        @functools.wraps(original)
        def wrapper(*a, **k):
            t = time.perf_counter()
            try:
                return original(*a, **k)
            finally:
                spent[name] = spent.get(name, 0.0) + time.perf_counter() - t

        static = isinstance(inspect.getattr_static(owner, name), staticmethod)
        setattr(owner, name, staticmethod(wrapper) if static else wrapper)

    for name in PHASES:
        if hasattr(ex.Executor, name):
            timed(ex.Executor, name)
    for name in FUNCTIONS:
        if hasattr(ex, name):
            timed(ex, name)
    budget = args.budget or RunConfig(device=args.device).budget
    if args.device == "cuda":
        budget = args.budget or 1 << 20
    subs = {s.name: s for s in load_corpus()}
    ex.poison_fresh_memory()
    executor = ex.Executor(args.device, budget)
    executor.arm(None)
    for entry in args.entries:
        executor.load(job_of(subs[entry]))
        executor.run_case("default", 1, args.dtype, None)  # warm-up: JIT compilation stays out
        spent.clear()
        start = time.perf_counter()
        outcomes: dict[str, int] = {}
        elements = 0
        for i in range(args.cases):
            row = executor.run_case("default", 1000 + i, args.dtype, None)
            outcomes[row["outcome"]] = outcomes.get(row["outcome"], 0) + 1
            elements += largest_numel(json.loads(row.get("shapes") or "[]"))
        total = time.perf_counter() - start
        if args.profile:
            harness, executor.guard.harness = executor.guard.harness, None  # its restore would switch the profiler off
            profiler = cProfile.Profile()
            profiler.enable()
            for i in range(args.cases):
                executor.run_case("default", 1000 + i, args.dtype, None)
            profiler.disable()
            executor.guard.harness = harness
            pstats.Stats(profiler).sort_stats("tottime").print_stats(args.profile)
        print(json.dumps({
            "entry": entry, "device": args.device, "budget": budget, "cases": args.cases, "outcomes": outcomes,
            "mean_largest_input": round(elements / args.cases),
            "ms_per_case": round(1e3 * total / args.cases, 2),
            "phases_ms_per_case": {
                k: round(1e3 * v / args.cases, 2) for k, v in sorted(spent.items(), key=lambda kv: -kv[1])
            },
        }), flush=True)


if __name__ == "__main__":
    main()
