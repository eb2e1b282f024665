"""Every Parquet table rescore writes: one schema per table, defined here and nowhere else.

Tables are written atomically (temporary file, then rename), so an interrupted run never leaves a
half-written table that a later step would read as data.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

log = logging.getLogger("rescore")

_S = pa.string()
_I = pa.int64()
_F = pa.float64()
_B = pa.bool_()

SCHEMAS: dict[str, pa.Schema] = {
    "submissions": pa.schema(
        [
            ("submission_id", _S),  # content hash of problem + submission source
            ("name", _S),  # human name (corpus entry id, or the dump's own id)
            ("dump", _S),
            ("problem_id", _S),
            ("op", _S),
            ("language", _S),  # triton | cuda | torch | numpy
            ("label", _S),  # correct | buggy | unknown
            ("bug_class", _S),
            ("control", _S),  # name of the correct submission this variant was seeded from
            ("description", _S),
            ("trigger", _S),  # JSON
            ("dtypes", _S),  # comma-separated dtypes the submission claims
            ("declines", _S),
            ("provenance", _S),
            ("claimed_verdict", _S),  # the benchmark's own verdict, where the dump has one
            ("source_path", _S),
            ("problem_path", _S),
            ("ingest_error", _S),  # why this submission could not be read, if it could not
        ]
    ),
    "cases": pa.schema(
        [
            ("submission_id", _S),
            ("name", _S),
            ("problem_id", _S),
            ("oracle", _S),  # fixed | fuzz
            ("strategy", _S),
            ("purpose", _S),  # evaluation | calibration
            ("case_index", _I),
            ("seed", _I),
            ("dtype", _S),
            ("sizes", _S),  # JSON {dim: int}
            ("shapes", _S),  # JSON [[...], ...] of the inputs
            ("strides", _S),  # JSON [[...], ...] of the inputs
            ("layout", _S),
            ("values", _S),  # value class of the floating inputs
            ("inputs_hash", _S),  # hash of the input bytes: a replay must reproduce it
            ("outcome", _S),
            ("reason", _S),
            ("max_abs_err", _F),
            ("max_rel_err", _F),
            ("err_ulp", _F),
            ("ref_lowp_err", _F),  # max abs error of the reference run at the test dtype
            ("ref_max_abs", _F),  # max |reference| over finite elements
            ("reduction_len", _I),
            ("n_elements", _I),
            ("n_mismatch", _I),
            ("first_mismatch", _S),  # JSON index of the worst element
            ("diagnosis", _S),  # the failure's pattern (oracle/diagnose.py)
            ("cause", _S),  # the cause a second experiment confirmed (worker/experiments.py), if any
            ("cause_evidence", _S),  # what that experiment saw
            ("policy_ratios", _S),  # JSON {policy: max err/bound}; <= 1 passes that policy
            ("tolerance_policy", _S),
            ("atol", _F),
            ("rtol", _F),
            ("bound", _F),  # the slack added from the low-precision reference
            ("wall_ms", _F),  # the candidate's side of the case: model built, called, checked (not a kernel timing)
            ("device", _S),
            ("versions", _S),  # JSON
            ("replay", _S),
            ("findings", _S),  # comma-separated: what the submission did besides answering (findings.py)
            ("gpu", _S),  # "<index>: <model>": the host's GPU that ran the case (engine/gpus.py); null on the CPU
            ("output_nonfinite", _B),  # the candidate's output held a NaN or Inf (oracle/judge.py); null: not judged
            ("cuda_ran", _S),  # CUDA submissions: yes | no | unknown, its own CUDA ran in this case (model/builds.py)
            ("cuda_build", _S),  # CUDA submissions: the build status this case saw (built, compile_failed, ...)
            ("cuda_build_error", _S),  # its error, where the worker's own build failed (model/builds.error_text)
            # JSON [{input, domain, from, evidence}]: each input's value domain and where it came from
            # (schema / source / sampled / default; worker/input_domains.py); fuzz rows only
            ("input_domains", _S),
            ("limit_s", _F),  # the limit of the candidate's calls at the case's sizes, from the reference's time
        ]
    ),
}
SCHEMAS["failures"] = pa.schema(
    list(SCHEMAS["cases"])
    + [("failure_id", _S), ("problem_path", _S), ("source_path", _S), ("trigger", _S), ("label", _S), ("bug_class", _S)]
    + [("evidence", _S)]  # `headline`, or the robustness finding's kind (model/evidence.py)
)

SCHEMAS["shrunk"] = pa.schema(
    [
        ("failure_id", _S),  # the failure's id in failures.parquet
        ("submission_id", _S),
        ("name", _S),
        ("bug_class", _S),
        ("strategy", _S),
        ("seed", _I),
        ("dtype", _S),
        ("original_sizes", _S),  # JSON {dim: int} of the failing case
        ("original_values", _S),
        ("original_outcome", _S),
        ("original_elements", _I),
        ("shrunk", _B),  # false: the failure did not reproduce as an explicit trigger (see note)
        ("shrunk_sizes", _S),  # JSON {dim: int} of the smallest still-failing case
        ("shrunk_values", _S),
        ("shrunk_outcome", _S),
        ("shrunk_elements", _I),
        ("shrunk_diagnosis", _S),
        ("steps", _I),  # cases run while shrinking
        ("note", _S),
        ("replay", _S),  # `rescore replay ...` of the shrunk trigger
    ]
)

# The cause x bug-class table (analysis/causes.py): per dump, confirmed cause, label and bug class.
SCHEMAS["causes"] = pa.schema(
    [
        ("dump", _S),
        ("cause", _S),  # a worker.experiments.Cause, or "none": flagged, and no experiment confirmed one
        ("label", _S),  # correct | buggy | unknown
        ("bug_class", _S),  # from entries.yaml, or the class a dump's notes name (class_source)
        ("class_source", _S),  # entries | notes | null (no class known)
        ("kernels", _I),  # flagged kernels whose kernel-level cause (illusion.parquet) is this
        ("cases", _I),  # failing evaluation fuzz cases that name this cause
        ("explained", _B),  # the bug class is one this cause explains (analysis/cause_classes.yaml)
        ("judged", _I),  # kernels with this cause whose correctness is known (a control, or a class)
        ("precision", _F),  # of those, the share whose class the cause explains
        ("precision_low", _F),  # 95% Wilson interval of that share
        ("precision_high", _F),
        ("case_judged", _I),  # the same at case level
        ("case_precision", _F),
    ]
)

# Where each submission's time went (engine/phase_log.py; bench/phases.py): one row per submission and
# phase, the phases of a submission adding up to its elapsed time.
SCHEMAS["phases"] = pa.schema(
    [
        ("dump", _S),
        ("shard", _I),
        ("submission_id", _S),
        ("name", _S),
        ("phase", _S),  # worker_start, load, fixed, reference, candidate, ... (engine/phase_log.py, worker/phases.py)
        ("seconds", _F),
        ("calls", _I),  # how many times the submission entered it (requests, restarts)
        ("elapsed_s", _F),  # the submission's elapsed time: its load, cases and shrinking
        ("case_s", _F),  # its cases' own time (their `wall_ms`)
        ("limit_use", _F),  # the largest share of its limit a candidate's call used (`worker/turns.py`)
        ("reserved_bytes", _I),  # the most device memory its requests reserved (engine/sharing.py); 0 on a CPU
        ("peak_bytes", _I),  # the most device memory its worker's tensors took in one request; 0 on a CPU
    ]
)

# Kernel times (timing.py, timing_stage.py): one row per submission; ms columns are milliseconds
# per forward call, the candidate's, then the reference Model's (ref_) on the same inputs.
_SPREAD = ["median_ms", "min_ms", "p10_ms", "p25_ms", "p75_ms", "p90_ms", "max_ms"]
SCHEMAS["timing"] = pa.schema(
    [
        ("submission_id", _S),
        ("name", _S),
        ("dump", _S),
        ("problem_id", _S),
        ("op", _S),
        ("language", _S),
        ("label", _S),
        ("control", _S),  # name of the correct submission this variant was seeded from
        ("status", _S),  # ok | skipped | compile_error | crash | timeout | declined
        ("reason", _S),
        ("device", _S),  # the GPU's name (torch.cuda.get_device_name), or cpu for rows never timed
        ("torch", _S),
        ("triton", _S),
        ("dtype", _S),  # the fixed check's dtype: the inputs are the benchmark's own
        ("warmup", _I),
        ("repeats", _I),  # timed calls the median is taken over
        ("capped", _B),  # fewer repeats than configured: the per-submission budget cut them
        ("flush_bytes", _I),  # bytes written before each timed call (larger than the L2 cache)
        *[(c, _F) for c in _SPREAD],
        ("ref_status", _S),  # ok | crash: the reference Model timed the same way
        ("ref_reason", _S),
        ("ref_repeats", _I),
        *[(f"ref_{c}", _F) for c in _SPREAD],
        ("speedup", _F),  # ref_median_ms / median_ms
        ("wall_s", _F),  # seconds the submission took in the stage (load, warm-up, both measurements)
        ("findings", _S),
        ("value_sets", _I),  # input value sets copied in turn into the inputs before each call
        ("timed_output", _S),  # the last timed output: pass | mismatch | nonfinite | bad_output | skipped
        ("timed_reason", _S),  # why it is not `pass`; a row whose output is wrong has no speedup
    ]
)


def empty_frame(table: str) -> pd.DataFrame:
    """An empty DataFrame with the table's columns, for stages that found nothing to write."""
    return SCHEMAS[table].empty_table().to_pandas()


