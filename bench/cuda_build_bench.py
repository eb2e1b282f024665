"""Cold vs warm build time of one dump's CUDA (load_inline) submissions (measured, not asserted).

  python bench/cuda_build_bench.py --dump NAME [--config config/config.yaml] [--jobs 16] [--cache DIR]

Builds every distinct CUDA source of the dump into a fresh cache on every core (cold), then again
(warm: nothing should compile), and prints a JSON report: wall time of each phase, the count of each
build status (loaded, compile_failed, ...), median and max seconds per build that loaded. Run it on
the GPU machine: it needs nvcc and torch with CUDA, and builds for the GPU it sees
(TORCH_CUDA_ARCH_LIST overrides).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import yaml

from rescore.engine.cuda_build import prebuild
from rescore.ingest import read_dump
from rescore.model.builds import BuildStatus
from rescore.model.records import Submission


def bench(subs: list[Submission], jobs: int | None = None, timeout_s: float = 1800.0, root: str | None = None) -> dict:
    """Cold then warm prebuild of these submissions in a fresh cache: what the cache saves."""
    folder = Path(root or tempfile.mkdtemp(prefix="rescore-cuda-bench-"))
    report: dict = {
        "cache": str(folder),
        "cores": os.cpu_count(),
        "jobs": jobs or os.cpu_count(),
        "cuda_submissions": sum(s.language == "cuda" for s in subs),
        "distinct_sources": len({s.source for s in subs if s.language == "cuda"}),
    }
    for phase in ("cold", "warm"):
        start = time.perf_counter()
        df = prebuild(subs, "cuda", folder, jobs, timeout_s)
        per = df.drop_duplicates("source_hash")
        built = per[(per["status"] == BuildStatus.LOADED) & ~per["cached"]]["seconds"]  # compiled and imported
        report[phase] = {
            "wall_s": round(time.perf_counter() - start, 2),
            "status": {str(k): int(v) for k, v in per["status"].value_counts().items()},
            "compiled": int((~per["cached"] & (per["status"] != "skipped")).sum()),
            "build_s_median": round(float(built.median()), 2) if len(built) else None,
            "build_s_max": round(float(built.max()), 2) if len(built) else None,
        }
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="cold vs warm prebuild time of one dump's CUDA submissions")
    parser.add_argument("--config", default="config/config.yaml")
    parser.add_argument("--dump", required=True, help="a dump name under `dumps:` in the config")
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--cache", default=None, help="cache folder (default: a fresh temporary folder)")
    parser.add_argument("--timeout", type=float, default=1800.0)
    args = parser.parse_args(argv)
    spec = yaml.safe_load(Path(args.config).read_text())["dumps"][args.dump]
    report = bench(read_dump(args.dump, spec), args.jobs, args.timeout, args.cache)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
