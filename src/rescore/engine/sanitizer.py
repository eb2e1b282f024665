"""compute-sanitizer as a diagnosis stage (results/tables/sanitizer.parquet).

The fuzz oracle sees what a kernel returns; memory it reads or writes past its tensors, shared
memory two threads race on, a barrier only some threads reach, are seen only when they change a
value that is judged. NVIDIA's compute-sanitizer sees them directly. For each flagged CUDA or
Triton submission (and, with `passing`, one case of each that passed) its first failing case (one
that ran the submission's own CUDA, where there is one, and one that launched its kernel before one
that ended `compile_error`) is run once more under each configured tool, in the sandbox's worker
(`sandbox.Worker` with the sanitizer as the command the worker runs under: same confinement, same
harness, same case), with a time limit per run and a wall-clock budget for the whole stage; the
sanitizer's log is parsed into diagnoses that keep its own lines (`sanitizer_log.py`). The worker
runs the case alone, without the experiments that confirm a failure's cause (`--no-explain`): each
would run the kernel again under the tool, and the cause is the check stage's to say. A run is
`clean` only when the tool wrote its summary and the case ran the candidate's call to its end under
it (`run_status`): a case cut during the harness's own work, or one that ended before its kernel
launched, checked nothing of the kernel.

The worker runs in a scratch folder of its own, so every path handed to the sanitizer is absolute.
The sanitizer writes its summary only after the worker has ended: a stopped worker and its sanitizer
get `exit_wait_s` to end before they are killed, and a worker killed for its time limit is killed
alone first, so that the sanitizer still reports what it saw (`Error: process didn't terminate
successfully` and its summary). Each run keeps its sanitizer log and the worker's own output in a
folder of its own under the stage's log folder.

memcheck and initcheck run with PyTorch's caching allocator off (PYTORCH_NO_CUDA_MEMORY_CACHING=1):
with it on, every tensor is a slice of a larger cudaMalloc block, and an access past a tensor but
inside its block (the allocator rounds to 512 bytes) is invisible to the sanitizer.
initcheck runs without the worker's fill of fresh memory (`protocol.UNFILLED_MEMORY_ENV`): the fill
writes NaN into every new tensor, so that output a kernel never wrote is judged, and so the tool would
never see a read of memory nothing wrote (an accumulator never set, an output read before written).

Where the stage cannot run (no CUDA GPU, no compute-sanitizer executable) every selected
submission gets a `not_run` row per tool with the reason, and the log says so at the top and the end;
runs the stage's budget leaves no time for are `not_run` rows saying so, and so are the runs of a
CUDA submission whose chosen case ran none of its own CUDA (its build failed, or what built was never
called, so PyTorch computed the answer): there the tools would watch only PyTorch's kernels.
"""

from __future__ import annotations

import json
import logging
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd

from rescore.analysis.uncertainty import memory_safety_lines
from rescore.engine.result_cache import SANITIZER, ResultCache, submission_identity
from rescore.engine.sandbox import Worker, request_with_retry
from rescore.engine.sanitizer_log import parse_report
from rescore.model.builds import NEVER_RAN, ONLY_PYTORCH_RAN, CudaRan
from rescore.model.failures import FIRST_FAILURE_ORDER
from rescore.model.outcomes import DIED, FLAGGING, Outcome, SanitizerStatus
from rescore.model.records import Submission, read_manifests
from rescore.model.tables import read_parquet, write_parquet
from rescore.runtime.device import machine_cores, timing_device
from rescore.worker.protocol import UNFILLED_MEMORY_ENV, Case, Load, job_of

