"""compute-sanitizer as a diagnosis stage (results/tables/sanitizer.parquet).

The fuzz oracle sees what a kernel returns; memory it reads or writes past its tensors, shared
memory two threads race on, a barrier only some threads reach, are seen only when they change a
value that is judged. NVIDIA's compute-sanitizer sees them directly. For each flagged CUDA or
Triton submission (and, with `passing`, one case of each that passed) its first failing case is run
once more under each configured tool, in the sandbox's worker (`sandbox.Worker` with the sanitizer
as the command the worker runs under: same confinement, same harness, same case), with a time
limit; the sanitizer's report is parsed into diagnoses that keep the sanitizer's own lines.

memcheck and initcheck run with PyTorch's caching allocator off (PYTORCH_NO_CUDA_MEMORY_CACHING=1):
with it on, every tensor is a slice of a larger cudaMalloc block, and an access past a tensor but
inside its block (the allocator rounds to 512 bytes) is invisible to the sanitizer.

Where the stage cannot run (no CUDA GPU, no compute-sanitizer executable) every selected
submission gets a `not_run` row per tool with the reason, and the log says so at the top and the end.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from rescore.engine.sandbox import Worker, request_with_retry
from rescore.model.failures import FIRST_FAILURE_ORDER
from rescore.model.outcomes import DIED, FLAGGING, Outcome
from rescore.model.records import Submission, read_manifests
from rescore.model.tables import read_parquet, write_parquet
from rescore.runtime.device import timing_device
from rescore.worker.protocol import Case, Load, job_of

log = logging.getLogger("rescore")

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
KERNEL_LANGUAGES = ("cuda", "triton")
DEFAULTS = {
    "tools": list(TOOLS),
    "timeout_s": 900.0,  # one tool on one case, the worker's start and load included (10-100x slower)
    "max_submissions": 200,
    "passing": False,
    "executable": "compute-sanitizer",
    "print_limit": 20,  # error reports printed per run; the summary still counts them all
}
# Tools whose view of memory is the allocation: with the caching allocator on, they see its blocks.
NO_CACHING_TOOLS = ("memcheck", "initcheck")
NO_CACHING_ENV = {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}
# Kernels of the libraries the harness itself runs (its reference, copies, fills): reported, but
# marked, since they are not the submission's own code.
_LIBRARY_KERNEL = re.compile(r"^(void\s+)?(at::|c10::|cub::|thrust::|cutlass::|cudnn|cublas|cutlass_|sm\d+_xmma|"
                             r"ampere_|hopper_|volta_|nvjet)")
COLUMNS = [
    "submission_id", "name", "dump", "problem_id", "language", "label", "why", "oracle", "strategy", "seed", "dtype",
    "case_index", "case_outcome", "tool", "status", "diagnosis", "kernel", "library_kernel", "errors", "report",
    "summary", "reason", "outcome_under_sanitizer", "wall_s", "sanitizer_version",
]


def settings(config: dict) -> dict:
    """The stage's settings from the validated config: `sanitizer:` with its defaults, and the run's
    device and element budget."""
    own = dict(config.get("sanitizer") or {})
    cfg = {k: own.get(k, v) for k, v in DEFAULTS.items()}
    cfg["tools"] = list(cfg["tools"])
    cfg["timeout_s"] = float(cfg["timeout_s"])
    cfg["device"] = config.get("device", "auto")
    cfg["budget"] = int(config.get("budget", {}).get("cuda", 1 << 20))
    return cfg


# -- the sanitizer's report ----------------------------------------------------------------------

@dataclass
class Diagnosis:
    """The errors of one kind in one kernel, with the sanitizer's own first report of them."""

    tool: str
    diagnosis: str  # out_of_bounds | misaligned_access | device_fault | race | uninitialized_read | sync_error
    kernel: str | None
    report: str  # the first error's lines as the sanitizer printed them (host backtrace left out)
    errors: int = 1  # error reports of this kind and kernel in the log

    @property
    def library_kernel(self) -> bool:
        return bool(self.kernel and _LIBRARY_KERNEL.match(self.kernel))


_PREFIX = re.compile(r"^=========( ?)(.*)$")
_SUMMARY = re.compile(r"^(ERROR SUMMARY|RACECHECK SUMMARY|LEAK SUMMARY):")
_BACKTRACE = re.compile(r"^(Saved host backtrace|Host Frame|Device Frame)")
_HAZARDS = re.compile(r"\[([\d,]+) hazards?\]")


