"""The timing stage: every submission of the configured dumps timed on the GPU, one row each in
results/tables/timing.parquet (ModelNew's forward and the reference Model's, `timing.py`).

The kernels run in a sandboxed worker (`sandbox.py`), as the check's do; this process sends one
request per submission and writes the table. A submission that cannot be read, crashes, hangs or
cannot run here gets a row with its status and reason, and the stage goes on. On a machine without
a CUDA GPU no worker starts: every row is `skipped` (the Triton interpreter's times mean nothing),
and the log says so at the top and at the end.

With a results cache (`result_cache.py`), a submission an identical run timed (same source, code,
settings, GPU model and driver) is read from there, as its verdicts are: a warm run starts no worker
for it. Only rows that measured (`ok`) are stored; delete the cache to measure them again.
"""

from __future__ import annotations

import logging
import os
import time

import pandas as pd

from rescore.engine.result_cache import TIMING, ResultCache, submission_identity
from rescore.engine.sandbox import Worker, run_with_retry
from rescore.model.outcomes import DIED, NEEDS_GPU, Outcome, RunStatus
from rescore.model.records import Submission, read_manifests
from rescore.model.run import DEFAULT_BUDGET
from rescore.model.tables import SCHEMAS, write_parquet
from rescore.runtime.device import installed_versions, timing_device
from rescore.worker.protocol import Load, Time, job_of

log = logging.getLogger("rescore")

DEFAULTS = {"warmup": 10, "repeats": 100, "budget_s": 2.0}
ROW_INDEPENDENT = ("dumps",)  # a setting that decides no submission's row (`result_cache.py`'s scope)


def settings(config: dict, default_dumps: list[str]) -> dict:
    """The stage's settings from the validated config: `timing:` (dumps, warmup, repeats, budget_s)
    with its defaults, and the run's device, fixed-check dtype, per-case timeout and budget."""
    own = dict(config.get("timing") or {})
    device = config.get("device", "auto")
    return {
        "dumps": list(own.get("dumps") or default_dumps),
        "warmup": int(own.get("warmup", DEFAULTS["warmup"])),
        "repeats": int(own.get("repeats", DEFAULTS["repeats"])),
        "budget_s": float(own.get("budget_s", DEFAULTS["budget_s"])),
        "device": device,
        "dtype": config.get("fixed", {}).get("dtype", "float32"),
        "timeout_s": float(config.get("timeout_s", 120)),
        "budget": int(config.get("budget", {}).get("cuda", DEFAULT_BUDGET["cuda"])),
    }


def shares_a_gpu(device: str) -> bool:
    """Whether the run's checks may be on a GPU this stage then shares: on `cuda`, and on `auto` where
    the NVIDIA driver's device node is (an answer without importing torch, for the DAG's order only;
    the stage itself asks torch). The timing rule then waits for every check."""
    return device == "cuda" or (device == "auto" and os.path.exists("/dev/nvidiactl"))


def base_row(sub: Submission) -> dict:
    return {
        "submission_id": sub.submission_id,
        "name": sub.name,
        "dump": sub.dump,
        "problem_id": sub.problem.problem_id,
        "op": sub.problem.op,
        "language": sub.language,
        "label": sub.label,
        "control": sub.control,
    }


def skipped_rows(subs: list[Submission], reason: str, cfg: dict) -> list[dict]:
    """One `skipped` row per submission, with the reason and the installed versions."""
    env = {"device": "cpu", **installed_versions(), "dtype": cfg["dtype"]}
    return [dict(base_row(s), **env, status=Outcome.SKIPPED, reason=reason) for s in subs]


def row_of(sub: Submission, result: dict, wall_s: float) -> dict:
    """A table row from a worker's answer (or the sandbox's account of a worker that died)."""
    row = dict(base_row(sub), wall_s=wall_s)
    names = {"outcome": "status", "ref_outcome": "ref_status"}
    known = set(SCHEMAS["timing"].names)
    for key, value in result.items():
        key = names.get(key, key)
        if key in known:
            row[key] = value
        else:
            log.info("%s: the worker's answer has a field the timing table lacks: %s (left out)", sub.name, key)
    if row.get("median_ms") and row.get("ref_median_ms") and row.get("timed_output", Outcome.PASS) == Outcome.PASS:
        row["speedup"] = row["ref_median_ms"] / row["median_ms"]  # never of times whose output was wrong
    return row


