"""Where a submission's time goes, and how far its elapsed time is from its cases' own.

python bench/phases.py RESULTS_DIR [--top 12] [--out F]
    per phase: total seconds and share of the submissions' elapsed time (results/tables/phases.parquet,
    else results/phases/*/shard-*.parquet); per submission: elapsed over its cases' own time
    (`wall_ms` of its cases), the median and the worst (those read from the results cache counted
    apart: they ran nothing); the cases by outcome and the harness faults
    among them (0 expected: compare two runs' outcomes before their ratios). A results folder made
    before the phase table existed is read from its check shards' logs (elapsed per submission, to the
    second) and its cases.
python bench/phases.py run DUMP [--cores 2] [--shards 2] [--repo DIR] [--filtered-copy] [--work DIR]
    runs the check stage (Snakemake, the CPU's light setting) on one dump in a fresh work folder, then
    summarises it as above. DUMP: `corpus` (the built-in corpus; `corpus=A,B` some of its entries) or
    `cudal1-cpu=FILE.json`: the
    level-1 CUDA-L1 kernels of FILE whose custom_code never names CUDA (the ones a CPU can run), as an
    `entries:` filter on the file (`--filtered-copy`: a filtered copy of the file instead, for code
    that predates the filter). `--repo` runs another checkout's Snakefile and src (a baseline).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from rescore.engine.phase_log import RESULT_CACHE
from rescore.model.outcomes import harness_fault
from rescore.stages import SHARD_LOG_LINE

REPO = Path(__file__).resolve().parent.parent


def cpu_entries(path: Path, level: str = "1") -> list[str]:
    """The level's CUDA-L1 entries whose custom_code never names CUDA: PyTorch a CPU can run."""
    data = json.loads(path.read_text())
    return [f"level{level}/task{e['task_id']}" for e in data[level] if "cuda" not in e["custom_code"].lower()]


def dump_spec(dump: str, work: Path, filtered_copy: bool) -> tuple[str, dict]:
    if dump == "corpus" or dump.startswith("corpus="):
        entries = [e for e in dump.partition("=")[2].split(",") if e]
        return "corpus", {"format": "corpus", **({"entries": entries} if entries else {})}
    name, _, file = dump.partition("=")
    if name != "cudal1-cpu" or not file:
        raise SystemExit(f"unknown dump {dump!r}: corpus or cudal1-cpu=FILE.json")
    entries = cpu_entries(Path(file))
    if not filtered_copy:
        # absolute: the run's working folder is `work`, not where this command was given
        return "cudal1", {"format": "cudal1", "path": str(Path(file).resolve()), "levels": [1], "entries": entries}
    data = json.loads(Path(file).read_text())
    wanted = {int(e.split("task")[1]) for e in entries}
    copy = work / "cudal1-cpu.json"
    copy.write_text(json.dumps({"1": [e for e in data["1"] if int(e["task_id"]) in wanted]}))
    return "cudal1", {"format": "cudal1", "path": str(copy), "levels": [1]}