log = logging.getLogger("rescore")

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
KERNEL_LANGUAGES = ("cuda", "triton")
DEFAULTS = {
    "tools": list(TOOLS),
    "timeout_s": 900.0,  # one tool on one case, the worker's start and load included (10-100x slower)
    "budget_s": 600.0,  # the whole stage; 0: none. Runs it leaves no time for are `not_run`
    "exit_wait_s": 120.0,  # after the worker ends or is killed: the sanitizer's teardown and summary
    "max_submissions": 200,
    "passing": False,
    "executable": "compute-sanitizer",
    "print_limit": 100,  # error reports printed per run (a warp's reads come before its writes); the summary counts all
    # runs at a time: a run is mostly its worker's start and load under the sanitizer, on the host, and
    # the stage runs after every other, so `auto` takes the cores the run was given (on an H100 at
    # 071391d, 8 of 16 cores ran 55 of 192 runs in a budget of 120 s while the other 8 were idle)
    "jobs": "auto",
}
# What decides a run's rows besides its case and tool: every setting but these (`result_cache.py`)
RUN_INDEPENDENT = ("tools", "budget_s", "jobs", "max_submissions", "passing")
CASE_IDENTITY = ("oracle", "strategy", "seed", "dtype", "case_index", "outcome", "why")
# the statuses a results cache keeps: the run ended on its own terms
FINISHED = (SanitizerStatus.FOUND, SanitizerStatus.CLEAN, SanitizerStatus.TIMEOUT)
# A case that ended so launched no kernel of the submission: chosen only where no other case can be
NO_LAUNCH = (Outcome.COMPILE_ERROR,)
# The outcomes of a case under a tool that ran the candidate's call to its end (it returned, or died
# in it): the tool's summary then covers the kernel. Any other (`skipped`: the run was cut during the
# harness's own work; `compile_error`, `declined`: no kernel launched) checked nothing of it.
CALL_ENDED = (Outcome.PASS, Outcome.MISMATCH, Outcome.NONFINITE, Outcome.BAD_OUTPUT, Outcome.MUTATED_INPUT,
              Outcome.CRASH)
# The worker's environment under each tool. memcheck and initcheck see memory by allocation: with the
# caching allocator on, they would see its blocks. initcheck also needs fresh memory left unwritten.
NO_CACHING_ENV = {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}
TOOL_ENV = {"memcheck": NO_CACHING_ENV, "initcheck": {**NO_CACHING_ENV, UNFILLED_MEMORY_ENV: "1"}}
COLUMNS = [
    "submission_id", "name", "dump", "problem_id", "language", "label", "why", "oracle", "strategy", "seed", "dtype",
    "case_index", "case_outcome", "tool", "status", "diagnosis", "kernel", "library_kernel", "errors", "report",
    "summary", "reason", "outcome_under_sanitizer", "wall_s", "sanitizer_version",
]


def settings(config: dict, cores: int | None = None) -> dict:
    """The stage's settings from the validated config: `sanitizer:` with its defaults, and the run's
    device and element budget. `jobs: auto` is the cores the run was given (`cores`), at most the
    machine's."""
    own = dict(config.get("sanitizer") or {})
    cfg = {k: own.get(k, v) for k, v in DEFAULTS.items()}
    cfg["tools"] = list(cfg["tools"])
    jobs = cfg["jobs"]
    cfg["jobs"] = max(1, min(cores or machine_cores(), machine_cores()) if jobs == "auto" else int(jobs))
    for key in ("timeout_s", "budget_s", "exit_wait_s"):
        cfg[key] = float(cfg[key])
    cfg["device"] = config.get("device", "auto")
    cfg["budget"] = int(config.get("budget", {}).get("cuda", 1 << 20))
    return cfg


# -- which cases ---------------------------------------------------------------------------------

