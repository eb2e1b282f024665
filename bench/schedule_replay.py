"""Replay a GPU run's check stage under other rules for which check shards Snakemake may start together:

python bench/schedule_replay.py RESULTS_DIR [--cores 16] [--usable-gib 71.7] [--memory FILE] [--shards N]

Each check shard takes the seconds its log says it took in that run (`shard K: done in S s`), each
degenerate job the span of its log; Snakemake's MILP choice (the most priority, then the most jobs,
within the free cores and resources) picks what starts whenever a job ends, the degenerate jobs first
(in the runs that had them as jobs of their own, up to 071391d) and the shards by their priority
(`shards.shard_priority`: the expected seconds of their submissions, by the GPU costs). It prints when
the last shard ends under each rule:

  none     nothing held back;
  heavy    at most HEAVY_SHARE heavy shards at once (`shards.shard_is_heavy`: the rule the workflow uses);
  memory   each shard asks for its heaviest submission's reservation, against the usable memory.

The replay keeps each shard's measured seconds whatever runs beside it, so it shows what an order
costs (a shard kept waiting to the end), not what sharing the device costs: that only a GPU run
measures. The shards, their submissions and the memory come from the run's phase table and
`--memory` (default: the package's `shard_memory.cuda.json`).

Then it deals the run's submissions out again as `shards.assign` does now, the heavy submissions
apart (each in a shard of its own, or packed into few shards: `shards.fit_alone`) and as any other
(as the run at ee1a59a was dealt), and replays both under the heavy rule. A dealt shard's seconds are
modelled from its submissions' own in the run: their elapsed time less their builds, or their builds
where those took longer (a shard builds in a thread of its own beside its other submissions), plus
the run's median shard overhead against that sum; the model's error on the run's own shards is
printed with it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
from pathlib import Path

import pandas as pd
import pulp

from rescore.engine.shards import (
    COLD_BUILD_S,
    COSTS_CUDA,
    HEAVY_SHARE,
    assign,
    heavy_submissions,
    is_heavy,
    load_costs,
    load_memory,
    weights,
)
from rescore.engine.sharing import USABLE

_DONE = re.compile(r"done in ([\d.]+) s")
# The Snakemake priority the degenerate-problems jobs had, above every check shard's, in the runs made
# while they were jobs of their own (before the check shards ran the null candidates, after 071391d).
DEGENERATE_PRIORITY = 1_000_000
_AT = "%Y-%m-%d %H:%M:%S,%f"


def submission_seconds(results: Path) -> pd.DataFrame:
    """One row per submission of the run: dump, shard, submission_id, `run` (its elapsed seconds less its
    build) and `build` (its build's seconds), from the phase table."""
    phases = pd.read_parquet(results / "tables" / "phases.parquet",
                             columns=["dump", "shard", "submission_id", "phase", "seconds", "elapsed_s"])
    keys = ["dump", "shard", "submission_id"]
    subs = phases.drop_duplicates(keys)[[*keys, "elapsed_s"]]
    build = phases[phases["phase"] == "build"].groupby(keys)["seconds"].sum().rename("build")
    subs = subs.join(build, on=keys).fillna({"build": 0.0})
    return subs.assign(run=subs["elapsed_s"] - subs["build"]).drop(columns="elapsed_s")


def run_weights(subs: pd.DataFrame) -> dict[str, float]:
    """submission_id -> expected seconds, as the run's assignment weighed it (`shards.shard_assignment`):
    its cost over its dump, and a cold build for each submission that built in the run."""
    costs = load_costs(COSTS_CUDA)
    weight: dict[str, float] = {}
    for _, rows in subs.groupby("dump"):
        weight.update(weights(list(rows["submission_id"]), costs))
    for sid in subs.loc[subs["build"] > 0, "submission_id"]:
        weight[sid] += COLD_BUILD_S
    return weight


def shard_jobs(results: Path, memory: dict[str, float],
               subs: pd.DataFrame | None = None) -> dict[tuple[str, int], dict]:
    """(dump, shard) -> its measured seconds, priority and heaviest submission's GiB (`subs`: the run's
    `submission_seconds`, where the caller has them)."""
    subs = submission_seconds(results) if subs is None else subs
    weight = run_weights(subs)
    jobs = {}
    for (dump, shard), rows in subs.groupby(["dump", "shard"]):
        log = results / "logs" / "check" / dump / f"shard-{shard}.log"
        done = _DONE.search(log.read_text()) if log.exists() else None
        if done is None:
            raise SystemExit(f"{log}: no 'done in' line; replay a run whose check stage finished")
        ids = list(rows["submission_id"])
        jobs[(dump, int(shard))] = {"seconds": float(done[1]), "priority": round(sum(weight[i] for i in ids)),
                                    "gib": max(memory.get(i, 0.0) for i in ids)}
    return jobs


def modelled_seconds(rows: pd.DataFrame) -> float:
    """A shard's seconds from its submissions' own, before its overhead: the builds run beside the rest."""
    return max(float(rows["run"].sum()), float(rows["build"].sum()))


def dealt_jobs(results: Path, memory: dict[str, float], usable_mib: int, apart: bool,
               shards: int | None = None, subs: pd.DataFrame | None = None) -> tuple[dict, float]:
    """(dump, shard) -> modelled seconds, priority and heaviest GiB, with the run's submissions dealt out
    again into `shards` per dump (default: as many as it had; never more than its submissions) as
    `shards.assign` deals them (the heavy submissions apart, or as any other); and the model's mean
    absolute error, in seconds, on the run's own shards (`subs`: the run's `submission_seconds`, where
    the caller has them)."""
    subs = submission_seconds(results) if subs is None else subs
    weight = run_weights(subs)
    measured = shard_jobs(results, memory, subs)
    model = {k: modelled_seconds(rows) for k, rows in subs.groupby(["dump", "shard"])}
    overhead = float(pd.Series([measured[k]["seconds"] - v for k, v in model.items()]).median())
    error = float(pd.Series([abs(measured[k]["seconds"] - v - overhead) for k, v in model.items()]).mean())
    jobs = {}
    for dump, rows in subs.groupby("dump"):
        ids = list(rows["submission_id"])
        heavy = heavy_submissions(ids, usable_mib, memory) if apart else set()
        where = assign(ids, min(shards or int(rows["shard"].nunique()), len(ids)), weight, 1, heavy)
        for shard, members in rows.assign(shard=rows["submission_id"].map(where)).groupby("shard"):
            member_ids = list(members["submission_id"])
            jobs[(dump, int(shard))] = {"seconds": overhead + modelled_seconds(members),
                                        "priority": round(sum(weight[i] for i in member_ids)),
                                        "gib": max(memory.get(i, 0.0) for i in member_ids)}
    return jobs, error


def degenerate_jobs(results: Path) -> dict[tuple[str, int], dict]:
    jobs = {}
    for k, log in enumerate(sorted((results / "logs" / "degenerate").glob("*/shard-*.log"))):
        lines = log.read_text().splitlines()
        if lines:
            span = dt.datetime.strptime(lines[-1][:23], _AT) - dt.datetime.strptime(lines[0][:23], _AT)
            jobs[("degenerate", k)] = {"seconds": span.total_seconds(), "priority": DEGENERATE_PRIORITY, "gib": 0.0}
    return jobs


def replay(jobs: dict, ask: dict, limit: float, cores: int) -> float:
    """Seconds until the last check shard ends when each job asks `ask[job]` of `limit`."""
    ready, running, now, last = set(jobs), {}, 0.0, 0.0
    while ready or running:
        free_cores, free = cores - len(running), limit - sum(ask[j] for j in running)
        fits = sorted((j for j in ready if ask[j] <= free), key=str)
        if fits and free_cores > 0:
            prob = pulp.LpProblem("select", pulp.LpMaximize)
            new = getattr(prob, "add_variable", None) or pulp.LpVariable  # PuLP 3.3's, and older PuLP's
            x = {j: new(f"x{i}", cat="Binary") for i, j in enumerate(fits)}
            prob += 2 * cores * pulp.lpSum(jobs[j]["priority"] * x[j] for j in fits) + pulp.lpSum(x.values())
            prob += pulp.lpSum(x.values()) <= free_cores
            prob += pulp.lpSum(ask[j] * x[j] for j in fits) <= free
            solver = pulp.LpSolverDefault  # the solver Snakemake's scheduler uses by default
            solver.msg = False
            prob.solve(solver)
            for j in fits:
                if x[j].value() > 0.5:
                    running[j] = now + jobs[j]["seconds"]
                    ready.discard(j)
        now = min(running.values())
        for j in [j for j, end in running.items() if end == now]:
            del running[j]
            if j[0] != "degenerate":
                last = now
    return last


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results")
    parser.add_argument("--cores", type=int, default=16)
    parser.add_argument("--usable-gib", type=float, default=USABLE * 81559 / 1024, help="default: an H100's")
    parser.add_argument("--memory", help="submission_id -> GiB (default: the package's shard_memory.cuda.json)")
    parser.add_argument("--shards", type=int, help="deal into this many shards per dump (default: the run's)")
    args = parser.parse_args()
    results = Path(args.results)
    memory = load_memory(Path(args.memory) if args.memory else None)
    subs = submission_seconds(results)
    jobs = {**shard_jobs(results, memory, subs), **degenerate_jobs(results)}
    heavy = {j: int(is_heavy(v["gib"], int(args.usable_gib * 1024))) for j, v in jobs.items()}
    rules = {"none": ({j: 0 for j in jobs}, 1),
             "heavy": (heavy, HEAVY_SHARE),
             "memory": ({j: min(v["gib"], args.usable_gib) for j, v in jobs.items()}, args.usable_gib)}
    shards = sum(1 for j in jobs if j[0] != "degenerate")
    print(f"{results}: {shards} check shards, {len(jobs) - shards} degenerate jobs, {args.cores} cores, "
          f"{sum(heavy.values())} heavy shards")
    for name, (ask, limit) in rules.items():
        print(f"  {name:7s} the last check shard ends at {replay(jobs, ask, limit, args.cores) / 60:.1f} min")
    usable_mib = int(args.usable_gib * 1024)
    for name, apart in (("the heavy submissions as any other", False), ("the heavy submissions apart", True)):
        dealt, error = dealt_jobs(results, memory, usable_mib, apart, args.shards, subs)
        dealt.update(degenerate_jobs(results))
        ask = {j: int(is_heavy(v["gib"], usable_mib)) for j, v in dealt.items()}
        into = f" into {args.shards} shards a dump," if args.shards else ","
        print(f"  heavy, dealt again{into} {name} (modelled shard seconds, {error:.0f} s mean error on the run's "
              f"shards): the last check shard ends at {replay(dealt, ask, HEAVY_SHARE, args.cores) / 60:.1f} min, "
              f"{sum(ask.values())} heavy shards")


if __name__ == "__main__":
    main()
