"""Where a fuzz case's time goes: the harness's phases timed in-process, per case, for some corpus
entries on one device.

python bench/case_phases.py [--device cpu|cuda] [--cases 32] [--budget N] [--profile N] relu_triton ...
python bench/case_phases.py --manifest results/ingest/cudal1/manifest.json level1/task14 ...

Entries are the built-in corpus's, or with `--manifest` a dump's (its ingest manifest). Runs the
Executor the way a worker does (armed: the harness's snapshots are checked after every
candidate call), timing its phases with a `worker.phases.PhaseTimer`, and prints, per entry,
milliseconds per case in total and in each phase. Phases nest (`call` runs inside `rerun`, `police`
inside `call`), so they do not add up to the total.
With `--profile N` it also runs the cases under cProfile and prints the N functions with the most
time of their own (SORT=cumulative in the environment: with the most time under them).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("entries", nargs="+")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--cases", type=int, default=32)
    parser.add_argument("--budget", type=int, default=0, help="0: the device's default")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--profile", type=int, default=0, help="print the N functions with most own time")
    parser.add_argument("--manifest", help="take the entries from this dump's ingest manifest")
    parser.add_argument("--strategy", default="default")
    args = parser.parse_args()
    if args.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    from rescore.corpus.catalog import load_corpus
    from rescore.engine.runner import RunConfig
    from rescore.model.schema import largest_numel
    from rescore.worker.executor import Executor
    from rescore.worker.loop import poison_fresh_memory
    from rescore.worker.phases import PhaseTimer
    from rescore.worker.protocol import job_of

    budget = args.budget or RunConfig(device=args.device).budget
    if args.device == "cuda":
        budget = args.budget or 1 << 20
    if args.manifest:
        from rescore.model.records import read_manifests

        subs = {s.name: s for s in read_manifests([args.manifest])}
    else:
        subs = {s.name: s for s in load_corpus()}
    poison_fresh_memory()
    timer = PhaseTimer()
    executor = Executor(args.device, budget, phases=timer)
    executor.arm(None)
    for entry in args.entries:
        executor.load(job_of(subs[entry]))
        executor.run_case(args.strategy, 1, args.dtype, None)  # warm-up: JIT compilation stays out
        timer.take()
        start = time.perf_counter()
        outcomes: dict[str, int] = {}
        elements = 0
        for i in range(args.cases):
            row = executor.run_case(args.strategy, 1000 + i, args.dtype, None)
            outcomes[row["outcome"]] = outcomes.get(row["outcome"], 0) + 1
            elements += largest_numel(json.loads(row.get("shapes") or "[]"))
        total = time.perf_counter() - start
        if args.profile:
            harness, executor.guard.harness = executor.guard.harness, None  # its restore would switch the profiler off
            profiler = cProfile.Profile()
            profiler.enable()
            for i in range(args.cases):
                executor.run_case(args.strategy, 1000 + i, args.dtype, None)
            profiler.disable()
            executor.guard.harness = harness
            pstats.Stats(profiler).sort_stats(os.environ.get("SORT","tottime")).print_stats(args.profile)
        print(json.dumps({
            "entry": entry, "device": args.device, "budget": budget, "cases": args.cases, "outcomes": outcomes,
            "mean_largest_input": round(elements / args.cases),
            "ms_per_case": round(1e3 * total / args.cases, 2),
            "phases_ms_per_case": {
                k: round(1e3 * v / args.cases, 2) for k, v in sorted(timer.spent.items(), key=lambda kv: -kv[1])
            },
            "table_phases_ms_per_case": {
                k: round(1e3 * v / args.cases, 2) for k, v in sorted(timer.by_category.items(), key=lambda kv: -kv[1])
            },
        }), flush=True)


if __name__ == "__main__":
    main()