def select_cases(cases: pd.DataFrame, submissions: pd.DataFrame, passing: bool = False,
                 limit: int | None = None) -> pd.DataFrame:
    """One fuzz case per CUDA or Triton submission to run under the sanitizer, with `why`: its first
    failing case (`flagged`, or `nondeterministic` when that case's second run differed), and with
    `passing` the first case of each submission that passed (`representative`). Flagged ones first.
    A case that ran the submission's own CUDA comes before one that fell back to PyTorch's, and one
    that launched its kernel before one that ended `compile_error` (NO_LAUNCH); a flagged submission
    whose every failing case ended before its kernel launched runs its first passing case instead,
    where one ran its own kernel (`why` stays `flagged`; `case_outcome` says pass)."""

    languages = submissions.set_index("submission_id")["language"]
    fuzz = cases[(cases["oracle"] == "fuzz") & cases["submission_id"].map(languages).isin(KERNEL_LANGUAGES)]
    fell_back = fuzz["cuda_ran"].eq(CudaRan.NO) if "cuda_ran" in fuzz else pd.Series(False, index=fuzz.index)
    fuzz = fuzz.assign(_fell_back=fell_back, _no_launch=fuzz["outcome"].isin(NO_LAUNCH))
    chosen = []
    for _, group in fuzz.groupby("submission_id", sort=True):
        group = group.sort_values(["_fell_back", "_no_launch", *FIRST_FAILURE_ORDER])
        bad = group[group["outcome"].isin(FLAGGING)]
        ran = group[(group["outcome"] == Outcome.PASS) & ~group["_fell_back"]]
        if len(bad):
            row = (ran if bad["_no_launch"].all() and len(ran) else bad).iloc[0].to_dict()
            row["why"] = "nondeterministic" if row.get("diagnosis") == "nondeterministic" else "flagged"
        elif passing and (group["outcome"] == Outcome.PASS).any():
            row = dict(group[group["outcome"] == Outcome.PASS].iloc[0].to_dict(), why="representative")
        else:
            continue
        chosen.append({k: v for k, v in row.items() if k not in ("_fell_back", "_no_launch")})
    rank = {"nondeterministic": 0, "flagged": 1, "representative": 2}
    chosen.sort(key=lambda r: (rank[r["why"]], r["submission_id"]))
    return pd.DataFrame(chosen[:limit] if limit else chosen)


def only_pytorch_ran(case: Mapping) -> bool:
    """Whether the case ran none of its CUDA submission's own kernels (its `cuda_ran` is no: the build
    failed, or what built was never called, and PyTorch computed the answer): under the sanitizer the
    tools would watch the harness's kernels alone."""
    return case.get("cuda_ran") == CudaRan.NO


def pytorch_only_reason(case: Mapping) -> str:
    """The `not_run` reason of a case that ran none of the submission's own CUDA."""
    why = NEVER_RAN.get(case.get("cuda_build"), "its CUDA never ran")
    return (f"this case {ONLY_PYTORCH_RAN} ({why}: results/cuda_builds.parquet); its kernels were all "
            "PyTorch's, which the sanitizer would watch in its place")


# -- running it -----------------------------------------------------------------------------------

def sanitizer_command(cfg: dict, tool: str, log_file: Path) -> list[str]:
    """The command the worker runs under for `tool`. The report goes to `log_file`, never into the
    worker's own output; the path is absolute, since the sanitizer starts in the worker's scratch
    folder and opens it from there, with `%` doubled (the sanitizer expands `%p` and `%q{VAR}`)."""
    path = str(Path(log_file).absolute()).replace("%", "%%")
    return [cfg["executable"], "--tool", tool, "--log-file", path, "--print-limit", str(cfg["print_limit"]),
            "--report-api-errors", "no",  # torch and Triton probe the driver; its refusals are not the kernel's
            "--launch-timeout", "0",  # the worker imports torch before CUDA starts; our own time limit bounds it
            "--target-processes", "application-only",  # the worker, not the compilers it starts
            "--destroy-on-device-error", "kernel",  # a faulting kernel is stopped; the worker's context lives on
            "--show-backtrace", "device"]  # the host's frames are the Python interpreter's


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


def _sanitizer_output(run_dir: Path) -> str:
    """What the sanitizer printed to the worker's output instead of its log (its own `=========`
    lines), else the output's last lines: why a run left no log."""
    text = "".join(p.read_text(errors="replace") for p in sorted(run_dir.glob("worker-*.log")))
    own = [line.strip() for line in text.splitlines() if line.startswith("=========")]
    return (" | ".join(own) or " | ".join(text.strip().splitlines()[-3:]))[:300]