def time_submissions(subs: list[Submission], cfg: dict, log_dir: str, device: str = "cuda",
                     host_clock: bool = False, flush_bytes: int | None = None,
                     result_cache: str | None = None) -> list[dict]:
    """Every submission timed in one worker, one after another (never two kernels on the GPU at once).
    `device`, `host_clock` and `flush_bytes` are for tests, which time CPU tensors by the host's clock
    (Executor.run_timing); the stage itself times on CUDA with CUDA events. With `result_cache` (a
    folder), a row an identical run measured is read from there, and a row measured is stored."""
    worker = Worker(device, cfg["budget"], log_dir)  # its process starts with the first request
    request = Time(cfg["dtype"], cfg["warmup"], cfg["repeats"], cfg["budget_s"], host_clock, flush_bytes)
    scope = {k: v for k, v in cfg.items() if k not in ROW_INDEPENDENT}
    cache = ResultCache(result_cache, dict(scope, host_clock=host_clock, flush_bytes=flush_bytes), device)
    # warm-up (compiles) and two measurements of at most budget_s each, past the usual case timeout
    timeout = cfg["timeout_s"] + 2 * cfg["budget_s"]
    rows: list[dict] = []
    start = time.monotonic()
    try:
        for i, sub in enumerate(subs, 1):
            t0 = time.monotonic()
            error = (sub.extra or {}).get("ingest_error")
            identity = submission_identity(sub)
            stored = None if error else cache.get(TIMING, identity)
            if stored is not None:
                rows.append(stored)
            elif error:
                rows.append(dict(base_row(sub), dtype=cfg["dtype"], status=Outcome.SKIPPED,
                                 reason=f"not read at ingest: {error}"[:500]))
            else:
                load = run_with_retry(worker, Load(job_of(sub)), worker.load_timeout)
                worker.job = job_of(sub)
                if load.get("outcome") in DIED:
                    result = {"outcome": load["outcome"], "reason": f"loading the submission: {load.get('reason')}",
                              "dtype": cfg["dtype"]}
                else:
                    result = run_with_retry(worker, request, timeout)
                rows.append(row_of(sub, result, time.monotonic() - t0))
                if rows[-1].get("status") == RunStatus.OK:
                    cache.put(TIMING, identity, rows[-1])
            r = rows[-1]
            left = (time.monotonic() - start) / i * (len(subs) - i)
            ok = r.get("status") == RunStatus.OK
            shown = f"{r['median_ms']:.4f} ms median" if ok else f"{r.get('reason', '')}"[:120]
            if r.get("timed_output") not in (None, Outcome.PASS):
                shown += f", timed output {r['timed_output']}: not used ({r.get('timed_reason', '')})"[:200]
            read = ", read from the results cache" if stored is not None else ""
            log.info("timing %d/%d %s: %s %s%s (~%.0f s left)", i, len(subs), sub.name, r.get("status"), shown, read,
                     left)
    finally:
        worker.stop()
    if cache.hits:
        log.info("timing: %d of %d submissions read from the results cache %s", cache.hits, len(subs), result_cache)
    return rows


def run_timing(manifests: dict[str, str], cfg: dict, out: str, log_dir: str,
               result_cache: str | None = None) -> pd.DataFrame:
    """The timing table of the dumps in `manifests` ({dump: manifest.json}), written to `out`; rows an
    identical run measured read from `result_cache` (a folder), where given."""
    subs = read_manifests([manifests[name] for name in cfg["dumps"]])
    device, why = timing_device(cfg["device"])
    log.info("timing %d submissions of %s on %s (%s); dtype %s, %d warm-up calls, %d repeats, budget %.1f s each",
             len(subs), ", ".join(cfg["dumps"]), device, why, cfg["dtype"], cfg["warmup"], cfg["repeats"],
             cfg["budget_s"])
    if device != "cuda":
        log.warning("NO TIMINGS: %s (%s). Every one of the %d rows of %s is `skipped`; P4's d_ms_median and "
                    "d_perf_pct stay NaN. Run on a machine with a CUDA GPU to time kernels.",
                    NEEDS_GPU, why, len(subs), out)
        rows = skipped_rows(subs, NEEDS_GPU, cfg)
    else:
        rows = time_submissions(subs, cfg, log_dir, result_cache=result_cache)
    df = pd.DataFrame(rows)
    write_parquet(df, out, "timing")
    counts = df["status"].value_counts().to_dict() if len(df) else {}
    if len(df) and counts.get(Outcome.SKIPPED, 0) == len(df):
        log.warning("NO TIMINGS: all %d rows are skipped (%s)", len(df), df["reason"].iloc[0])
    log.info("timing: %d rows, by status %s", len(df), counts)
    return df
