"""Figures of the static study: which metrics each bug class moves, and static change vs recall.

Why: the table says how often the gate fires; the heatmap shows through which numbers, and the
scatter shows whether bugs that leave the PTX alone are the ones fuzzing still catches.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from rescore.static.metrics import METRIC_COLUMNS

_HEADLINE = ("registers", "spill_bytes", "shared", "local", "instructions", "predicated_mem", "immediates")


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def delta_heatmap(pairs: pd.DataFrame, path: Path, arch: str) -> Path | None:
    """Rows: bug classes; columns: metrics (colour: share of pairs where it changed, text: mean
    delta) and a last column with the share of pairs whose PTX is identical to the control's."""
    df = pairs[(pairs["arch"] == arch) & pairs["comparable"].astype(bool)]
    if df.empty:
        return None
    moved = [m for m in METRIC_COLUMNS if f"delta_{m}" in df and (df[f"delta_{m}"] != 0).any()]
    metrics = list(dict.fromkeys([*_HEADLINE, *moved]))
    classes = sorted(df["bug_class"].fillna("?").unique())
    columns = [*metrics, "identical PTX"]
    share = np.zeros((len(classes), len(columns)))
    text = np.empty(share.shape, dtype=object)
    for i, bc in enumerate(classes):
        g = df[df["bug_class"].fillna("?") == bc]
        for j, m in enumerate(metrics):
            d = pd.to_numeric(g[f"delta_{m}"]).astype(float)
            share[i, j] = (d != 0).mean()
            text[i, j] = f"{d.mean():+.3g}"
        same = g["ptx_identical"].astype(bool)
        share[i, -1] = same.mean()
        text[i, -1] = f"{int(same.sum())}/{len(g)}"
    plt = _plt()
    fig, ax = plt.subplots(figsize=(1.0 + 0.75 * len(columns), 1.2 + 0.45 * len(classes)))
    im = ax.imshow(share, cmap="viridis", vmin=0, vmax=1, aspect="auto")
    for i in range(len(classes)):
        for j in range(len(columns)):
            ax.text(
                j,
                i,
                text[i, j],
                ha="center",
                va="center",
                fontsize=7,
                color="white" if share[i, j] < 0.6 else "black",
            )
    counts = df["bug_class"].fillna("?").value_counts()
    ax.set_yticks(range(len(classes)), [f"{c} (n={counts[c]})" for c in classes], fontsize=8)
    ax.set_xticks(range(len(columns)), columns, rotation=60, ha="right", fontsize=8)
    ax.set_title(f"Static change, variant vs control ({arch}); text: mean delta / pairs with same PTX", fontsize=9)
    fig.colorbar(im, ax=ax, label="share of pairs where the metric changed (last column: PTX identical)")
    fig.tight_layout()
    fig.savefig(path, dpi=150)
    plt.close(fig)
    return path


def delta_vs_recall(pairs: pd.DataFrame, recall: pd.DataFrame, path: Path, arch: str) -> Path | None:
    """x: number of metrics the bug changed; y: dynamic recall of the variant; marker: PTX same or not."""
    df = pairs[(pairs["arch"] == arch) & pairs["comparable"].astype(bool)]
    rec = recall.groupby("submission_id")["recall"].mean()
    df = df[df["variant_id"].isin(rec.index)]
    if df.empty:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9.5, 4.8))
    rng = np.random.default_rng(0)
    classes = sorted(df["bug_class"].fillna("?").unique())
    cmap = plt.get_cmap("tab20")
    shapes = "osD^v"
    for k, bc in enumerate(classes):
        g = df[df["bug_class"].fillna("?") == bc]
        x = g["n_metrics_changed"].astype(float).to_numpy() + rng.uniform(-0.15, 0.15, len(g))
        y = rec.loc[g["variant_id"]].to_numpy()
        same_ptx = g["ptx_identical"].astype(bool).to_numpy()
        color = cmap(k % 20)
        ax.scatter(x[~same_ptx], y[~same_ptx], color=color, marker=shapes[(k // 20) % 5], label=bc, s=28)
        ax.scatter(x[same_ptx], y[same_ptx], color=color, marker="x", s=40)
    ax.set_xlabel("metrics changed vs control (x: identical PTX)")
    ax.set_ylabel("dynamic recall (fuzzing)")
    ax.set_ylim(-0.05, 1.05)
    ax.set_title(f"Static change vs dynamic recall ({arch})", fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), ncol=1 + len(classes) // 24)
    fig.tight_layout()
    fig.savefig(path, dpi=150)
    plt.close(fig)
    return path


def static_figures(
    pairs_df: pd.DataFrame, recall_df: pd.DataFrame | None, out_dir: str | Path, arch: str = "sm_90"
) -> list[Path]:
    """Write static_delta_heatmap.png and, given recall_df (submission_id, recall; several rows of
    one submission are averaged), static_delta_vs_recall.png; returns the paths written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = [delta_heatmap(pairs_df, out / "static_delta_heatmap.png", arch)] if len(pairs_df) else []
    if recall_df is not None and len(pairs_df):
        written.append(delta_vs_recall(pairs_df, recall_df, out / "static_delta_vs_recall.png", arch))
    return [p for p in written if p is not None]
