"""Check one kernel from the shell: the fixed-shape check and the fuzz oracle on one pair of files."""

from __future__ import annotations

from collections import Counter

from rescore.engine.runner import run_submission
from rescore.engine.sandbox import Worker
from rescore.model.outcomes import FixedVerdict, FuzzVerdict, Outcome, fixed_verdict, fuzz_verdict, stopped_early
from rescore.model.records import Submission
from rescore.model.run import RunConfig


def check_pair(sub: Submission, cfg: RunConfig, log_dir: str | None = None, progress=None) -> tuple[dict, list[dict]]:
    """Run a submission; returns the summary (the `--json` document) and every case row."""
    worker = Worker(cfg.device, cfg.budget, log_dir, explain=cfg.explain)
    try:
        rows = run_submission(sub, cfg, worker, progress=progress)
    finally:
        worker.stop()
    return summarize(rows), rows


def summarize(rows: list[dict]) -> dict:
    fixed = next((r for r in rows if r.get("oracle") == "fixed"), None)
    fuzz = [r for r in rows if r.get("oracle") == "fuzz"]
    outcomes = Counter(r["outcome"] for r in fuzz)
    failures = [
        {
            "outcome": r["outcome"],
            "strategy": r["strategy"],
            "seed": r["seed"],
            "dtype": r["dtype"],
            "sizes": r.get("sizes"),
            "shapes": r.get("shapes"),
            "max_abs_err": r.get("max_abs_err"),
            "reason": r.get("reason"),
            "cause": r.get("cause"),
            "cause_evidence": r.get("cause_evidence"),
            "replay": r.get("replay"),
        }
        for r in fuzz
        if r["outcome"] not in (Outcome.PASS, Outcome.SKIPPED, Outcome.DECLINED)
    ]
    skipped = Counter(r.get("reason", "") for r in fuzz if r["outcome"] == Outcome.SKIPPED)
    stopped = next((r["reason"] for r in fuzz
                    if r["outcome"] == Outcome.SKIPPED and stopped_early(r.get("reason"))), None)
    fixed_doc = {"verdict": fixed_verdict(fixed["outcome"]) if fixed else FixedVerdict.FAIL}
    if fixed:
        fixed_doc.update(
            outcome=fixed["outcome"],
            profile=fixed.get("tolerance_policy"),
            max_difference=fixed.get("max_abs_err"),
            reason=fixed.get("reason") or "",
            replay=fixed.get("replay"),
        )
    return {
        "fixed": fixed_doc,
        "fuzz": {
            "verdict": fuzz_verdict(list(outcomes.elements())),
            "cases": sum(r.get("purpose") != "regression" for r in fuzz),
            "replayed": sum(r.get("purpose") == "regression" for r in fuzz),  # stored failures, run first
            "run": sum(r["outcome"] != Outcome.SKIPPED for r in fuzz),  # judged: neither skipped nor stopped early
            "stopped": stopped,  # why the remaining cases were not run (budget, settled), if they were not
            "outcomes": dict(sorted(outcomes.items())),
            "skipped_reasons": dict(skipped),
            "failures": failures,
        },
    }


def human_summary(doc: dict, sub: Submission, device: str) -> str:
    fx, fz = doc["fixed"], doc["fuzz"]
    lines = [f"rescore check: {sub.path} against {sub.problem.path} ({sub.language}, device {device})"]
    extra = f" ({fx.get('reason')})" if fx.get("reason") else ""
    lines.append(f"  fixed-shape check ({fx.get('profile')}, 5 trials): {fx['verdict'].upper()}{extra}")
    counts = ", ".join(f"{k} {v}" for k, v in fz["outcomes"].items())
    replayed = f" + {fz['replayed']} stored failures replayed first" if fz.get("replayed") else ""
    run = f", {fz['run']} run" if fz["run"] != fz["cases"] + fz.get("replayed", 0) else ""
    lines.append(f"  fuzz oracle ({fz['cases']} cases{replayed}{run}): {fz['verdict'].upper()}  [{counts}]")
    if fz.get("stopped"):
        not_run = fz["skipped_reasons"].get(fz["stopped"], 0)
        lines.append(f"    {not_run} not run: {fz['stopped']}")
    for reason, n in fz.get("skipped_reasons", {}).items():
        if reason != fz.get("stopped"):
            lines.append(f"    skipped {n}: {reason}")
    if fz["failures"]:
        first = fz["failures"][0]
        lines.append(
            f"  first failure: {first['outcome']} ({first['strategy']}, {first['dtype']}, sizes {first['sizes']})"
        )
        for text in (first.get("reason") or "").splitlines():
            lines.append(f"    {text}")
        if first.get("cause"):
            lines.append(f"  cause (confirmed by experiment): {first['cause']}: {first.get('cause_evidence')}")
        lines.append(f"  replay: {first['replay']}")
    if fx["verdict"] == FixedVerdict.PASS and fz["verdict"] == FuzzVerdict.FLAGGED:
        lines.append("  ILLUSION: the benchmark's check passes this kernel, fuzzing flags it.")
    return "\n".join(lines)
