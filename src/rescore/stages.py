"""The pipeline's stages, one function per Snakemake rule; `workflow/scripts/*.py` are shims over these."""

from __future__ import annotations

import json
import logging
import re
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd

from rescore.analysis import figures, tolerance_study
from rescore.analysis.causes import causes_table, load_classes, precision_summary
from rescore.analysis.cuda_usage import gathered_builds
from rescore.analysis.papers.stage import build as build_paper_table
from rescore.analysis.rescored import rescored_table
from rescore.analysis.strategies_study import budget_table, by_class_table, heatmap_table, strategies_table, study_cases
from rescore.analysis.study import failures_table, illusion_table, reproducer
from rescore.analysis.tolerance_study import control_ratios, sweep_table, tightening_table, tolerances_table
from rescore.analysis.uncertainty import statement
from rescore.corpus.catalog import catalog_markdown, catalog_rows, load_corpus
from rescore.engine import phase_log
from rescore.engine import shards as shards_
from rescore.engine.config import run_config
from rescore.engine.cuda_build import write_builds
from rescore.engine.degenerate import degenerate_table, owned_problems
from rescore.engine.gpus import pin_process, shard_slot, with_gpu, worker_gpu
from rescore.engine.phase_log import PhaseLog
from rescore.engine.plan import plan_cases
from rescore.engine.progress import ShardProgress, write_plan
from rescore.engine.result_cache import NULLS, SUBMISSION, ResultCache, problem_identity, submission_identity
from rescore.engine.runner import run_submission
from rescore.engine.sandbox import Worker
from rescore.engine.sanitizer import run_sanitizer, sanitizer_markdown
from rescore.engine.shrink import first_fuzz_failure, shrunk_record
from rescore.engine.timing_stage import run_timing
from rescore.engine.timing_stage import settings as timing_settings
from rescore.ingest import read_dump
from rescore.model.outcomes import FLAGGING, HARNESS_FAULT, harness_fault, settled_reason
from rescore.model.records import LABELS, Problem, Submission, read_manifests, submission_to_dict
from rescore.model.run import RunConfig
from rescore.model.settings import effective_config, setting_name
from rescore.model.tables import empty_frame, read_parquet, write_parquet, write_text
from rescore.runtime.device import require_device, resolve_device
from rescore.static.study import run_study, static_figures

log = logging.getLogger("rescore")
BUILD_TIMEOUT_S = 1800.0  # one CUDA C build in a check shard, cold
# Compiles at a time in each of a check shard's CUDA C builds (ninja's MAX_JOBS): the shards share the
# machine's cores, a core each, and one at a time ninja starts no second compile after a failed first.
# Torch writes the binding (main.cpp, g++) before the CUDA source (nvcc), so a binding that cannot
# compile (most of CUDA-L1's failing builds: `cpp_sources=""` beside a `functions` list) costs its
# g++ alone, not also an nvcc run beside it to its end.
SHARD_COMPILE_JOBS = 1
# The check shard's log lines that the tools read back (bench/phases.py, tools/shard_costs.py,
# tools/by_minute.py): its start (`shard K of N: ...`) and each submission's end (`NAME: N cases, ...`).
SHARD_LOG_LINE = re.compile(r"^(?P<at>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO "
                            r"(?:(?P<start>shard \d+ of \d+:)|(?P<name>\S+): \d+ cases)")
# Every import is at the top: none of these modules imports torch, triton or matplotlib when it is
# imported (the workers and the figure functions do, when they run), so a table stage starts without
# them (tests/test_layers.py).


def setup_logging(path: str | None) -> None:
    """Log to the rule's log file (quiet), and nowhere else."""
    handlers: list[logging.Handler] = [logging.FileHandler(path)] if path else [logging.StreamHandler()]
    logging.basicConfig(
        level=logging.INFO, handlers=handlers, force=True, format="%(asctime)s %(levelname)s %(message)s"
    )
    previous = sys.excepthook

    def log_and_raise(kind, value, tb):  # a failing stage leaves its traceback in its own log
        log.error("stage failed", exc_info=(kind, value, tb))
        previous(kind, value, tb)

    sys.excepthook = log_and_raise


