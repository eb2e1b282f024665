"""Load bench: a generated dump of N tiny submissions through the runner, in one sandboxed worker
(as one shard of the pipeline runs them), reporting wall time and the peak resident memory of the
parent and of the worker. Usage: `python bench/load_bench.py [--n 1000] [--cases 2] [--json OUT]`.

Most submissions are PyTorch-only and cheap; one in ten is wrong (a mismatch), one in fifty is a
Triton kernel (interpreted on the CPU). Memory must stay bounded: the parent keeps only rows, and
the worker forgets each submission's modules (and is replaced every RESCORE_WORKER_MAX_LOADS loads).
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from rescore.engine.runner import RunConfig, run_submission
from rescore.engine.sandbox import Worker
from rescore.model.records import Problem, Submission
from rescore.model.tables import write_parquet

PROBLEM = """import torch
import torch.nn as nn

batch_size = 4
dim = 64


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2.0


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
"""

TORCH = """import torch
import torch.nn as nn

# submission {i}


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.clamp(x, min=0) * {scale}
"""

TRITON = """import torch
import torch.nn as nn
import triton
import triton.language as tl

# submission {i}


@triton.jit
def relu2(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, tl.where(x > 0, x, 0.0) * 2.0, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        relu2[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)
        return out
"""


def generate(folder: Path, n: int) -> list[Submission]:
    """N submissions of one tiny problem, each a file of its own (distinct content, distinct id)."""
    problem_path = folder / "problem.py"
    problem_path.write_text(PROBLEM)
    problem = Problem(problem_id="bench/relu2", source=PROBLEM, path=str(problem_path), op="relu2")
    subs = []
    for i in range(n):
        triton = i % 50 == 49
        source = TRITON.format(i=i) if triton else TORCH.format(i=i, scale="2.5" if i % 10 == 9 else "2.0")
        path = folder / f"kernel_{i:05d}.py"
        path.write_text(source)
        subs.append(Submission(name=f"k{i:05d}", problem=problem, source=source, path=str(path),
                               dump="bench", language="triton" if triton else "torch", dtypes=("float32",)))
    return subs


def _vm_hwm() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--cases", type=int, default=2, help="fuzz cases per submission (plus the fixed check)")
    parser.add_argument("--json", help="write the summary here too")
    args = parser.parse_args(argv)
    cfg = RunConfig(strategies={"default": args.cases}, dtypes=("float32",), timeout_s=60, load_timeout_s=300)
    with tempfile.TemporaryDirectory(prefix="rescore-bench-") as tmp:
        subs = generate(Path(tmp), args.n)
        worker = Worker("cpu", cfg.budget, str(Path(tmp) / "logs"))
        rows: list[dict] = []
        start = time.perf_counter()
        progress = []
        try:
            for i, sub in enumerate(subs, 1):
                rows += run_submission(sub, cfg, worker)
                if i % max(1, args.n // 10) == 0:
                    progress.append({"done": i, "wall_s": round(time.perf_counter() - start, 1),
                                     "parent_rss_mb": round(_vm_hwm() / 2**20), "worker_rss_mb":
                                     round(worker.last_rss / 2**20)})
                    print(json.dumps(progress[-1]), file=sys.stderr, flush=True)
        finally:
            worker.stop()
        wall = time.perf_counter() - start
        write_parquet(pd.DataFrame(rows), Path(tmp) / "cases.parquet", "cases")
        outcomes = pd.Series([r["outcome"] for r in rows]).value_counts().to_dict()
    summary = {
        "submissions": args.n,
        "rows": len(rows),
        "wall_s": round(wall, 1),
        "ms_per_submission": round(1e3 * wall / args.n, 1),
        "parent_peak_rss_mb": round(_vm_hwm() / 2**20),
        "worker_peak_rss_mb": round(worker.peak_rss / 2**20),
        "worker_starts": worker.starts,
        "outcomes": outcomes,
        "progress": progress,
    }
    print(json.dumps(summary, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1))
    return summary


if __name__ == "__main__":
    main()