def _ending(tool: str, report: Path, wrapper: subprocess.Popen | None, cfg: dict, run_dir: Path) -> str:
    """Why a run without findings has no summary, in words: no log at all (its own output says why),
    or a log cut short, because the sanitizer was killed after `exit_wait_s` or ended early."""
    if not report.exists():
        return f"{tool} wrote no log at {report}; its output: {_sanitizer_output(run_dir) or '(none)'}"
    code = wrapper.returncode if wrapper is not None else None
    if code == -signal.SIGKILL:
        return (f"{tool}'s log {report} has no summary: compute-sanitizer had not ended {cfg['exit_wait_s']:g} s "
                "after the worker was stopped and was killed (sanitizer.exit_wait_s)")
    ended = f" (compute-sanitizer exit code {code})" if code is not None else ""
    return f"{tool}'s log {report} has no summary: the run did not finish{ended}"


def sanitize_case(sub: Submission, case: dict, tool: str, cfg: dict, log_dir: Path, device: str = "cuda",
                  version: str | None = None, limit_s: float | None = None) -> list[dict]:
    """Rows for one case under one tool: one per diagnosis found, or one `clean` / `timeout` /
    `incomplete` row whose reason says what the sanitizer and the case did. The run gets
    `timeout_s`, or `limit_s` when less is left of the stage's budget. `device` is for tests, which
    run a stand-in sanitizer on the CPU."""
    limit = cfg["timeout_s"] if limit_s is None else min(cfg["timeout_s"], limit_s)
    run_dir = Path(log_dir).absolute() / f"{sub.submission_id[:16]}-{tool}"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    report = run_dir / "compute-sanitizer.log"
    worker = Worker(device, cfg["budget"], str(run_dir), wrapper=sanitizer_command(cfg, tool, report),
                    extra_env=TOOL_ENV.get(tool), explain=False)
    worker.load_timeout = limit
    worker.exit_wait_s = worker.wrapper_grace_s = cfg["exit_wait_s"]
    base = dict(_base(sub, case), tool=tool, sanitizer_version=version)
    start = time.monotonic()
    wrapper, case_ran = None, False
    try:
        loaded, _ = request_with_retry(worker, Load(job_of(sub)), limit, retries=0)
        wrapper = worker.proc
        worker.job = job_of(sub)
        if loaded.get("outcome") in DIED:
            result = {"outcome": loaded["outcome"], "reason": f"loading the submission: {loaded.get('reason')}"}
        else:
            case_ran = True
            left = max(start + limit - time.monotonic(), 1.0)
            result, _ = request_with_retry(worker, _message(sub, case), left, retries=0)
    finally:
        worker.stop()
    base.update(outcome_under_sanitizer=result.get("outcome"), wall_s=time.monotonic() - start)
    found = parse_report(report.read_text(errors="replace") if report.exists() else "", tool)
    if found.diagnoses:
        return [dict(base, status=SanitizerStatus.FOUND, diagnosis=d.diagnosis, kernel=d.kernel,
                     library_kernel=d.library_kernel, errors=d.errors, report=d.report, summary=found.summary,
                     reason=f"{tool}: {'; '.join(d.headlines)}"[:500]) for d in found.diagnoses]
    ending = None if found.summary is not None else _ending(tool, report, wrapper, cfg, run_dir)
    status, reason = run_status(tool, found.summary, found.notes, result, case_ran, limit, cfg["timeout_s"], ending)
    return [dict(base, status=status, summary=found.summary, errors=0, reason=reason[:500])]


