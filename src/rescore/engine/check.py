"""Check one kernel from the shell: the fixed-shape check and the fuzz oracle on one pair of files.

The fuzz verdict (and the exit code) is the headline's: failures on ordinary values
(`rescore.model.evidence`); robustness findings are printed and written apart, and count toward it
only with `robustness_in_headline` (`--robustness-counts`)."""

from __future__ import annotations

import json
import time
from collections import Counter

from rescore.analysis import robustness
from rescore.engine.phase_log import PhaseLog, case_seconds
from rescore.engine.runner import run_submission
from rescore.engine.sandbox import Worker
from rescore.model.evidence import classify
from rescore.model.outcomes import FixedVerdict, FuzzVerdict, Outcome, fixed_verdict, fuzz_verdict, stopped_early
from rescore.model.records import Submission
from rescore.model.run import RunConfig


def check_pair(sub: Submission, cfg: RunConfig, log_dir: str | None = None, progress=None,
               robustness_in_headline: bool = False) -> tuple[dict, list[dict]]:
    """Run a submission; returns the summary (the `--json` document) and every case row."""
    worker = Worker(cfg.device, cfg.budget, log_dir, explain=cfg.explain)
    worker.eager_standby = True  # alone on its device: a hang's restart is the developer's wait
    worker.phases = spent = PhaseLog()
    began = time.monotonic()
    try:
        rows = run_submission(sub, cfg, worker, progress=progress)
    finally:
        worker.stop()
    doc = summarize(rows, robustness_in_headline)
    doc["time"] = time_spent(spent, time.monotonic() - began, case_seconds(rows))
    return doc, rows


def time_spent(spent: PhaseLog, elapsed_s: float, case_s: float) -> dict:
    """Where the check's time went (the `--json` document's `time`): its seconds, its cases' own, and
    per phase as the pipeline's phase table counts them (`phase_log.py`); the process's own start
    before it is not counted."""
    phases = {r["phase"]: round(r["seconds"], 3) for r in spent.rows(elapsed_s, case_s)}
    return {"elapsed_s": round(elapsed_s, 3), "case_s": round(case_s, 3), "phases": phases}


def _failure(r: dict) -> dict:
    """One failing case as the `--json` document lists it."""
    keys = ("outcome", "strategy", "seed", "dtype", "sizes", "shapes", "values", "layout", "max_abs_err", "reason",
            "cause", "cause_evidence", "replay")
    return {k: r[k] if k in ("outcome", "strategy", "seed", "dtype") else r.get(k) for k in keys}


def summarize(rows: list[dict], robustness_in_headline: bool = False) -> dict:
    """The `--json` document: the fixed verdict, the headline fuzz verdict with its failures, and the
    robustness findings apart (per kind, with its tier and first failing case, and every such case)."""
    fixed = next((r for r in rows if r.get("oracle") == "fixed"), None)
    fuzz = [r for r in rows if r.get("oracle") == "fuzz"]
    outcomes = Counter(r["outcome"] for r in fuzz)
    evidence = [classify(r) for r in fuzz]  # headline, or which robustness finding (model/evidence.py)
    counted = [r for r, e in zip(fuzz, evidence) if robustness_in_headline or e.headline]
    failed = [(r, e) for r, e in zip(fuzz, evidence)
              if r["outcome"] not in (Outcome.PASS, Outcome.SKIPPED, Outcome.DECLINED)]
    failures = [_failure(r) for r, e in failed if robustness_in_headline or e.headline]
    own_sizes = json.loads(fixed["sizes"]) if fixed and isinstance(fixed.get("sizes"), str) else None
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
            "verdict": fuzz_verdict([r["outcome"] for r in counted]),
            "verdict_all": fuzz_verdict(list(outcomes.elements())),  # every case, robustness findings too
            "robustness_in_headline": robustness_in_headline,
            "cases": sum(r.get("purpose") != "regression" for r in fuzz),
            "replayed": sum(r.get("purpose") == "regression" for r in fuzz),  # stored failures, run first
            "run": sum(r["outcome"] != Outcome.SKIPPED for r in fuzz),  # judged: neither skipped nor stopped early
            "stopped": stopped,  # why the remaining cases were not run (budget, settled), if they were not
            "outcomes": dict(sorted(outcomes.items())),
            "skipped_reasons": dict(skipped),
            "failures": failures,
            "robustness": robustness.findings(fuzz, own_sizes),
            "robustness_failures": [dict(_failure(r), kind=str(e.kind)) for r, e in failed if not e.headline],
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
    lines += robustness_summary(fz)
    if fx["verdict"] == FixedVerdict.PASS and fz["verdict"] == FuzzVerdict.FLAGGED:
        lines.append("  ILLUSION: the benchmark's check passes this kernel, fuzzing flags it.")
    return "\n".join(lines)


def robustness_summary(fz: dict) -> list[str]:
    """The robustness findings' lines: each kind with its tier, counts, first failing case and replay."""
    found = fz.get("robustness") or []
    if not found:
        return []
    counted = fz.get("robustness_in_headline")
    how = ("counted in the fuzz verdict (--robustness-counts)" if counted
           else "not counted in the fuzz verdict or the exit code; --robustness-counts counts them")
    lines = [f"  robustness findings ({how}):"]
    for finding in found:
        lines.append(f"    {robustness.describe_finding(finding)}")
        lines.append(f"      why: {finding['evidence']['why']}")
        lines.append(f"      replay: {finding['first'].get('replay')}")
    return lines
