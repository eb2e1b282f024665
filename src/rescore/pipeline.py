"""The pipeline's stages as plain functions; `workflow/scripts/*.py` are shims over these."""

from __future__ import annotations

import json
import logging
import zlib
from pathlib import Path

import pandas as pd

from rescore.dumps import read_dump
from rescore.problem import submission_from_dict, submission_to_dict
from rescore.runner import Progress, RunConfig, plan_cases, resolve_device, run_submission
from rescore.sandbox import Worker
from rescore.tables import read_parquet, write_parquet, write_text

log = logging.getLogger("rescore")


def setup_logging(path: str | None) -> None:
    """Log to the rule's log file (quiet), and nowhere else."""
    handlers: list[logging.Handler] = [logging.FileHandler(path)] if path else [logging.StreamHandler()]
    logging.basicConfig(
        level=logging.INFO, handlers=handlers, force=True, format="%(asctime)s %(levelname)s %(message)s"
    )


def run_config(config: dict) -> RunConfig:
    """The run's settings from the validated Snakemake config."""
    device = resolve_device(config.get("device", "auto"))
    fuzz = config["fuzz"]
    strategies = dict(fuzz["strategies"])
    for name in config.get("study", {}).get("strategies", []):
        strategies.setdefault(name, int(config["study"]["seeds"]))
    return RunConfig(
        device=device,
        master_seed=int(config.get("master_seed", 0)),
        strategies=strategies,
        dtypes=tuple(fuzz["dtypes"]),
        fixed_profile=config["fixed"]["profile"],
        fixed_dtype=config["fixed"].get("dtype", "float32"),
        calibration=dict(config.get("calibration", {}).get("strategies", {})),
        timeout_s=float(config.get("timeout_s", 120)),
        budget=int(config["budget"][device]),
    )


def ingest(name: str, spec: dict, out_submissions: str, out_manifest: str) -> None:
    subs = read_dump(name, spec)
    rows = [s.row() for s in subs]
    write_parquet(pd.DataFrame(rows), out_submissions, "submissions")
    write_text(json.dumps([submission_to_dict(s) for s in subs]), out_manifest)
    log.info("dump %s: %d submissions", name, len(subs))


def shard_of(submission_id: str, shards: int) -> int:
    return zlib.crc32(submission_id.encode()) % shards


def run_shard(manifest: str, shard: int, shards: int, config: dict, out_cases: str, log_dir: str) -> None:
    """Run every submission of one shard; write its case rows."""
    cfg = run_config(config)
    subs = [submission_from_dict(d) for d in json.loads(Path(manifest).read_text())]
    mine = [s for s in subs if shard_of(s.submission_id, shards) == shard]
    total = sum(len(plan_cases(s, cfg)) for s in mine)
    progress = Progress(total, label=f"shard {shard}: ")
    worker = Worker(cfg.device, cfg.budget, log_dir)
    rows: list[dict] = []
    try:
        for sub in mine:
            sub_rows = run_submission(sub, cfg, worker, progress=progress)
            rows += sub_rows
            bad = sum(r["outcome"] not in ("pass", "skipped", "declined") for r in sub_rows)
            log.info("%s: %d cases, %d flagged", sub.name, len(sub_rows), bad)
    finally:
        worker.stop()
        progress.close()
    write_parquet(pd.DataFrame(rows), out_cases, "cases")


def concat_tables(paths: list[str], table: str, out: str) -> None:
    frames = [read_parquet(p, table) for p in paths]
    frames = [f for f in frames if not f.empty]
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    write_parquet(df, out, table)


def corpus_catalog(out_table: str, out_markdown: str) -> None:
    from rescore.corpus.catalog import catalog_markdown, catalog_rows, load_corpus

    subs = load_corpus()
    write_parquet(pd.DataFrame(catalog_rows(subs)), out_table, "submissions")
    write_text(catalog_markdown(subs), out_markdown)


def failures(cases: str, submissions: str, out: str) -> None:
    from rescore.study import failures_table

    write_parquet(
        failures_table(read_parquet(cases, "cases"), read_parquet(submissions, "submissions")), out, "failures"
    )


def illusion(cases: str, submissions: str, out: str) -> None:
    from rescore.study import illusion_table

    write_parquet(illusion_table(read_parquet(cases, "cases"), read_parquet(submissions, "submissions")), out)


def verdicts(illusion_path: str, outputs: list[str]) -> None:
    from rescore.figures import verdicts_figure

    verdicts_figure(read_parquet(illusion_path), outputs)