def _blocks(text: str) -> tuple[list[list[str]], list[str]]:
    """The log's error reports (each a headline and its indented lines, backtraces dropped) and its
    summary lines. Lines without the sanitizer's `=========` prefix are the program's own output."""
    blocks: list[list[str]] = []
    summaries: list[str] = []
    current: list[str] | None = None
    in_backtrace = False
    for raw in text.splitlines():
        m = _PREFIX.match(raw.rstrip())
        if not m:
            continue
        body = m.group(2)
        if not body.strip():
            current, in_backtrace = None, False  # a bare prefix line ends a report
            continue
        if not body.startswith((" ", "\t")):
            line = body.strip()
            if line == "COMPUTE-SANITIZER" or line.startswith("Target application returned"):
                current = None
            elif _SUMMARY.match(line):
                summaries.append(line)
                current = None
            else:
                current, in_backtrace = [line], False
                blocks.append(current)
            continue
        line = body.strip()
        if current is None:
            continue
        if _BACKTRACE.match(line):
            in_backtrace = True
        if not in_backtrace:
            current.append(line)
    return blocks, summaries


def _kernel(where: str) -> str | None:
    """The kernel named by a location: `kern(float*)+0x150 in f.cu:27`, `0x148 in ./f.cu:3:kern(int*)`,
    `0x50 in kern(float *)`, `kern in /input/kernel.cu:9`."""
    where = where.strip()
    m = re.match(r"0x[0-9a-fA-F]+\s+in\s+(.+)", where)
    if m:
        rest = m.group(1).strip()
        named = re.match(r"[^\s:]+:\d+:(.+)", rest)  # file:line:kernel (older releases)
        return (named.group(1) if named else rest).strip() or None
    name = re.split(r"\+0x[0-9a-fA-F]+", where, maxsplit=1)[0]
    name = re.split(r"\s+in\s+\S+:\d+", name, maxsplit=1)[0]
    return name.strip() or None


def _classify(tool: str, headline: str, text: str) -> str | None:
    """The diagnosis an error report gives, or None for what is not a finding about the kernel (a
    CUDA API error the sanitizer saw the program hit, a leak)."""
    if headline.startswith(("Program hit", "Leaked", "Memory leak")):
        return None
    if "Race reported" in headline or re.search(r"Potential (RAW|WAR|WAW) hazard", headline):
        return "race"
    if headline.startswith("Uninitialized"):
        return "uninitialized_read"
    if headline.startswith("Barrier error") or tool == "synccheck":
        return "sync_error"
    if headline.startswith("Invalid") or "Out-of-range" in headline or "Illegal Address" in headline:
        return "misaligned_access" if "is misaligned" in text or "Misaligned" in headline else "out_of_bounds"
    if "Misaligned" in headline:
        return "misaligned_access"
    return "device_fault" if tool == "memcheck" else None


def parse_report(text: str, tool: str) -> tuple[list[Diagnosis], str | None]:
    """(the diagnoses in a compute-sanitizer log, one per kind and kernel, in the order first seen;
    its summary line, or None when the log has none: the run did not finish)."""
    blocks, summaries = _blocks(text)
    found: dict[tuple[str, str | None], Diagnosis] = {}
    for block in blocks:
        joined = " ".join(block)
        kind = _classify(tool, block[0], joined)
        if kind is None:
            continue
        if kind == "race":
            m = re.search(r"access at\s+(.*?)(?=\s+and (?:Read|Write|Atomic) access|\s*\[[\d,]+ hazards?\]|$)", joined)
        else:
            m = re.search(r"\bat\s+(.*?)(?=\s+by thread|\s+Address|\s+Access to|$)", " ".join(block[1:]))
        kernel = _kernel(m.group(1)) if m else None
        hazards = sum(int(h.replace(",", "")) for h in _HAZARDS.findall(joined)) if kind == "race" else 0
        key = (kind, kernel)
        if key in found:
            found[key].errors += max(hazards, 1)
        else:
            found[key] = Diagnosis(tool, kind, kernel, "\n".join(block)[:1500], max(hazards, 1))
    summary = " ".join(summaries) if summaries else None
    return list(found.values()), summary


# -- which cases ---------------------------------------------------------------------------------