def ingest(name: str, spec: dict, out_submissions: str, out_manifest: str) -> None:
    subs = read_dump(name, spec)
    shards_.note_cached_builds(subs)  # every shard of the run then deals the submissions out alike
    rows = [s.row() for s in subs]
    write_parquet(pd.DataFrame(rows), out_submissions, "submissions")
    write_text(json.dumps([submission_to_dict(s) for s in subs]), out_manifest)
    log.info("dump %s: %d submissions", name, len(subs))


def without_protocol_keys(rows: list[dict], shard: int) -> list[dict]:
    """The case rows without the worker protocol's own keys (`_alone`, `_explain`, ...), which the
    parent takes out as it reads an answer: one left in is a fault of rescore, logged, and dropped
    rather than lose every result of the shard to the table's schema."""
    leaked = sorted({key for row in rows for key in row if key.startswith("_")})
    if not leaked:
        return rows
    log.error("shard %d: the worker protocol's keys %s were left in its case rows (a fault of rescore, not of "
              "a kernel; please report it with this log): dropped", shard, ", ".join(leaked))
    return [{k: v for k, v in row.items() if not k.startswith("_")} for row in rows]


def run_shard(
    manifest: str, shard: int, shards: int, config: dict, out_cases: str, out_shrunk: str, log_dir: str,
    progress_dir: str | None = None, gpus: int = 1, out_phases: str | None = None, out_builds: str | None = None,
    usable_mib: int = 0, out_degenerate: str | None = None, result_cache: str | None = None,
) -> None:
    """Run every submission of one shard and write its case rows; shrink each flagged submission's
    first fuzz failure right after its cases, in the same worker (loaded, its kernels compiled) and
    beside the other shards rather than in a stage after all of them (24 s of a 198 s H200 run).
    With `progress_dir`, keep the shard's progress file there (`rescore.engine.progress`); nothing is printed.
    With `gpus` > 1 the shard's worker runs on its own GPU (`rescore.engine.gpus`). With `out_phases`,
    write where each submission's time went there (`engine/phase_log.py`). With `out_builds`, build the
    shard's CUDA C submissions (on a GPU; `engine/cuda_build.py`) and write their builds there: a shard
    waits for its own builds only, and runs its other submissions while they build (`building_first`).
    `usable_mib`: the GPU memory the shards' assignment weighs heavy submissions against
    (`shards.shard_assignment`), the same in every shard of the run. With `out_degenerate`, run the
    null candidates of the problems the shard owns (`degenerate.owned_problems`) in its worker after its
    submissions, and write their degenerate-problems rows there. With `result_cache` (a folder), a
    submission or problem whose result an identical run stored there is read, not run
    (`engine/result_cache.py`), and what this shard measures is stored."""
    began = time.monotonic()
    cfg = run_config(config)
    require_device(cfg.device)  # a device that cannot run here stops the stage with one line, not per-case crashes
    subs = read_manifests([manifest])
    assignment, weight = shards_.shard_assignment(subs, shards, cfg.device, gpus, usable_mib)
    runnable = shards_.runnable(subs)  # those recorded as unreadable at ingest have nothing to run
    planned = {s.submission_id: len(plan_cases(s, cfg)) for s in runnable}
    mine = [s for s in runnable if assignment[s.submission_id] == shard]
    cuda = {s.submission_id for s in mine if s.language == "cuda"} if out_builds else set()
    mine = building_first(mine, cuda)
    total = sum(planned[s.submission_id] for s in mine)
    slot = shard_slot(shard, gpus)
    gpu = worker_gpu(slot)
    log.info("shard %d of %d: %d submissions, %d cases (%s setting on %s%s)", shard, shards, len(mine), total,
             setting_name(config, cfg.device), cfg.device,
             "" if slot is None else f", GPU slot {slot} of {gpus}: CUDA_VISIBLE_DEVICES={gpu}")  # costs from logs
    dump = Path(manifest).parent.name  # results/ingest/<dump>/manifest.json
    progress = None
    if progress_dir:
        plan = {k: {"submissions": 0, "cases": 0, "weight": 0.0} for k in range(shards)}
        for s in runnable:
            entry = plan[assignment[s.submission_id]]
            entry["submissions"] += 1
            entry["cases"] += planned[s.submission_id]
            entry["weight"] += weight[s.submission_id]
        write_plan(progress_dir, dump, plan)
        progress = ShardProgress(progress_dir, dump, shard,
                                 [(s.name, planned[s.submission_id], weight[s.submission_id]) for s in mine])
    cache = ResultCache(result_cache, config, cfg.device, gpu)
    stored = {s.submission_id: entry for s in mine
              if (entry := cache.get(SUBMISSION, submission_identity(s))) is not None}
    owned = owned_problems(subs, assignment, shard) if out_degenerate else []
    stored_nulls = {i: row for i, p in enumerate(owned) if (row := cache.get(NULLS, problem_identity(*p))) is not None}
    if stored or stored_nulls:
        log.info("shard %d: %d of %d submissions and %d of %d problems' nulls read from the results cache %s",
                 shard, len(stored), len(mine), len(stored_nulls), len(owned), result_cache)
    to_run = len(mine) > len(stored) or len(owned) > len(stored_nulls)
    worker = Worker(cfg.device, cfg.budget, log_dir, gpu=gpu, explain=cfg.explain)
    built: dict[str, float] = {}
    rows: list[dict] = []
    shrunk: list[dict] = []
    phases: list[dict] = []
    builder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cuda-builds")
    building = None  # the shard's builds, running beside its other submissions until a CUDA one needs them
    try:
        if out_builds:
            if to_run:
                worker.prestart()  # its start runs beside the builds
            # Every source of the shard at once, each build's compiles one after another
            # (SHARD_COMPILE_JOBS).
            building = builder.submit(write_builds, [manifest], cfg.device, out_builds, jobs=None,
                                      timeout_s=BUILD_TIMEOUT_S, gpus=1, only={s.submission_id for s in mine},
                                      compile_jobs=SHARD_COMPILE_JOBS)
        for sub in mine:
            if sub.submission_id in stored:
                rows += read_stored(sub, stored[sub.submission_id], gpu, shrunk, phases, dump, shard)
                if progress:
                    progress.submission_done(sub.name)
                continue
            if sub.submission_id in cuda and building is not None:
                waiting = time.monotonic()
                builds, building = building.result(), None
                built = dict(zip(builds["submission_id"], builds["seconds"]))
                log.info("shard %d: its %d CUDA C builds done, %.1f s after its other submissions", shard,
                         len(builds), time.monotonic() - waiting)
            start = time.monotonic() - built.get(sub.submission_id, 0.0)  # its build is its time too
            worker.phases = spent = PhaseLog()
            spent.add(phase_log.BUILD, built.get(sub.submission_id, 0.0))
            measured = run_submission(sub, cfg, worker, progress=progress)
            sub_rows = with_gpu(measured, gpu)
            worker.phases = None
            rows += sub_rows
            bad = sum(r["outcome"] in FLAGGING for r in sub_rows)
            failure = first_fuzz_failure(sub_rows)
            if failure is not None:
                # shrinking spends what is left of the submission's budget, and nothing on a settled one
                deadline = start + cfg.submission_budget_s if cfg.submission_budget_s else None
                shrinking = time.monotonic()
                shrunk.append(shrunk_record(worker, sub, failure, cfg.device, cfg.timeout_s, deadline,
                                            settled_reason(sub_rows)))
                spent.add(phase_log.SHRINK, time.monotonic() - shrinking)
            elapsed, own = time.monotonic() - start, phase_log.case_seconds(sub_rows)
            phases += spent.rows(elapsed, own, dump=dump, shard=shard, submission_id=sub.submission_id, name=sub.name)
            note = f", its first fuzz failure shrunk in {shrunk[-1]['steps']} cases" if failure is not None else ""
            log.info("%s: %d cases, %d flagged%s (%.1f s for %.1f s of cases)", sub.name, len(sub_rows), bad, note,
                     elapsed, own)
            faults = [r["reason"] for r in sub_rows if harness_fault(r.get("outcome"), r.get("reason"))]
            if faults:
                log.warning("%s: %d cases skipped as %ss (rescore's bug, not the kernel's; report it with a case's "
                            "replay command): %s", sub.name, len(faults), HARNESS_FAULT, faults[0])
            else:  # a harness fault is rescore's, which the next run may not have: never stored
                cache.put(SUBMISSION, submission_identity(sub),
                          {"rows": measured, "shrunk": shrunk[-1] if failure is not None else None})
            if progress:
                progress.submission_done(sub.name)
        if building is not None:  # no CUDA submission waited for them
            building.result()  # its table is written, or its error raised, before the shard's
        if out_degenerate:
            nulls_began = time.monotonic()
            degenerate = nulls_of(owned, stored_nulls, cfg, worker, cache)
            log.info("shard %d: the null candidates of %d problems in %.1f s", shard, len(owned) - len(stored_nulls),
                     time.monotonic() - nulls_began)
    finally:
        worker.stop()
        builder.shutdown(wait=True)
    if progress:
        progress.close()
    log.info("shard %d: done in %.1f s%s", shard, time.monotonic() - began,
             "" if gpu is None else f" on CUDA_VISIBLE_DEVICES={gpu}")  # each GPU's busy time (scripts/gpu)
    write_parquet(pd.DataFrame(without_protocol_keys(rows, shard)), out_cases, "cases")
    write_parquet(pd.DataFrame(shrunk) if shrunk else empty_frame("shrunk"), out_shrunk, "shrunk")
    if out_phases:
        write_parquet(pd.DataFrame(phases) if phases else empty_frame("phases"), out_phases, "phases")
    if out_degenerate:
        write_parquet(degenerate, out_degenerate)


