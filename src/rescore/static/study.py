"""The static study: metrics of every Triton corpus kernel, and bug variants against their controls.

Why: the question is which seeded bug classes a static gate ("any metric differs from the
control's") would catch, and which compile to the very same PTX so that no static check can. The
pairing comes from each entry's `control` field, never from file names.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from pathlib import Path

import pandas as pd

from rescore.analysis import figures
from rescore.model.outcomes import Outcome, RunStatus
from rescore.model.records import LABELS, Submission
from rescore.model.tables import write_parquet
from rescore.static.compile import ARCHS, compile_many
from rescore.static.figures import static_figures as _figures
from rescore.static.launches import capture_many
from rescore.static.metrics import EXTRA_COLUMNS, METRIC_COLUMNS

log = logging.getLogger("rescore")

ENTRY_COLUMNS = ("id", "op", "label", "language", "control", "bug_class")
PAIR_COLUMNS = ["variant_id", "control_id", "op", "bug_class", "arch", "variant_outcome", "control_outcome",
                "variant_error", "comparable", "n_metrics_changed", "changed_metrics", "metrics_identical",
                "ptx_identical"]
SUMMARY_COLUMNS = ["bug_class", "arch", "n_pairs", "n_compared", "n_gate", "n_ptx_identical",
                   "n_same_metrics_other_ptx", "n_variant_rejected", "gate_rate", "note"]
# at which sizes a submission is captured: its problem's fixed sizes, or each dim's largest candidate
SIZES = ("fixed", "largest")
# how the kernels of one submission combine into one number per metric
_MAX_METRICS = {"registers", "shared", "local"}


def as_entry(item: dict | object) -> dict:
    """An entry dict from a dict or from a corpus Submission (name, language, label, control,
    bug_class, path, problem.path, problem.op, the candidates of problem.schema), so corpus loaders
    plug in without an adapter."""
    if isinstance(item, dict):
        return item
    problem = getattr(item, "problem", None)
    return {
        "id": getattr(item, "name", None) or getattr(item, "submission_id", None),
        "op": getattr(problem, "op", None),
        "label": getattr(item, "label", None),
        "language": getattr(item, "language", None),
        "control": getattr(item, "control", None),
        "bug_class": getattr(item, "bug_class", None),
        "path": str(getattr(item, "path", "")),
        "problem_path": str(getattr(problem, "path", "")),
        "candidates": (getattr(problem, "schema", None) or {}).get("candidates"),
    }


def capture_sizes(entry: dict, sizes: str = "fixed") -> dict[str, int]:
    """The sizes an entry's capture sets on its problem: none at `fixed` (the problem's own); at
    `largest`, each dim's largest candidate where the problem's schema lists candidates (a gpuemu
    op schema, whose first candidates are often 1: Triton specialises an int argument equal to 1
    into a constant, so a kernel captured there compiles to a degenerate program)."""
    if sizes not in SIZES:
        raise ValueError(f"static sizes {sizes!r} is not one of {', '.join(SIZES)}")
    cands = entry.get("candidates") or {}
    if sizes == "fixed" or not isinstance(cands, dict):
        return {}
    return {str(name): max(int(c) for c in values) for name, values in cands.items() if values}


def static_table(
    entries: Iterable[dict],
    *,
    archs: Sequence[int] = ARCHS,
    cache_dir: str | Path | None = None,
    parallel: int | None = None,
    timeout: float = 300.0,
    sizes: str = "fixed",
) -> pd.DataFrame:
    """One row per (Triton entry, distinct kernel launch, arch) with its static metrics.

    entries are dicts with id, op, label, language, control, bug_class, path (the submission),
    problem_path and optionally candidates ({dim: [sizes]}), or corpus Submission objects (see
    as_entry). Non-Triton entries are left out. Each is captured at `sizes` (see capture_sizes). An
    entry whose capture failed gets one row per arch with that outcome (capture_error, no_launch,
    timeout, crash) and no metrics.
    Columns: submission_id, op, label, language, control, bug_class, capture_outcome,
    capture_device (cpu | emulated_cuda), capture_sizes ("fixed" or "B=8,H=1025"), arch, kernel,
    kernel_index, outcome, error, METRIC_COLUMNS, spill_stores, spill_loads, ptx_hash, ... (see
    compile_many).
    """
    tri = [e for e in map(as_entry, entries) if e.get("language") == "triton"]
    at = [capture_sizes(e, sizes) for e in tri]
    caps = capture_many(
        [(e["problem_path"], e["path"]) for e in tri],
        parallel=parallel,
        timeout=timeout,
        cache_dir=cache_dir,
        sizes=at,
    )
    items = [
        (e["path"], cap.get("launches", []) if cap.get("outcome") == RunStatus.OK else [])
        for e, cap in zip(tri, caps, strict=True)
    ]
    compiled = compile_many(items, archs=archs, parallel=parallel, timeout=timeout, cache_dir=cache_dir)
    rows: list[dict] = []
    for e, cap, krows, size in zip(tri, caps, compiled, at, strict=True):
        base = {
            "submission_id": e["id"],
            **{c: e.get(c) for c in ENTRY_COLUMNS if c != "id"},
            "capture_outcome": cap.get("outcome"),
            "capture_device": cap.get("device"),
            "capture_sizes": ",".join(f"{k}={v}" for k, v in size.items()) or "fixed",
            "capture_seconds": cap.get("seconds"),
        }
        if not krows:
            for arch in archs:
                rows.append({**base, "arch": f"sm_{arch}", "outcome": cap.get("outcome"), "error": cap.get("error")})
        for r in krows:
            rows.append({**base, **r})
    df = pd.DataFrame(rows)
    for col in (*METRIC_COLUMNS, *EXTRA_COLUMNS):
        if col not in df:
            df[col] = pd.NA
    return df


def _submission_view(metrics_df: pd.DataFrame) -> dict[tuple[str, str], dict]:
    """Per (submission, arch): outcome, combined metrics, per-kernel vectors and hashes."""
    out: dict[tuple[str, str], dict] = {}
    for (sid, arch), g in metrics_df.groupby(["submission_id", "arch"], sort=False):
        g = g.sort_values("kernel_index") if "kernel_index" in g and g["kernel_index"].notna().all() else g
        bad = g[g["outcome"] != RunStatus.OK]
        rec: dict = {
            "outcome": RunStatus.OK if bad.empty else bad["outcome"].iloc[0],
            "error": None if bad.empty else bad["error"].iloc[0],
        }
        if bad.empty:
            for col in (*METRIC_COLUMNS, *EXTRA_COLUMNS):
                vals = pd.to_numeric(g[col])
                rec[col] = vals.max() if col in _MAX_METRICS else vals.sum()
            rec["vectors"] = [tuple(r[c] for c in METRIC_COLUMNS) for _, r in g.iterrows()]
            rec["hashes"] = list(g["ptx_hash"])
        out[(sid, arch)] = rec
    return out


def paired_deltas(metrics_df: pd.DataFrame, entries: Iterable[dict]) -> pd.DataFrame:
    """One row per (buggy variant, arch), paired with the entry its `control` field names.

    Columns: variant_id, control_id, op, bug_class, arch, variant_outcome, control_outcome,
    variant_error, control_error, comparable (both compiled), delta_<metric> (variant minus control)
    for METRIC_COLUMNS and EXTRA_COLUMNS, n_metrics_changed, changed_metrics, metrics_identical
    (every kernel's metric vector equal), ptx_identical (every kernel's normalised PTX hash equal).
    Deltas and flags are NA when the pair is not comparable.
    """
    entries = [as_entry(e) for e in entries]
    view = _submission_view(metrics_df)
    archs = sorted(metrics_df["arch"].dropna().unique()) if len(metrics_df) else []
    rows = []
    for e in entries:
        if e.get("label") != "buggy" or not e.get("control") or e.get("language") != "triton":
            continue
        for arch in archs:
            v, c = view.get((e["id"], arch)), view.get((e["control"], arch))
            row = {
                "variant_id": e["id"],
                "control_id": e["control"],
                "op": e.get("op"),
                "bug_class": e.get("bug_class"),
                "arch": arch,
                "variant_outcome": v["outcome"] if v else "missing",
                "control_outcome": c["outcome"] if c else "missing",
                "variant_error": v["error"] if v else None,
                "control_error": c["error"] if c else None,
            }
            row["comparable"] = row["variant_outcome"] == RunStatus.OK and row["control_outcome"] == RunStatus.OK
            if row["comparable"]:
                changed = [m for m in METRIC_COLUMNS if v[m] != c[m]]
                row.update({f"delta_{m}": v[m] - c[m] for m in (*METRIC_COLUMNS, *EXTRA_COLUMNS)})
                row["control_instructions"] = c["instructions"]
                row["n_metrics_changed"] = len(changed)
                row["changed_metrics"] = ",".join(changed)
                row["metrics_identical"] = v["vectors"] == c["vectors"]
                row["ptx_identical"] = v["hashes"] == c["hashes"]
            rows.append(row)
    df = pd.DataFrame(rows) if rows else pd.DataFrame(columns=PAIR_COLUMNS)
    for col in ("metrics_identical", "ptx_identical", "n_metrics_changed", "changed_metrics"):
        if col not in df:
            df[col] = pd.NA
    return df


def class_summary(pairs_df: pd.DataFrame) -> pd.DataFrame:
    """Per (bug_class, arch): how many pairs, how many the static gate catches, how many are PTX-identical.

    Columns: n_pairs, n_compared, n_gate (some metric differs), n_ptx_identical,
    n_same_metrics_other_ptx (metrics equal but PTX differs: constant-only changes),
    n_variant_rejected (variant does not compile while its control does), gate_rate
    (n_gate / n_compared), note (empty here; see unpaired_summary).
    """
    if pairs_df.empty:
        return pd.DataFrame(columns=SUMMARY_COLUMNS)
    df = pairs_df.copy()
    cmp_ = df["comparable"].astype(bool)
    same = df["metrics_identical"].fillna(False).astype(bool)
    ptx_same = df["ptx_identical"].fillna(False).astype(bool)
    df["_gate"] = cmp_ & ~same
    df["_ptx"] = cmp_ & ptx_same
    df["_const"] = cmp_ & same & ~ptx_same
    df["_rej"] = (df["variant_outcome"] == Outcome.COMPILE_ERROR) & (df["control_outcome"] == RunStatus.OK)
    out = (
        df.groupby(["bug_class", "arch"], dropna=False)
        .agg(
            n_pairs=("variant_id", "size"),
            n_compared=("comparable", "sum"),
            n_gate=("_gate", "sum"),
            n_ptx_identical=("_ptx", "sum"),
            n_same_metrics_other_ptx=("_const", "sum"),
            n_variant_rejected=("_rej", "sum"),
        )
        .reset_index()
    )
    out["gate_rate"] = out["n_gate"] / out["n_compared"].where(out["n_compared"] > 0)
    out["note"] = ""
    return out


def unpaired_reason(entries: Iterable[dict]) -> str:
    """Why the entries give the static gate no (control, buggy variant) pair ("" when they do): it
    needs Triton kernels labelled buggy whose `control` names their correct original."""
    entries = [as_entry(e) for e in entries]
    triton = [e for e in entries if e.get("language") == "triton"]
    if not triton:
        return f"no Triton submission among {len(entries)}: nothing to compile (the static study reads Triton only)"
    if any(e.get("label") == "buggy" and e.get("control") for e in triton):
        return ""
    unlabelled = sum(e.get("label") not in LABELS for e in triton)
    return (f"needs labels: no Triton submission is labelled buggy with a `control` to pair it with "
            f"({len(triton)} Triton kernels, {unlabelled} of them unlabelled; their own metrics are in "
            "static_kernels.parquet)")


def unpaired_summary(reason: str, archs: Sequence[int]) -> pd.DataFrame:
    """The summary of a study without pairs: one row per arch, no pairs, and the reason in `note`."""
    rows = [{"bug_class": None, "arch": f"sm_{a}", "n_pairs": 0, "n_compared": 0, "n_gate": 0, "n_ptx_identical": 0,
             "n_same_metrics_other_ptx": 0, "n_variant_rejected": 0, "gate_rate": float("nan"), "note": reason}
            for a in archs]
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


def static_figures(
    pairs_df: pd.DataFrame, recall_df: pd.DataFrame | None, out_dir: str | Path, arch: str = "sm_90"
) -> list[Path]:
    """The study's figures (see rescore.static.figures)."""
    return _figures(pairs_df, recall_df, out_dir, arch=arch)