def conform(df: pd.DataFrame, table: str) -> pa.Table:
    """Order, fill and type the columns of `df` as the table's schema says; reject unknown columns."""
    schema = SCHEMAS[table]
    extra = set(df.columns) - set(schema.names)
    if extra:
        raise ValueError(f"table {table!r}: unexpected columns {sorted(extra)}")
    arrays = []
    for field in schema:
        if field.name in df.columns:
            col = df[field.name]
            if pa.types.is_string(field.type):
                col = col.astype(object).where(col.notna(), None)
                col = col.map(lambda v: v if v is None else str(v))
            arrays.append(pa.array(col.tolist(), type=field.type, from_pandas=True))
        else:
            arrays.append(pa.nulls(len(df), type=field.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def write_parquet(df: pd.DataFrame, path: str | os.PathLike, table: str | None = None) -> None:
    """Write `df` to `path` atomically; with `table`, conform it to that table's schema first."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = conform(df, table) if table else pa.Table.from_pandas(df, preserve_index=False)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        pq.write_table(data, tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_parquet(path: str | os.PathLike, table: str | None = None, optional: Iterable[str] = ()) -> pd.DataFrame:
    """Read a table; a corrupt or truncated file, or one that lacks a column of `table` (but those
    `optional`), raises a ValueError that names the file."""
    try:
        data = pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise ValueError(f"{path}: not a readable Parquet table ({exc}); delete it and rebuild") from exc
    if table:
        missing = set(SCHEMAS[table].names) - set(data.column_names) - set(optional)
        if missing:
            raise ValueError(f"{path}: table {table!r} lacks columns {sorted(missing)}; rebuild it")
    return data.to_pandas()


def write_text(text: str, path: str | os.PathLike) -> None:
    """Write a text file atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)


def check_tables(paths: list[str], table: str | None = None, remove: bool = True) -> None:
    """Read every intermediate table; raise one ValueError naming each unreadable one.

    With `remove`, the unreadable files are deleted first, so that running the workflow again
    rebuilds exactly them (Snakemake sees a missing output) instead of stopping on them forever."""
    bad: list[str] = []
    for path in paths:
        try:
            read_parquet(path, table)
        except ValueError as exc:
            bad.append(str(exc))
            if remove:
                try:
                    os.unlink(path)
                except OSError:
                    pass
                log.error("%s", exc)
    if bad:
        again = " They were deleted: run the workflow again to rebuild them." if remove else ""
        raise ValueError(f"{len(bad)} intermediate table(s) could not be read.{again}\n" + "\n".join(bad))