def read_stored(sub: Submission, entry: dict, gpu: str | None, shrunk: list[dict], phases: list[dict], dump: str,
                shard: int) -> list[dict]:
    """A submission's case rows as an identical run stored them (`result_cache`), on this shard's GPU
    slot; its shrunk failure added to `shrunk`, and one `result_cache` phase to `phases`."""
    began = time.monotonic()
    sub_rows = with_gpu(entry["rows"], gpu)
    if entry.get("shrunk") is not None:
        shrunk.append(entry["shrunk"])
    spent, took = PhaseLog(), time.monotonic() - began
    spent.add(phase_log.RESULT_CACHE, took)
    phases += spent.rows(took, phase_log.case_seconds(sub_rows), dump=dump, shard=shard,
                         submission_id=sub.submission_id, name=sub.name)
    log.info("%s: %d cases, %d flagged (read from the results cache: an identical run measured them)", sub.name,
             len(sub_rows), sum(r["outcome"] in FLAGGING for r in sub_rows))
    return sub_rows


def nulls_of(owned: list[tuple[str, Problem]], stored: dict[int, dict], cfg: RunConfig, worker: Worker,
             cache: ResultCache) -> pd.DataFrame:
    """The degenerate-problems rows of the `owned` problems, in their order: those in `stored` (by
    position) as stored, the others run in `worker` and stored."""
    missing = [p for i, p in enumerate(owned) if i not in stored]
    ran = degenerate_table(missing, cfg, worker=worker)
    measured = iter(ran.to_dict("records"))
    rows = []
    for i, problem in enumerate(owned):
        if i in stored:
            rows.append(stored[i])
        else:
            rows.append(next(measured))
            if not pd.isna(rows[-1]["degenerate"]):  # unknown: some null could not run, which another run may
                cache.put(NULLS, problem_identity(*problem), rows[-1])
    table = pd.DataFrame(rows, columns=ran.columns)
    table["degenerate"] = table["degenerate"].astype("boolean")
    return table