def run(args: argparse.Namespace) -> dict:
    """The check stage of one dump in a fresh work folder; its wall time and its summary."""
    import yaml

    repo = Path(args.repo).resolve() if args.repo else REPO
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="rescore-phases-"))
    work.mkdir(parents=True, exist_ok=True)
    shutil.copytree(repo / "config", work / "config", dirs_exist_ok=True)
    config = yaml.safe_load((work / "config" / "config.yaml").read_text())
    name, spec = dump_spec(args.dump, work, args.filtered_copy)
    config["dumps"] = {name: spec}
    config["shards"] = args.shards
    config["papers"] = {"dump": name}
    (work / "config" / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    rules = "".join(f.read_text() for f in (repo / "workflow" / "rules").glob("*.smk"))
    target = "results/tables/" + ("phases.parquet" if "results/tables/phases.parquet" in rules else "cases.parquet")
    env = dict(os.environ, PYTHONPATH=str(repo / "src"))
    cmd = ["nice", sys.executable, "-m", "snakemake", "-s", str(repo / "Snakefile"), "-d", str(work),
           "--cores", str(args.cores), target, "results/tables/cases.parquet", "results/failures/shrunk.parquet"]
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    (work / "snakemake.out").write_text(done.stdout + done.stderr)
    out = {"dump": args.dump, "repo": str(repo), "cores": args.cores, "shards": args.shards, "wall_s": round(wall, 1),
           "ok": done.returncode == 0, "results": str(work / "results")}
    if done.returncode != 0:
        out["stderr_tail"] = done.stderr[-2000:]
        return out
    out.update(summary(work / "results", args.top))
    if not out["submissions"]:  # every entry unreadable (the ingest log says why): no figure to quote
        out["ok"] = False
        out["why"] = f"no submission ran: see {work / 'results' / 'logs' / 'ingest'}"
    return out


def log_elapsed(results: Path) -> pd.DataFrame:
    """(dump, name, elapsed_s) per submission from the check shards' logs: the seconds between its
    line and the line before it (the shard's start line for the first)."""
    rows = []
    for log in sorted((results / "logs" / "check").glob("*/shard-*.log")):
        prev = None
        for line in log.read_text().splitlines():
            m = SHARD_LOG_LINE.match(line)
            if not m:
                continue
            stamp = dt.datetime.strptime(m["at"], "%Y-%m-%d %H:%M:%S,%f")
            if m["name"] and prev is not None:
                rows.append({"dump": log.parent.name, "name": m["name"], "elapsed_s": (stamp - prev).total_seconds()})
            prev = stamp
    return pd.DataFrame(rows, columns=["dump", "name", "elapsed_s"])


def phase_table(results: Path) -> pd.DataFrame | None:
    """The phase table of a run (the aggregated one, else the shards'), or None before it existed."""
    table = results / "tables" / "phases.parquet"
    if table.exists():
        return pd.read_parquet(table)
    shards = sorted((results / "phases").glob("*/shard-*.parquet"))
    return pd.concat([pd.read_parquet(s) for s in shards], ignore_index=True) if shards else None


def case_rows(results: Path, columns: list[str]) -> pd.DataFrame:
    """The run's case rows (the cases table, else its check shards'), with those of `columns` it has."""
    table = results / "tables" / "cases.parquet"
    files = [table] if table.exists() else sorted((results / "cases").glob("*/shard-*.parquet"))
    frames = [pd.read_parquet(f) for f in files]
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return df[[c for c in columns if c in df.columns]]


def summary(results: Path, top: int = 12) -> dict:
    """Per phase: total and share; per submission: elapsed over its cases' own time; the cases by
    outcome and how many were harness faults (0 expected); the cases that timed out at their call's
    own limit and those the machine's limit stopped."""
    out: dict = {}
    phases = phase_table(results)
    if phases is not None and len(phases):
        # A submission read from the results cache ran none of its cases here: counted apart, never in a ratio
        stored = set(phases.loc[phases["phase"] == RESULT_CACHE, "submission_id"])
        out["from_results_cache"] = len(stored)
        phases = phases[~phases["submission_id"].isin(stored)]
        frame = (phases.groupby(["dump", "submission_id", "name"], as_index=False)
                 .agg(elapsed_s=("elapsed_s", "first"), case_s=("case_s", "first"), limit_use=("limit_use", "first"))
                 .drop(columns="submission_id"))
        parts = phases.groupby("phase")["seconds"].sum().sort_values(ascending=False)
        total = float(frame["elapsed_s"].sum())
        out["phases"] = {k: {"s": round(float(v), 1), "share": round(float(v) / total, 3) if total else None}
                         for k, v in parts.items()}
        out["limit_use_max"] = round(float(frame["limit_use"].max()), 3)
        if "reserved_bytes" in phases:  # the submissions that held the most device memory (a GPU run)
            held = phases.groupby("name")["reserved_bytes"].first().sort_values(ascending=False)
            out["most_reserved_gib"] = {k: round(int(v) / 2**30, 2) for k, v in held.head(top).items() if v > 0}
        if "peak_bytes" in phases:  # what those submissions' tensors took at most: how pessimistic the reservation was
            peak = phases.groupby("name")["peak_bytes"].first()
            out["their_peak_gib"] = {k: round(int(peak[k]) / 2**30, 2) for k in out.get("most_reserved_gib", {})}
    else:
        frame = log_elapsed(results)
        cases = case_rows(results, ["name", "wall_ms"])
        frame["case_s"] = frame["name"].map(cases.groupby("name")["wall_ms"].sum() / 1e3).fillna(0.0)
    cases = case_rows(results, ["name", "outcome", "reason", "limit_s"])
    if len(cases):
        timeouts = cases[cases["outcome"] == "timeout"]
        limited = timeouts["limit_s"].notna() if "limit_s" in timeouts else pd.Series(False, index=timeouts.index)
        machine = cases["reason"].fillna("").str.contains("the harness's own work", regex=False)
        # rescore's own code raised: any at all, and the run measured a bug, not the code; compare
        # `outcomes` between two runs before their ratios
        faults = sum(map(harness_fault, cases["outcome"], cases["reason"]))
        out.update(outcomes=cases["outcome"].astype(str).value_counts().to_dict(), harness_faults=int(faults),
                   timeouts=int(len(timeouts)), timeouts_at_call_limit=int(limited.sum()),
                   timeouts_by_submission=timeouts.groupby("name").size().to_dict(),
                   machine_limit_skips=int((cases["outcome"].eq("skipped") & machine).sum()))
    frame["ratio"] = frame["elapsed_s"] / frame["case_s"].where(frame["case_s"] > 0)
    elapsed, own = float(frame["elapsed_s"].sum()), float(frame["case_s"].sum())
    out.update(
        submissions=len(frame),
        elapsed_s=round(elapsed, 1),
        case_s=round(own, 1),
        overall_ratio=round(elapsed / own, 2) if own else None,
        median_ratio=round(float(frame["ratio"].median()), 2) if frame["ratio"].notna().any() else None,
        median_elapsed_s=round(float(frame["elapsed_s"].median()), 2),
        median_case_s=round(float(frame["case_s"].median()), 2),
        worst=[{k: (round(v, 2) if isinstance(v, float) else v) for k, v in r.items()}
               for r in frame.sort_values("elapsed_s", ascending=False).head(top).to_dict("records")],
    )
    return out


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "run":
        parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
        parser.add_argument("run")
        parser.add_argument("dump")
        parser.add_argument("--cores", type=int, default=2)
        parser.add_argument("--shards", type=int, default=2)
        parser.add_argument("--repo", help="another checkout (its Snakefile, config and src)")
        parser.add_argument("--filtered-copy", action="store_true")
        parser.add_argument("--work", help="the work folder (default: a fresh temporary one)")
        parser.add_argument("--top", type=int, default=12)
        parser.add_argument("--out")
        args = parser.parse_args()
        result = run(args)
    else:
        parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
        parser.add_argument("results", type=Path)
        parser.add_argument("--top", type=int, default=12)
        parser.add_argument("--out")
        args = parser.parse_args()
        result = summary(args.results, args.top)
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))
    if result.get("ok") is False:
        sys.exit(1)


if __name__ == "__main__":
    main()