def select_cases(cases: pd.DataFrame, submissions: pd.DataFrame, passing: bool = False,
                 limit: int | None = None) -> pd.DataFrame:
    """One fuzz case per CUDA or Triton submission to run under the sanitizer, with `why`: its first
    failing case (`flagged`, or `nondeterministic` when that case's second run differed), and with
    `passing` the first case of each submission that passed (`representative`). Flagged ones first."""

    languages = submissions.set_index("submission_id")["language"]
    fuzz = cases[(cases["oracle"] == "fuzz") & cases["submission_id"].map(languages).isin(KERNEL_LANGUAGES)]
    chosen = []
    for _, group in fuzz.groupby("submission_id", sort=True):
        group = group.sort_values(FIRST_FAILURE_ORDER)
        bad = group[group["outcome"].isin(FLAGGING)]
        if len(bad):
            row = bad.iloc[0].to_dict()
            row["why"] = "nondeterministic" if row.get("diagnosis") == "nondeterministic" else "flagged"
        elif passing and (group["outcome"] == Outcome.PASS).any():
            row = dict(group[group["outcome"] == Outcome.PASS].iloc[0].to_dict(), why="representative")
        else:
            continue
        chosen.append(row)
    rank = {"nondeterministic": 0, "flagged": 1, "representative": 2}
    chosen.sort(key=lambda r: (rank[r["why"]], r["submission_id"]))
    return pd.DataFrame(chosen[:limit] if limit else chosen)


# -- running it -----------------------------------------------------------------------------------

def sanitizer_command(cfg: dict, tool: str, log_file: Path) -> list[str]:
    """The command the worker runs under for `tool`: the report goes to `log_file`, never into the
    worker's own output."""
    return [cfg["executable"], "--tool", tool, "--log-file", str(log_file), "--print-limit", str(cfg["print_limit"]),
            "--report-api-errors", "no",  # torch and Triton probe the driver; its refusals are not the kernel's
            "--launch-timeout", "0"]  # the worker imports torch before CUDA starts; our own time limit bounds it


def availability(cfg: dict) -> tuple[str | None, str]:
    """(the sanitizer's path, what runs it) where the stage can run; (None, why not) elsewhere."""

    device, why = timing_device(cfg["device"])
    if device != "cuda":
        return None, f"compute-sanitizer needs a CUDA GPU: {why}"
    path = shutil.which(cfg["executable"])
    if path is None:
        return None, (f"compute-sanitizer not found: `{cfg['executable']}` is not on PATH (config "
                      "sanitizer.executable); it ships with the CUDA toolkit")
    return path, why