def run_status(tool: str, summary: str | None, notes: list[str], result: Mapping, case_ran: bool, limit: float,
               timeout_s: float, ending: str | None = None) -> tuple[SanitizerStatus, str]:
    """(status, reason) of a run in which `tool` found nothing: `clean` only when the tool wrote its
    `summary` and the case ran the candidate's call to its end under it (CALL_ENDED); a run cut by
    the stage's budget (a `limit` under `timeout_s`), one without a summary (`ending` says why), one
    whose submission did not load (`case_ran` False) or whose case ended before the call did, is
    `incomplete`; a case past the run's own limit is a `timeout`."""
    incomplete = SanitizerStatus.INCOMPLETE
    outcome = result.get("outcome")
    case_end = f"the case ended {outcome}: {result.get('reason', '')}".rstrip(": ")
    said = "; ".join([*notes, summary or "no summary"])
    if outcome == Outcome.TIMEOUT and limit < timeout_s:
        # the stage's budget ran out, not the run's own limit: nothing said about the kernel
        return incomplete, f"cut at {limit:g} s under {tool}, what was left of sanitizer.budget_s: {said}; {case_end}"
    if outcome == Outcome.TIMEOUT:
        return SanitizerStatus.TIMEOUT, (f"no answer within {limit:g} s under {tool} (sanitizer.timeout_s): {said}; "
                                         f"{case_end}")
    if summary is None:
        return incomplete, f"{ending or f'{tool} wrote no summary'}; {case_end}"
    if any("before first instrumented API call" in n for n in notes):
        return incomplete, f"{tool} checked nothing: {said}; {case_end}"
    if not case_ran:
        return incomplete, f"{tool} checked no case: the submission did not load under it; {said}; {case_end}"
    if outcome not in CALL_ENDED:
        return incomplete, (f"the case did not run the candidate's call to its end under {tool}, so its summary "
                            f"covers only what ran before: {said}; {case_end}")
    return SanitizerStatus.CLEAN, f"{tool}: {said}; the case ended {outcome}"


def not_run_rows(subs: dict[str, Submission], runs: list[tuple[str, dict]], reason: str) -> list[dict]:
    """One `not_run` row per (tool, case) run, with the reason."""
    return [dict(_base(subs[case["submission_id"]], case), tool=tool, status=SanitizerStatus.NOT_RUN, reason=reason)
            for tool, case in runs]


def run_sanitizer(cases_path: str, submissions_path: str, manifests: list[str], config: dict, out: str,
                  log_dir: str, cores: int | None = None, result_cache: str | None = None) -> pd.DataFrame:
    """The sanitizer table of the run: the selected cases under each tool (in the order of `tools`,
    each over the selected cases, flagged ones first), `jobs` runs at a time (`auto`: `cores`), until
    the stage's budget is spent, or `not_run` rows saying why. With `result_cache` (a folder), a run
    an identical one finished is read from there (`result_cache.py`), costing none of the budget."""

    cfg = settings(config, cores)
    subs = {s.submission_id: s for s in read_manifests(manifests)}
    selected = select_cases(read_parquet(cases_path, "cases"), read_parquet(submissions_path, "submissions"),
                            cfg["passing"], cfg["max_submissions"])
    if len(selected):
        selected = selected[selected["submission_id"].isin(subs)]
    runs, pytorch_only, chosen = [], [], selected.to_dict("records")
    for tool, case in ((t, c) for t in cfg["tools"] for c in chosen):
        if only_pytorch_ran(case):
            pytorch_only += not_run_rows(subs, [(tool, case)], pytorch_only_reason(case))
        else:
            runs.append((tool, case))
    executable, why = availability(cfg)
    log.info("sanitizer: %d CUDA/Triton submissions selected (%s), tools %s: %d runs, %d at a time, %.0f s limit "
             "per run, %s for the stage", len(selected), dict(selected["why"].value_counts()) if len(selected) else {},
             ", ".join(cfg["tools"]), len(runs), cfg["jobs"], cfg["timeout_s"],
             f"{cfg['budget_s']:.0f} s" if cfg["budget_s"] > 0 else "no budget")
    if pytorch_only:
        log.info("sanitizer: %d runs not_run: their case %s (%d submissions)", len(pytorch_only), ONLY_PYTORCH_RAN,
                 len({r["submission_id"] for r in pytorch_only}))
    if executable is None:
        log.warning("NO SANITIZER: %s. Every one of the %d selected submissions gets a `not_run` row per tool; "
                    "memory past a kernel's own buffers stays unseen on a GPU (results/sanitizer.md says so).",
                    why, len(selected))
        rows = not_run_rows(subs, runs, why)
    else:
        version = sanitizer_version(executable)
        log.info("sanitizer: %s (%s) on %s", executable, version, why)
        scope = {k: v for k, v in cfg.items() if k not in RUN_INDEPENDENT}
        cache = ResultCache(result_cache, dict(scope, version=version), "cuda", None)
        rows = _run_all(runs, subs, cfg, Path(log_dir), version, cache)
        if cache.hits:
            log.info("sanitizer: %d of %d runs read from the results cache %s", cache.hits, len(runs), result_cache)
    df = pd.DataFrame(rows + pytorch_only, columns=COLUMNS)
    write_parquet(df, out)
    counts = df["status"].value_counts().to_dict() if len(df) else {}
    if len(df) and counts.get(SanitizerStatus.NOT_RUN, 0) == len(df):
        log.warning("NO SANITIZER: all %d rows are not_run (%s)", len(df), df["reason"].iloc[0])
    log.info("sanitizer: %d rows, by status %s", len(df), counts)
    return df


