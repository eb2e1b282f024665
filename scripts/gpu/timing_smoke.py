"""On a GPU: time a few built-in corpus kernels through the timing stage's own path (sandboxed worker,
CUDA events, L2 flushed before each call, median of repeated calls) and print their rows, then the
P4-style difference (buggy minus control) of every (control, buggy) pair among them.

python scripts/gpu/timing_smoke.py [--names gelu_triton,gelu_triton_sigmoid_arg,matmul_triton]
                             [--warmup 10] [--repeats 100] [--budget-s 2] [--out timing.parquet]

The default names are a control, a buggy variant seeded from it, and a kernel of another op (one
pair, one lone row). `--device cpu` runs the same path with the host's clock under the Triton
interpreter: the times mean nothing, it only checks the script on a machine without a GPU.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time

import pandas as pd

from rescore.corpus.catalog import load_corpus
from rescore.engine.timing_stage import settings, time_submissions
from rescore.model.tables import write_parquet

SHOWN = ["name", "label", "status", "median_ms", "p10_ms", "p90_ms", "min_ms", "max_ms", "repeats", "capped",
         "ref_median_ms", "speedup", "wall_s", "reason"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--names", default="gelu_triton,gelu_triton_sigmoid_arg,matmul_triton")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=100)
    parser.add_argument("--budget-s", type=float, default=2.0)
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--out", help="also write the rows as a timing table (Parquet) here")
    args = parser.parse_args()
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("timing_smoke: no CUDA GPU visible to torch; run it on the GPU machine (or --device cpu to "
                 "check the script alone)")
    wanted = args.names.split(",")
    corpus = {s.name: s for s in load_corpus()}
    missing = [n for n in wanted if n not in corpus]
    if missing:
        sys.exit(f"timing_smoke: not in the built-in corpus: {missing}")
    subs = [corpus[n] for n in wanted]
    config = {"device": args.device, "fixed": {"dtype": "float32"}, "timeout_s": 120, "budget": {"cuda": 1 << 20},
              "timing": {"warmup": args.warmup, "repeats": args.repeats, "budget_s": args.budget_s}}
    cfg = settings(config, ["corpus"])
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="timing-smoke-") as logs:
        rows = time_submissions(subs, cfg, logs, device=args.device, host_clock=args.device != "cuda",
                                flush_bytes=None if args.device == "cuda" else 1 << 20)
    df = pd.DataFrame(rows)
    first = df.iloc[0]
    print(f"device {first.get('device')}, torch {first.get('torch')}, triton {first.get('triton')}, "
          f"dtype {cfg['dtype']}, flush {first.get('flush_bytes')} bytes, {time.perf_counter() - start:.1f} s in all")
    if args.device != "cuda":
        print("CPU: host clock under the Triton interpreter; these times mean nothing (script check only)")
    with pd.option_context("display.width", 200, "display.max_columns", None, "display.max_colwidth", 60):
        print(df[[c for c in SHOWN if c in df]].to_string(index=False))
    by_name = {r["name"]: r for r in rows}
    for r in rows:
        control = by_name.get(r.get("control") or "")
        if control is None:
            continue
        if r.get("status") == "ok" and control.get("status") == "ok":
            d = r["median_ms"] - control["median_ms"]
            print(f"{control['name']}->{r['name']}: d_ms_median {d:+.4f} ms, d_perf_pct "
                  f"{100 * d / control['median_ms']:+.1f}%")
        else:
            print(f"{control['name']}->{r['name']}: no difference ({control.get('status')}, {r.get('status')})")
    if args.out:
        write_parquet(df, args.out, "timing")
    if not (df["status"] == "ok").any():
        sys.exit("timing_smoke: no kernel was timed")


if __name__ == "__main__":
    main()