def sanitizer_version(executable: str) -> str | None:
    try:
        out = subprocess.run([executable, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [line.strip() for line in out.splitlines() if "version" in line.lower()]
    return lines[-1] if lines else (out.strip().splitlines() or [None])[-1]


def _base(sub: Submission, case: dict) -> dict:
    return {
        "submission_id": sub.submission_id, "name": sub.name, "dump": sub.dump,
        "problem_id": sub.problem.problem_id, "language": sub.language, "label": sub.label, "why": case.get("why"),
        "oracle": case.get("oracle", "fuzz"), "strategy": case.get("strategy"), "seed": case.get("seed"),
        "dtype": case.get("dtype"), "case_index": case.get("case_index"), "case_outcome": case.get("outcome"),
    }


def _message(sub: Submission, case: dict) -> Case:
    """The worker request that re-runs `case` exactly as the check ran it (a trigger with its override)."""
    override = None
    if case.get("strategy") == "trigger" and sub.trigger:
        override = sub.trigger if isinstance(sub.trigger, dict) else json.loads(sub.trigger)
    return Case(case["strategy"], int(case["seed"]), case["dtype"], override)


def sanitize_case(sub: Submission, case: dict, tool: str, cfg: dict, log_dir: Path, device: str = "cuda",
                  version: str | None = None) -> list[dict]:
    """Rows for one case under one tool: one per diagnosis found, or one `clean` / `timeout` /
    `incomplete` row. `device` is for tests, which run a stand-in sanitizer on the CPU."""
    log_dir.mkdir(parents=True, exist_ok=True)
    report = log_dir / f"{sub.submission_id[:16]}-{tool}.log"
    report.unlink(missing_ok=True)
    worker = Worker(device, cfg["budget"], str(log_dir), wrapper=sanitizer_command(cfg, tool, report),
                    extra_env=NO_CACHING_ENV if tool in NO_CACHING_TOOLS else None)
    worker.load_timeout = cfg["timeout_s"]
    base = dict(_base(sub, case), tool=tool, sanitizer_version=version)
    start = time.monotonic()
    try:
        loaded, _ = request_with_retry(worker, Load(job_of(sub)), cfg["timeout_s"], retries=0)
        worker.job = job_of(sub)
        if loaded.get("outcome") in DIED:
            result = {"outcome": loaded["outcome"], "reason": f"loading the submission: {loaded.get('reason')}"}
        else:
            result, _ = request_with_retry(worker, _message(sub, case), cfg["timeout_s"], retries=0)
    finally:
        worker.stop()
    wall = time.monotonic() - start
    base.update(outcome_under_sanitizer=result.get("outcome"), wall_s=wall)
    text = report.read_text(errors="replace") if report.exists() else ""
    found, summary = parse_report(text, tool)
    if found:
        return [dict(base, status="found", diagnosis=d.diagnosis, kernel=d.kernel, library_kernel=d.library_kernel,
                     errors=d.errors, report=d.report, summary=summary,
                     reason=f"{tool}: {d.report.splitlines()[0]}"[:500]) for d in found]
    if result.get("outcome") == Outcome.TIMEOUT:
        status = Outcome.TIMEOUT
        reason = f"no answer within {cfg['timeout_s']:g} s under {tool}: {result.get('reason')}"
    elif summary is None:
        status = "incomplete"
        reason = (f"{tool} left no summary in {report}: the run did not finish "
                  f"(the case ended {result.get('outcome')}: {result.get('reason', '')})")
    else:
        status, reason = "clean", f"{tool}: {summary}"
    return [dict(base, status=status, summary=summary, errors=0, reason=reason[:500])]


def not_run_rows(subs: dict[str, Submission], selected: pd.DataFrame, tools: list[str], reason: str) -> list[dict]:
    return [dict(_base(subs[case["submission_id"]], case), tool=tool, status="not_run", reason=reason)
            for case in selected.to_dict("records") for tool in tools]


def run_sanitizer(cases_path: str, submissions_path: str, manifests: list[str], config: dict, out: str,
                  log_dir: str) -> pd.DataFrame:
    """The sanitizer table of the run: the selected cases under each tool, or `not_run` rows saying why."""

    cfg = settings(config)
    subs = {s.submission_id: s for s in read_manifests(manifests)}
    selected = select_cases(read_parquet(cases_path, "cases"), read_parquet(submissions_path, "submissions"),
                            cfg["passing"], cfg["max_submissions"])
    if len(selected):
        selected = selected[selected["submission_id"].isin(subs)]
    executable, why = availability(cfg)
    log.info("sanitizer: %d CUDA/Triton submissions selected (%s), tools %s, %.0f s limit per run",
             len(selected), dict(selected["why"].value_counts()) if len(selected) else {}, ", ".join(cfg["tools"]),
             cfg["timeout_s"])
    if executable is None:
        log.warning("NO SANITIZER: %s. Every one of the %d selected submissions gets a `not_run` row per tool; "
                    "memory past a kernel's own buffers stays unseen on a GPU (results/uncertainty.md says so).",
                    why, len(selected))
        rows = not_run_rows(subs, selected, cfg["tools"], why)
    else:
        version = sanitizer_version(executable)
        log.info("sanitizer: %s (%s) on %s", executable, version, why)
        rows = []
        for i, case in enumerate(selected.to_dict("records"), 1):
            sub = subs[case["submission_id"]]
            for tool in cfg["tools"]:
                got = sanitize_case(sub, case, tool, cfg, Path(log_dir), version=version)
                rows += got
                log.info("sanitizer %d/%d %s %s: %s", i, len(selected), sub.name, tool,
                         "; ".join(f"{r['status']} {r.get('diagnosis') or ''} {r.get('kernel') or ''}".strip()
                                   for r in got))
    df = pd.DataFrame(rows, columns=COLUMNS)
    write_parquet(df, out)
    counts = df["status"].value_counts().to_dict() if len(df) else {}
    if len(df) and counts.get("not_run", 0) == len(df):
        log.warning("NO SANITIZER: all %d rows are not_run (%s)", len(df), df["reason"].iloc[0])
    log.info("sanitizer: %d rows, by status %s", len(df), counts)
    return df