def building_first(subs: list, cuda: set[str]) -> list:
    """The shard's submissions in the order it runs them: those that need no CUDA build first (in the
    plan's order), then the CUDA C ones, so that the builds (30-50 s of nvcc each on a GPU machine)
    run beside the first rather than ahead of everything."""
    return [s for s in subs if s.submission_id not in cuda] + [s for s in subs if s.submission_id in cuda]


def gather(paths: list[str], table: str | None = None) -> pd.DataFrame:
    """The rows of some tables of one kind, in order (when none has any: the first, empty, with its
    columns)."""
    tables = [read_parquet(p, table) for p in paths]
    frames = [f for f in tables if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else (tables[0] if tables else pd.DataFrame())


def concat_tables(paths: list[str], table: str, out: str) -> None:
    write_parquet(gather(paths, table), out, table)


def corpus_catalog(out_table: str, out_markdown: str) -> None:
    subs = load_corpus()
    write_parquet(pd.DataFrame(catalog_rows(subs)), out_table, "submissions")
    write_text(catalog_markdown(subs), out_markdown)


def failures(cases: str, submissions: str, out: str, reproducers: str) -> None:
    """failures.parquet, and one self-contained reproducer (JSON) per flagged case."""
    table = failures_table(read_parquet(cases, "cases"), read_parquet(submissions, "submissions"))
    dump_of = read_parquet(submissions, "submissions").set_index("submission_id")["dump"].to_dict()
    folder = Path(reproducers)
    folder.mkdir(parents=True, exist_ok=True)
    for row in table.to_dict("records"):
        doc = reproducer(row, dump_of[row["submission_id"]])
        write_text(json.dumps(doc, indent=2, default=str), folder / f"{row['failure_id']}.json")
    write_parquet(table, out, "failures")


def illusion(cases: str, submissions: str, out: str, robustness_in_headline: bool = False) -> None:
    """illusion.parquet: the headline verdicts (robustness findings apart unless the config's
    `verdicts.robustness_in_headline` counts them)."""
    write_parquet(illusion_table(read_parquet(cases, "cases"), read_parquet(submissions, "submissions"),
                                 robustness_in_headline), out)


def causes(illusion_path: str, cases: str, submissions: str, classes: str, out: str) -> None:
    """The cause x bug-class table, and each cause's precision in the log."""
    table = causes_table(read_parquet(illusion_path), read_parquet(cases, "cases"),
                         read_parquet(submissions, "submissions"), load_classes(classes))
    write_parquet(table, out, "causes")
    for row in precision_summary(table).to_dict("records"):
        log.info("%s: %s on %d judged kernels, precision %.3f (95%% %.3f-%.3f); on %d judged cases, %.3f",
                 row["dump"], row["cause"], row["judged"], row["precision"], row["precision_low"],
                 row["precision_high"], row["case_judged"], row["case_precision"])


def verdicts(illusion_path: str, outputs: list[str]) -> None:
    figures.verdicts_figure(read_parquet(illusion_path), outputs)


def strategies(cases: str, submissions: str, seeds: int, out: dict[str, str], robustness_in_headline: bool = False
               ) -> None:
    """The strategy study: tables and figures (recall on headline evidence, unless the config counts
    robustness findings toward it)."""
    subs = read_parquet(submissions, "submissions")
    all_cases = read_parquet(cases, "cases")
    df = study_cases(all_cases, subs, seeds, robustness_in_headline)
    table = strategies_table(df)
    write_parquet(table, out["table"])
    write_parquet(by_class_table(df), out["by_class"])
    budget = budget_table(study_cases(all_cases, subs, robustness_in_headline=robustness_in_headline))
    write_parquet(budget, out["budget"])
    figures.recall_heatmap(heatmap_table(df, subs), [out["heatmap"]])
    figures.recall_vs_fp(table, [out["recall_fp"]])
    figures.recall_vs_budget(budget, [out["budget_fig"]])


def calibrate(cases: str, submissions: str, quantile: float, out: str) -> None:
    table = tolerance_study.calibrate(read_parquet(cases, "cases"), read_parquet(submissions, "submissions"), quantile)
    write_parquet(table, out)


def tolerances(
    cases: str, submissions: str, calibration: str, multiplier: float, sweep: list[float], out: dict[str, str]
) -> None:
    """The tolerance study: every policy side by side, tightening, multiplier sweep, figures."""
    c, s, cal = read_parquet(cases, "cases"), read_parquet(submissions, "submissions"), read_parquet(calibration)
    write_parquet(tolerances_table(c, s, cal, multiplier), out["table"])
    tight = tightening_table(cal, c, s, multiplier=multiplier)
    write_parquet(tight, out["tightening"])
    sw = sweep_table(c, s, cal, sweep)
    write_parquet(sw, out["sweep"])
    figures.tightening_figure(tight, [out["tightening_fig"]])
    figures.control_error_figure(control_ratios(c, s, cal, multiplier), [out["errors_fig"]])
    figures.sweep_figure(sw, [out["sweep_fig"]])


def uncertainty(cases: str, submissions: str, illusion_path: str, config: dict, out: str) -> None:
    text = statement(
        read_parquet(cases, "cases"), read_parquet(submissions, "submissions"), read_parquet(illusion_path), config,
    )
    write_text(text, out)


def sanitize(cases: str, submissions: str, manifests: list[str], config: dict, out: str, log_dir: str,
             gpu_slot: int | None = None, text_out: str | None = None, cores: int | None = None,
             result_cache: str | None = None) -> None:
    """results/tables/sanitizer.parquet: flagged CUDA/Triton kernels rerun under compute-sanitizer
    (on `gpu_slot`'s GPU where the host has several: rescore.engine.gpus), `cores` runs at a time
    where `sanitizer.jobs` is `auto`, and what it found in words (`text_out`: results/sanitizer.md);
    runs an identical one finished are read from `result_cache` (a folder)."""
    pin_process(gpu_slot)
    table = run_sanitizer(cases, submissions, manifests, config, out, log_dir, cores, result_cache)
    if text_out:
        write_text(sanitizer_markdown(table), text_out)


def cuda_builds(builds: list[str], cases: str, out: str) -> None:
    """results/cuda_builds.parquet: every dump's prebuild rows, `built` only where a case called what
    compiled and loaded (analysis/cuda_usage.py)."""
    write_parquet(gathered_builds(gather(builds), read_parquet(cases, "cases")), out)


def rescored(illusion_path: str, submissions_path: str, degenerate_path: str | None, out: str) -> None:
    """The rescored table from the illusion, submissions and degenerate-problems tables (no schema yet)."""
    degenerate = read_parquet(degenerate_path) if degenerate_path else None
    table = rescored_table(read_parquet(illusion_path), read_parquet(submissions_path, "submissions"), degenerate)
    write_parquet(table, out)


def static_archs(settings: dict) -> list[int]:
    """The archs the static study compiles for on this run's device (`light`'s where it applies)."""
    device = resolve_device(settings.get("device", "auto"))
    return list((effective_config(settings, device).get("static") or {}).get("archs") or (90, 80))


def static(
    manifests: list[str],
    out: dict[str, str],
    threads: int,
    cache_dir: str,
    archs: list[int] | None = None,
    sizes: str = "fixed",
) -> None:
    """Offline PTX metrics of every Triton submission, paired deltas, per-class summary, heatmap;
    each submission captured at `sizes` (rescore.static.study.capture_sizes)."""
    subs = read_manifests(manifests)
    run_study(subs, out, threads, cache_dir, list(archs or (90, 80)), sizes)


def static_vs_recall(table: str, illusion_path: str, out: str, arch: str) -> None:
    """Static metric deltas against the fuzz oracle's case-level recall per buggy variant."""
    pairs = read_parquet(table)
    ill = read_parquet(illusion_path)
    recall = pd.DataFrame(
        {"submission_id": ill["name"], "recall": ill["failed_cases"] / ill["total_cases"].where(ill["total_cases"] > 0)}
    )
    with tempfile.TemporaryDirectory() as tmp:
        paths = static_figures(pairs, recall.dropna(), tmp, arch=arch) if len(pairs) else []
        drawn = [p for p in paths if Path(p).name == "static_delta_vs_recall.png"]
        if drawn:
            shutil.copyfile(drawn[0], out)
        else:
            why = "" if ill["label"].isin(LABELS).any() else (
                f"\n{figures.NO_LABELS}: a pair is a Triton kernel labelled buggy and the control it names")
            figures.empty_figure("no comparable (control, variant) pairs to draw" + why, [out])


def timing(config: dict, default_dumps: list[str], manifests: list[str], out: str, log_dir: str,
           gpu_slot: int | None = None, result_cache: str | None = None) -> None:
    """The timing table: every submission of the configured dumps timed on the GPU (`manifests` in the
    order of the stage's dumps), on `gpu_slot`'s GPU where the host has several; rows an identical run
    measured read from `result_cache` (a folder)."""
    pin_process(gpu_slot)
    cfg = timing_settings(config, default_dumps)
    run_timing(dict(zip(cfg["dumps"], manifests)), cfg, out, log_dir, result_cache)


def paper_table(table: str, inputs: dict[str, str], outputs: dict[str, str], opts: dict) -> None:
    """One of the preprints' tables recomputed from this run's tables (rescore.analysis.papers)."""
    build_paper_table(table, inputs, outputs, opts)