def run_study(subs: list[Submission], out: dict[str, str], threads: int, cache_dir: str, archs: Sequence[int],
              sizes: str = "fixed") -> None:
    """Offline PTX metrics of every Triton submission, paired deltas, per-class summary, heatmap (the
    `static_study` rule's outputs, named in `out`); each submission captured at `sizes` (capture_sizes)."""
    entries = [as_entry(s) for s in subs if s.language == "triton"]
    archs = list(archs)
    metrics = static_table(entries, archs=tuple(archs), cache_dir=cache_dir, parallel=max(1, threads), sizes=sizes)
    # a dump without Triton kernels (numpy, CUDA C) or without labelled pairs: the summary says why
    pairs = paired_deltas(metrics, entries) if entries else pd.DataFrame(columns=PAIR_COLUMNS)
    reason = unpaired_reason(subs) if pairs.empty else ""
    summary = unpaired_summary(reason, archs) if reason else class_summary(pairs)
    write_parquet(metrics, out["metrics"])
    write_parquet(pairs, out["table"])
    write_parquet(summary, out["summary"])
    heatmap = Path(out["heatmap"])
    written = static_figures(pairs, None, heatmap.parent, arch=f"sm_{archs[0]}") if entries else []
    if not heatmap.exists():
        figures.empty_figure(f"no comparable (control, variant) pairs to draw ({len(pairs)} pairs)"
                             + (f"\n{reason}" if reason else ""), [str(heatmap)])
    log.info("static: %d kernels, %d pairs, figures %s", len(metrics), len(pairs), written)
