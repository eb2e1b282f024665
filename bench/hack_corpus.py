"""Runs the hack corpus (tests/fixtures/hacks/) on a device, a correct control after each hack in the
same worker, and prints one Markdown row per hack: the fixed-shape and fuzz outcomes, the findings,
whether the control still passed, and whether that matches tests/test_hacks.py's expectations.
Usage: `python bench/hack_corpus.py [--device cuda] [--only NAME ...]` (the README's hack-corpus table)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from conftest import toy_submission  # noqa: E402
from test_hacks import EXPECTED, HANG_CFG, hack  # noqa: E402

from rescore.engine.runner import RunConfig, run_submission  # noqa: E402
from rescore.engine.sandbox import Worker, network_isolation  # noqa: E402
from rescore.model.findings import split  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--only", nargs="*")
    args = parser.parse_args(argv)
    cfg = RunConfig(device=args.device, strategies={"default": 1}, dtypes=("float32",), timeout_s=60,
                    load_timeout_s=600)
    hang = RunConfig(**{**HANG_CFG.__dict__, "device": args.device})
    worker = Worker(args.device, cfg.budget)
    print(f"device {args.device}; network isolation: {' '.join(network_isolation()) or 'audit hook only'}")
    print("| hack | fixed check | fuzz | findings | control after | as expected |")
    print("|---|---|---|---|---|---|")
    bad = 0
    try:
        for name in args.only or sorted(EXPECTED):
            outcomes, findings, fixed = EXPECTED[name]
            start = time.perf_counter()
            rows = run_submission(hack(name), hang if name == "infinite_loop" else cfg, worker)
            control = run_submission(toy_submission("problem_scale.py", "torch_correct.py", dtypes=("float32",)),
                                     cfg, worker)
            fx = next(r for r in rows if r["oracle"] == "fixed")
            fz = [r for r in rows if r["oracle"] == "fuzz"]
            found = set().union(*(split(r.get("findings")) for r in fz))
            ok_control = all(r["outcome"] == "pass" and not r.get("findings") for r in control)
            ok = (all(r["outcome"] in outcomes for r in fz) and findings <= found and ok_control
                  and (fixed is None or fx["outcome"] in fixed))
            bad += not ok
            print(f"| {name} | {fx['outcome']} | {', '.join(sorted({r['outcome'] for r in fz}))} | "
                  f"{', '.join(sorted(found))} | {'pass' if ok_control else 'FAILED'} | "
                  f"{'yes' if ok else 'NO'} ({time.perf_counter() - start:.1f} s) |", flush=True)
            if not ok:
                for r in rows + control:
                    print(f"    {r['oracle']}: {r['outcome']}: {(r.get('reason') or '')[:300]}", flush=True)
    finally:
        worker.stop()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
