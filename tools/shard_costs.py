"""Write the per-submission costs that balance the check shards from a finished run:

python tools/shard_costs.py RESULTS_DIR [--out src/rescore/corpus/shard_costs.json]
python tools/shard_costs.py RESULTS_DIR --from-logs [--snakemake-log FILE]
                            [--out src/rescore/corpus/shard_costs.cuda.json] [--merge]
python tools/shard_costs.py RESULTS_DIR --from-phases [--out src/rescore/corpus/shard_costs.cuda.json] [--merge]
python tools/shard_costs.py RESULTS_DIR --memory [--out src/rescore/corpus/shard_memory.cuda.json] [--merge]

From the cases table (the default), a submission's cost is the seconds its candidate calls took
(`wall_ms`) plus 5 ms per executed case for the harness's own work. `--from-logs` reads the check
shards' logs instead (a GPU lease may bring back logs and tables but not the cases): a submission
costs the seconds between its line and the line before it in its shard's log, which is the shard's
start line, or for logs written before there was one, the shard job's start in Snakemake's log
(`--snakemake-log`). Those seconds are everything the shard spent on it, Triton's JIT included;
`--from-phases` reads the same from the phase table (its `elapsed_s`, the build included, less its
waits for the device's memory and lock: those depend on what ran beside it), which a run cut short
also has as its shards' phase files. Only
the balance between shards depends on these numbers, never a result. Its output is package data,
committed: the check shards of every later run read it (`engine/shards.py`).

`--memory` writes, instead of seconds, the GiB of device memory each submission of a GPU run reserved at
most (the phase table's `reserved_bytes`). A GPU run's check shards read them to tell the heavy ones
(`engine/shards.py`); with `--merge` a submission keeps the larger figure.

`--merge` keeps the submissions the file at `--out` already lists and this run did not time (another
dump's, another run's). `--replay SHARDS SLOTS` also replays the measured seconds through the assignment each cost file
would give (`--before`, by default the file at `--out` as it was, and the new costs), shards
started longest expected first on SLOTS cores, and prints the slowest shard and the stage's length.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
from pathlib import Path

import pandas as pd

from rescore.engine.phase_log import DEVICE_WAIT, MEMORY_WAIT
from rescore.engine.shards import COSTS, COSTS_CUDA, assign, load_costs, weights
from rescore.model.paths import SHARD_MEMORY_CUDA
from rescore.model.records import submission_from_dict
from rescore.stages import SHARD_LOG_LINE

HARNESS_S_PER_CASE = 0.005
WAITS = (MEMORY_WAIT, DEVICE_WAIT)  # seconds a submission spent waiting for the others: not its cost
_JOB = re.compile(r"\[(\w{3} \w{3} +\d+ [\d:]+ \d{4})\]\n(?:local)?rule check_shard:"
                  r".*?wildcards: dump=(\S+?), shard=(\d+)", re.S)


def from_cases(results: Path) -> dict[str, float]:
    cases = pd.read_parquet(results / "tables" / "cases.parquet", columns=["submission_id", "wall_ms", "outcome"])
    executed = cases[cases["outcome"] != "skipped"].groupby("submission_id")
    cost = executed["wall_ms"].sum().div(1000) + HARNESS_S_PER_CASE * executed.size()
    # A submission that never ran here (CUDA C on a CPU) is left out: it counts as the median cost
    # (a cost of 0 piled every CUDA C submission into the same few shards of a GPU run).
    return {str(k): float(v) for k, v in cost.items()}


def from_phases(results: Path) -> dict[str, float]:
    """submission_id -> its elapsed seconds in its shard (build and restarts included) less its waits
    for the device's memory and lock (`memory_wait`, `device_wait`), from the phase table, or the check
    shards' phase files of a run cut short. Those waits are what ran beside it, which the assignment
    these costs make changes: learned with them, the costs of a run repeat its own schedule's waits
    (375bac1's, from the H100 run at 2481fcc, counted 2,733 s of waits)."""
    rows = _phase_rows(results, ["submission_id", "phase", "seconds", "elapsed_s"])
    elapsed = rows.groupby("submission_id")["elapsed_s"].first()
    waits = rows[rows["phase"].isin(WAITS)].groupby("submission_id")["seconds"].sum()
    own = elapsed.sub(waits, fill_value=0.0).clip(lower=0.0)
    return {str(k): float(v) for k, v in own.items()}


def memory_from_phases(results: Path) -> dict[str, float]:
    """submission_id -> GiB its requests reserved at most (the phase table's `reserved_bytes`), for those
    that reserved any."""
    rows = _phase_rows(results, ["submission_id", "reserved_bytes"])
    most = rows.groupby("submission_id")["reserved_bytes"].max()
    return {str(k): float(v) / 2**30 for k, v in most.items() if v > 0}


def _phase_rows(results: Path, columns: list[str]) -> pd.DataFrame:
    table = results / "tables" / "phases.parquet"
    paths = [table] if table.exists() else sorted((results / "phases").glob("*/shard-*.parquet"))
    frames = [pd.read_parquet(p, columns=columns) for p in paths]
    if not frames:
        raise SystemExit(f"{results}: no phase table (tables/phases.parquet or phases/*/shard-*.parquet)")
    return pd.concat(frames)


def shard_starts(snakemake_log: Path) -> dict[tuple[str, str], dt.datetime]:
    """(dump, shard) -> when Snakemake started that check job."""
    text = snakemake_log.read_text()
    return {(m.group(2), m.group(3)): dt.datetime.strptime(re.sub(" +", " ", m.group(1)), "%a %b %d %H:%M:%S %Y")
            for m in _JOB.finditer(text)}


def from_logs(results: Path, snakemake_log: Path | None) -> dict[str, float]:
    ids = {}
    for manifest in (results / "ingest").glob("*/manifest.json"):
        subs = map(submission_from_dict, json.loads(manifest.read_text()))
        ids.update({s.name: s.submission_id for s in subs})
    starts = shard_starts(snakemake_log) if snakemake_log else {}
    cost: dict[str, float] = {}
    for log in sorted((results / "logs" / "check").glob("*/shard-*.log")):
        previous = starts.get((log.parent.name, log.stem.split("-")[1]))
        for line in log.read_text().splitlines():
            m = SHARD_LOG_LINE.match(line)
            if not m:
                continue
            when = dt.datetime.strptime(m["at"], "%Y-%m-%d %H:%M:%S,%f")
            if m["name"] and previous is not None and m["name"] in ids:
                cost[ids[m["name"]]] = max(0.0, (when - previous).total_seconds())
            previous = when
    return cost


def replay(measured: dict[str, float], costs: dict[str, float], shards: int, slots: int) -> tuple[float, float]:
    """(slowest shard, stage length) when `costs` assign the shards and `measured` is what each
    submission takes; shards start as cores free up, the longest expected first (their Snakemake
    priority, `shards.shard_priority`)."""
    import heapq

    where = assign(list(measured), shards, costs)
    expected = weights(list(measured), costs)
    load, planned = [0.0] * shards, [0.0] * shards
    for sid, seconds in measured.items():
        load[where[sid]] += seconds
        planned[where[sid]] += expected[sid]
    free = [0.0] * slots
    end = 0.0
    for seconds in (load[k] for k in sorted(range(shards), key=lambda k: (-planned[k], k))):
        start = heapq.heappop(free)
        heapq.heappush(free, start + seconds)
        end = max(end, start + seconds)
    return max(load), end


def write(out: Path, found: dict[str, float], merge: bool, digits: int, keep_larger: bool = False) -> dict[str, float]:
    """Write `found` to `out` (with `merge`, beside what `out` lists and `found` does not, or where
    `keep_larger`, the larger of the two); returns what was written."""
    kept = load_costs(out) if merge else {}
    doc = {**kept, **{k: max(v, kept.get(k, v)) if keep_larger else v for k, v in found.items()}}
    doc = {k: round(v, digits) for k, v in sorted(doc.items())}
    out.write_text(json.dumps(doc, indent=0, sort_keys=True) + "\n")
    return doc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results")
    parser.add_argument("--from-logs", action="store_true", help="time submissions from the shard logs")
    parser.add_argument("--from-phases", action="store_true", help="time submissions from the phase table")
    parser.add_argument("--memory", action="store_true", help="write each submission's device memory (GiB) instead")
    parser.add_argument("--snakemake-log", help="Snakemake's output, for the shard start times")
    parser.add_argument("--out", help=f"default: {COSTS}, with --from-logs {COSTS_CUDA} (a GPU run's logs), "
                                      f"with --memory {SHARD_MEMORY_CUDA}")
    parser.add_argument("--replay", nargs=2, type=int, metavar=("SHARDS", "SLOTS"))
    parser.add_argument("--before", help="the cost file to replay against (default: --out)")
    parser.add_argument("--merge", action="store_true", help="keep what --out lists and this run did not time")
    args = parser.parse_args()
    results = Path(args.results)
    if args.memory:
        args.out = args.out or str(SHARD_MEMORY_CUDA)
        doc = write(Path(args.out), memory_from_phases(results), args.merge, digits=2, keep_larger=True)
        print(f"{args.out}: {len(doc)} submissions, the largest {max(doc.values(), default=0):.2f} GiB")
        return
    args.out = args.out or str(COSTS_CUDA if args.from_logs or args.from_phases else COSTS)
    if args.from_phases:
        cost = from_phases(results)
    elif args.from_logs:
        cost = from_logs(results, Path(args.snakemake_log) if args.snakemake_log else None)
    else:
        cost = from_cases(results)
    if args.replay:
        for label, costs in (("before", load_costs(Path(args.before or args.out))), ("after", cost)):
            slowest, stage = replay(cost, costs, *args.replay)
            print(f"{label}: slowest shard {slowest:.1f} s, check stage {stage:.1f} s")
    doc = write(Path(args.out), cost, args.merge, digits=1)
    total, largest = sum(doc.values()), max(doc.values())
    print(f"{args.out}: {len(doc)} submissions, {total:.0f} s in all, the largest {largest:.0f} s")


if __name__ == "__main__":
    main()
