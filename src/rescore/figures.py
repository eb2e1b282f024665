"""Figures from the Parquet tables (matplotlib, no display needed)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

VERDICT_COLOURS = {
    "pass": "#4c9f70",
    "fail": "#d1495b",
    "flagged": "#d1495b",
    "declined": "#edae49",
    "skipped": "#cccccc",
}


def save(fig, outputs: list[str]) -> None:
    for out in outputs:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, bbox_inches="tight", dpi=120)
    plt.close(fig)


def verdicts_figure(illusion: pd.DataFrame, outputs: list[str]) -> None:
    """One row per kernel: the fixed-shape verdict beside the fuzz verdict; illusions marked."""
    df = illusion.sort_values(["label", "op", "name"]).reset_index(drop=True)
    height = max(3.0, 0.18 * len(df) + 1.2)
    fig, ax = plt.subplots(figsize=(7.5, height))
    for i, r in df.iterrows():
        y = len(df) - 1 - i
        for x, verdict in ((0, r["fixed_verdict"]), (1, r["fuzz_verdict"])):
            ax.add_patch(plt.Rectangle((x, y), 0.95, 0.9, color=VERDICT_COLOURS.get(verdict, "#999999")))
        label = f"{r['name']} ({r['label']})"
        ax.text(-0.05, y + 0.45, label, ha="right", va="center", fontsize=6)
        if r["illusion"]:
            ax.text(2.05, y + 0.45, "illusion", ha="left", va="center", fontsize=6, color="#d1495b", weight="bold")
    ax.set_xlim(0, 2.6)
    ax.set_ylim(0, len(df))
    ax.set_xticks([0.475, 1.475], ["fixed-shape check", "fuzz oracle"])
    ax.set_yticks([])
    for side in ("top", "right", "left", "bottom"):
        ax.spines[side].set_visible(False)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in ("#4c9f70", "#d1495b", "#edae49", "#cccccc")]
    ax.legend(
        handles,
        ["pass", "fail / flagged", "declined", "skipped"],
        loc="upper center",
        bbox_to_anchor=(0.5, -0.02 if len(df) > 20 else -0.08),
        ncol=4,
        fontsize=7,
        frameon=False,
    )
    n_ill = int(df["illusion"].sum())
    ax.set_title(f"Verdict per kernel: {n_ill} illusions (fixed check passes, fuzzing flags)", fontsize=9)
    save(fig, outputs)
