"""The figures of a multi-GPU measurement (scripts/gpu/multi_gpu.sh): both runs' wall times, the
speedup, and each GPU's busy time, written to WORK/multi_gpu.json and WORK/multi_gpu.md.

python scripts/gpu/multi_gpu.py WORK [--one mg1] [--all mgall]

It reads what the steps left in WORK: `driver.log` (`<step> end rc=R wall=W s`), each step's
`smi.csv` (nvidia-smi sampled every SAMPLE_MS: timestamp, index, name, utilization.gpu) and each
check shard's log (`shard K: done in S s on CUDA_VISIBLE_DEVICES=G`, or without the device on one
GPU). A GPU's busy time is the sampled time its utilisation was above zero; its shard time is the
sum of its shards' seconds, and its span the longest of them. A figure that cannot be read is
written as null with the reason, never left out.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
from collections import defaultdict
from datetime import datetime
from pathlib import Path

WALL = re.compile(r"^\S+ (?P<step>\S+) end rc=(?P<rc>-?\d+) wall=(?P<wall>\d+) s")
SHARD = re.compile(r"shard (?P<shard>\d+): done in (?P<seconds>[\d.]+) s(?: on CUDA_VISIBLE_DEVICES=(?P<gpu>\S+))?")


def walls(driver_log: Path) -> dict[str, dict]:
    """step -> {wall_s, rc} of its last `end` line."""
    out: dict[str, dict] = {}
    if driver_log.is_file():
        for line in driver_log.read_text().splitlines():
            m = WALL.match(line)
            if m:
                out[m["step"]] = {"wall_s": int(m["wall"]), "rc": int(m["rc"])}
    return out


def busy_from_smi(csv_path: Path) -> dict[str, dict]:
    """GPU index -> {name, busy_s, sampled_s, mean_util}: the sampled seconds with utilisation above 0."""
    samples: dict[str, list[tuple[datetime, float, str]]] = defaultdict(list)
    if not csv_path.is_file():
        return {}
    for row in csv.reader(csv_path.read_text().splitlines()):
        if len(row) < 4:
            continue
        try:
            when = datetime.strptime(row[0].strip(), "%Y/%m/%d %H:%M:%S.%f")
            util = float(row[3].strip().split()[0])
        except (ValueError, IndexError):
            continue  # a header or a cut-off line
        samples[row[1].strip()].append((when, util, row[2].strip()))
    out = {}
    for index, rows in sorted(samples.items()):
        rows.sort()
        busy = sampled = 0.0
        for (t0, util, _), (t1, _, _) in zip(rows, rows[1:]):
            step = (t1 - t0).total_seconds()
            sampled += step
            busy += step if util > 0 else 0.0
        out[index] = {"name": rows[0][2], "busy_s": round(busy, 1), "sampled_s": round(sampled, 1),
                      "mean_util": round(sum(u for _, u, _ in rows) / len(rows), 1)}
    return out


def shard_times(results: Path) -> dict[str, dict]:
    """GPU (CUDA_VISIBLE_DEVICES, or `0` on one GPU) -> {shards, shard_s, span_s} from the check logs."""
    out: dict[str, dict] = defaultdict(lambda: {"shards": 0, "shard_s": 0.0, "span_s": 0.0})
    for log in sorted(results.glob("logs/check/*/shard-*.log")):
        for m in SHARD.finditer(log.read_text(errors="replace")):
            entry = out[m["gpu"] or "0"]
            entry["shards"] += 1
            entry["shard_s"] = round(entry["shard_s"] + float(m["seconds"]), 1)
            entry["span_s"] = max(entry["span_s"], float(m["seconds"]))
    return dict(out)


def figures(work: Path, one: str = "mg1", every: str = "mgall") -> dict:
    """Every figure of the measurement, as plain data."""
    wall = walls(work / "driver.log")
    runs = {}
    for label, step in (("one_gpu", one), ("all_gpus", every)):
        runs[label] = {
            "step": step,
            "wall_s": wall.get(step, {}).get("wall_s"),
            "rc": wall.get(step, {}).get("rc"),
            "gpus_sampled": busy_from_smi(work / step / "smi.csv"),
            "shards_by_gpu": shard_times(work / step / "results"),
        }
    a, b = runs["one_gpu"]["wall_s"], runs["all_gpus"]["wall_s"]
    speedup = round(a / b, 2) if a and b else None
    machine = (work / "machine.txt").read_text() if (work / "machine.txt").is_file() else None
    return {"runs": runs, "speedup": speedup,
            "speedup_note": None if speedup else "a wall time is missing: see driver.log", "machine": machine}


def markdown(fig: dict) -> str:
    lines = ["# Several GPUs: the same run on one GPU and on all of them (warm)", ""]
    for label, run in fig["runs"].items():
        lines.append(f"- {label.replace('_', ' ')} (step {run['step']}): wall {run['wall_s']} s, rc {run['rc']}")
    lines += [f"- speedup: {fig['speedup'] if fig['speedup'] else fig['speedup_note']}", "",
              "| run | GPU | model | busy s (nvidia-smi) | sampled s | mean util % | shards | shard s "
              "| longest shard s |",
              "|---|---|---|---|---|---|---|---|---|"]
    for label, run in fig["runs"].items():
        gpus = sorted(set(run["gpus_sampled"]) | set(run["shards_by_gpu"]))
        for g in gpus:
            s = run["gpus_sampled"].get(g, {})
            t = run["shards_by_gpu"].get(g, {})
            lines.append(f"| {label} | {g} | {s.get('name', '')} | {s.get('busy_s', '')} | {s.get('sampled_s', '')} | "
                         f"{s.get('mean_util', '')} | {t.get('shards', 0)} | {t.get('shard_s', '')} | "
                         f"{t.get('span_s', '')} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("work", type=Path)
    ap.add_argument("--one", default="mg1")
    ap.add_argument("--all", dest="every", default="mgall")
    args = ap.parse_args(argv)
    fig = figures(args.work, args.one, args.every)
    (args.work / "multi_gpu.json").write_text(json.dumps(fig, indent=1))
    (args.work / "multi_gpu.md").write_text(markdown(fig))
    sys.stdout.write(markdown(fig))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
