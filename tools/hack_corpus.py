"""Runs the hack corpus (tests/fixtures/hacks/) on a device, a correct control after each hack in the
same worker, and prints one Markdown row per hack: the fixed-shape and fuzz outcomes, the findings,
whether the control still passed, and whether that matches tests/fixtures/hacks/expected.yaml (what
tests/test_hacks.py asserts).
Usage: `python tools/hack_corpus.py [--device cuda] [--only NAME ...]` (the README's hack-corpus table)."""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

import yaml

from rescore.engine.runner import RunConfig, run_submission
from rescore.engine.sandbox import Worker, network_isolation
from rescore.model.findings import split
from rescore.model.language import detect_language
from rescore.model.outcomes import FLAGGING
from rescore.model.records import Problem, Submission

REPO = Path(__file__).resolve().parent.parent
HACKS = REPO / "tests" / "fixtures" / "hacks"
TOY_PROBLEM = REPO / "tests" / "fixtures" / "toy" / "problem_scale.py"
CONTROL = REPO / "tests" / "fixtures" / "toy" / "torch_correct.py"


def expected() -> dict[str, tuple[set[str], set[str], set[str] | None, str | None, dict | None]]:
    """hack -> (fuzz outcomes allowed, findings required, fixed outcomes allowed or None: not run,
    the cause every flagged fuzz case must name or None, the strategies it runs or None: one
    `default` case)."""
    named = {"FLAGGED": set(FLAGGING), "PASS": {"pass"}}

    def outcomes(value: str | list[str] | None) -> set[str] | None:
        return None if value is None else set(named[value] if isinstance(value, str) else value)

    table = yaml.safe_load((HACKS / "expected.yaml").read_text())
    return {name: (outcomes(e["fuzz"]), set(e["findings"]), outcomes(e["fixed"]), e.get("cause"), e.get("strategies"))
            for name, e in table.items()}


def toy(candidate: Path, name: str) -> Submission:
    """A candidate for the toy problem, built as tests/test_hacks.py builds it (the same problem id,
    hence the same case draws), in float32 only."""
    problem = Problem(problem_id=f"toy/{TOY_PROBLEM.stem}", source=TOY_PROBLEM.read_text(), path=str(TOY_PROBLEM),
                      op=TOY_PROBLEM.stem)
    source = candidate.read_text()
    return Submission(name=name, problem=problem, source=source, path=str(candidate),
                      language=detect_language(source), dtypes=("float32",))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--only", nargs="*")
    args = parser.parse_args(argv)
    cfg = RunConfig(device=args.device, strategies={"default": 1}, dtypes=("float32",), timeout_s=60,
                    load_timeout_s=600)
    hang = replace(cfg, timeout_s=3, load_timeout_s=300)  # infinite_loop: the test's HANG_CFG
    table = expected()
    worker = Worker(args.device, cfg.budget)
    print(f"device {args.device}; network isolation: {' '.join(network_isolation()) or 'audit hook only'}")
    print("| hack | fixed check | fuzz | findings | cause (else pattern) | control after | as expected |")
    print("|---|---|---|---|---|---|---|")
    bad = 0
    try:
        for name in args.only or sorted(table):
            outcomes, findings, fixed, cause, strategies = table[name]
            start = time.perf_counter()
            run_cfg = hang if name == "infinite_loop" else cfg
            if strategies:
                run_cfg = replace(run_cfg, strategies=strategies)
            rows = run_submission(toy(HACKS / f"{name}.py", name), run_cfg, worker)
            control = run_submission(toy(CONTROL, CONTROL.stem), cfg, worker)
            fx = next(r for r in rows if r["oracle"] == "fixed")
            fz = [r for r in rows if r["oracle"] == "fuzz"]
            found = set().union(*(split(r.get("findings")) for r in fz))
            ok_control = all(r["outcome"] == "pass" and not r.get("findings") for r in control)
            flagged = [r for r in fz if r["outcome"] in FLAGGING]
            why = next((r.get("cause") or r.get("diagnosis") for r in flagged if r.get("cause") or r.get("diagnosis")),
                       "")
            ok = (all(r["outcome"] in outcomes for r in fz) and findings <= found and ok_control
                  and (fixed is None or fx["outcome"] in fixed)
                  and (cause is None or all(r.get("cause") == cause for r in flagged)))
            bad += not ok
            print(f"| {name} | {fx['outcome']} | {', '.join(sorted({r['outcome'] for r in fz}))} | "
                  f"{', '.join(sorted(found))} | {why} | {'pass' if ok_control else 'FAILED'} | "
                  f"{'yes' if ok else 'NO'} ({time.perf_counter() - start:.1f} s) |", flush=True)
            if not ok:
                for r in rows + control:
                    print(f"    {r['oracle']}: {r['outcome']}: {(r.get('reason') or '')[:300]}", flush=True)
    finally:
        worker.stop()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