def _run_all(runs: list[tuple[str, dict]], subs: dict[str, Submission], cfg: dict, log_dir: Path,
             version: str, cache: ResultCache) -> list[dict]:
    """Every run, `jobs` at a time in their order; a run starts only while the stage's budget lasts,
    with what is left of it as its limit, unless `cache` has it. The rows keep the runs' order; those
    never started are `not_run`, saying after how many runs the budget was spent."""
    deadline = time.monotonic() + cfg["budget_s"] if cfg["budget_s"] > 0 else None

    def one(i: int, tool: str, case: dict) -> list[dict] | None:
        sub = subs[case["submission_id"]]
        identity = {"submission": submission_identity(sub), "tool": tool,
                    "case": {k: case.get(k) for k in CASE_IDENTITY}}
        got = cache.get(SANITIZER, identity)
        if got is not None:
            return got
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return None
        got = sanitize_case(sub, case, tool, cfg, log_dir, version=version, limit_s=left)
        if all(r["status"] in FINISHED for r in got):  # one cut short or unable to finish is run again next time
            cache.put(SANITIZER, identity, got)
        log.info("sanitizer %d/%d %s %s: %s", i + 1, len(runs), sub.name, tool,
                 "; ".join(f"{r['status']} {r.get('diagnosis') or ''} {r.get('kernel') or ''}".strip() for r in got))
        return got

    with ThreadPoolExecutor(max_workers=cfg["jobs"], thread_name_prefix="sanitizer") as pool:
        done = list(pool.map(one, range(len(runs)), *zip(*runs))) if runs else []
    started = sum(got is not None for got in done)
    reason = (f"the sanitizer stage's budget (sanitizer.budget_s: {cfg['budget_s']:g} s) was spent "
              f"after {started} of {len(runs)} runs")
    if started < len(runs):
        log.warning("sanitizer: %s; the other %d are not_run", reason, len(runs) - started)
    return [row for run, got in zip(runs, done) for row in (got if got is not None else
                                                            not_run_rows(subs, [run], reason))]


def sanitizer_markdown(table: pd.DataFrame) -> str:
    """results/sanitizer.md: what the stage saw, in words (the uncertainty statement is written
    before it and cannot say), and one line per run that found something or did not finish."""
    counts = table["status"].value_counts().to_dict() if len(table) else {}
    lines = ["# compute-sanitizer", "",
             f"From `results/tables/sanitizer.parquet`: {len(table)} rows, by status {counts or 'none'}.", "",
             *memory_safety_lines(table if len(table) else None), ""]
    shown = table[~table["status"].isin([SanitizerStatus.CLEAN, SanitizerStatus.NOT_RUN])] if len(table) else table
    if len(shown):
        lines += ["| submission | tool | status | diagnosis | kernel | reason |", "|---|---|---|---|---|---|"]
        for r in shown.to_dict("records"):
            blank = {k: r.get(k) if pd.notna(r.get(k)) else "" for k in ("diagnosis", "kernel")}  # NaN read back
            cells = [r["name"], r["tool"], r["status"], blank["diagnosis"], blank["kernel"],
                     " ".join(str(r.get("reason") or "").split())[:200]]
            lines.append("| " + " | ".join(str(c).replace("|", "/") for c in cells) + " |")
    return "\n".join(lines) + "\n"
