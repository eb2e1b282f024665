"""Figures from the Parquet tables (matplotlib, no display needed)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pandas as pd

from rescore.model.outcomes import FixedVerdict, FuzzVerdict

VERDICT_COLOURS = {
    FuzzVerdict.PASS: "#4c9f70",
    FixedVerdict.FAIL: "#d1495b",
    FuzzVerdict.FLAGGED: "#d1495b",
    FuzzVerdict.DECLINED: "#edae49",
    FuzzVerdict.SKIPPED: "#cccccc",
}
NO_LABELS = "no labelled submissions"  # what an empty panel of a recall figure says first


def _plt():
    """matplotlib's pyplot on the Agg backend, imported by the first figure drawn: a stage that draws
    none (every table stage imports this module through rescore.stages) never loads matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig, outputs: list[str]) -> None:
    plt = _plt()
    for out in outputs:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, bbox_inches="tight", dpi=120)
    plt.close(fig)


def verdicts_figure(illusion: pd.DataFrame, outputs: list[str]) -> None:
    """One row per kernel: the fixed-shape verdict beside the fuzz verdict; illusions marked."""
    plt = _plt()
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
        [FuzzVerdict.PASS, "fail / flagged", FuzzVerdict.DECLINED, FuzzVerdict.SKIPPED],
        loc="upper center",
        bbox_to_anchor=(0.5, -0.02 if len(df) > 20 else -0.08),
        ncol=4,
        fontsize=7,
        frameon=False,
    )
    n_ill = int(df["illusion"].sum())
    ax.set_title(f"Verdict per kernel: {n_ill} illusions (fixed check passes, fuzzing flags)", fontsize=9)
    save(fig, outputs)


def recall_heatmap(heat: pd.DataFrame, outputs: list[str]) -> None:
    """Fraction of cases flagged, strategy x kernel: buggy kernels (recall) and unlabelled ones (flag rate)."""
    plt = _plt()
    if heat.empty:
        empty_figure("no buggy or unlabelled kernel ran a study case: nothing to draw", outputs)
        return
    unlabelled = set(heat.loc[heat["label"] != "buggy", "name"])
    heat = heat.assign(name=[f"{n} (unlabelled)" if n in unlabelled else n for n in heat["name"]])
    table = heat.pivot_table(index="name", columns="strategy", values="flagged", aggfunc="mean").sort_index()
    fig, ax = plt.subplots(figsize=(1.0 + 0.55 * len(table.columns), max(3.0, 0.14 * len(table) + 1.5)))
    im = ax.imshow(table.to_numpy(), aspect="auto", cmap="viridis", vmin=0, vmax=1)
    ax.set_xticks(range(len(table.columns)), table.columns, rotation=60, ha="right", fontsize=7)
    ax.set_yticks(range(len(table.index)), table.index, fontsize=5)
    fig.colorbar(im, ax=ax, label="fraction of cases flagged")
    if not unlabelled:
        title = "Recall per buggy kernel and strategy"
    elif len(unlabelled) == len(table):
        title = f"Cases flagged per kernel and strategy ({NO_LABELS}: a flag rate, not recall)"
    else:
        title = "Recall per buggy kernel and strategy; flag rate for unlabelled kernels"
    ax.set_title(title, fontsize=9)
    save(fig, outputs)


def recall_vs_fp(table: pd.DataFrame, outputs: list[str]) -> None:
    """Kernel-level recall against control false-positive rate per strategy, with 95% Wilson intervals;
    strategies without buggy kernels and controls are left out (the table's `note` says why)."""
    plt = _plt()
    drawn = table[table["kernel_recall_rate"].notna() & table["case_fp_rate"].notna()]
    if drawn.empty:
        unlabelled = int(table["unlabelled_kernels"].max()) if len(table) else 0
        empty_figure(f"{NO_LABELS}: recall and false positives need submissions labelled buggy and correct\n"
                     f"(flag rates of the {unlabelled} unlabelled kernels: results/tables/strategies.parquet)",
                     outputs)
        return
    fig, ax = plt.subplots(figsize=(6, 4.5))
    for r in drawn.to_dict("records"):
        x, y = r["case_fp_rate"], r["kernel_recall_rate"]
        ax.errorbar(x, y, xerr=[[x - r["case_fp_lo"]], [r["case_fp_hi"] - x]],
                    yerr=[[y - r["kernel_recall_lo"]], [r["kernel_recall_hi"] - y]], fmt="o", capsize=3)
        ax.annotate(r["strategy"], (x, y), fontsize=7, xytext=(4, 4), textcoords="offset points")
    ax.set_xlabel("control false-positive rate (cases)")
    ax.set_ylabel("recall (buggy kernels found)")
    ax.set_xlim(-0.02, max(0.1, float(drawn["case_fp_hi"].max()) + 0.05))
    ax.set_ylim(0, 1.05)
    ax.set_title("Recall vs. false positives per strategy", fontsize=9)
    save(fig, outputs)


def recall_vs_budget(budget: pd.DataFrame, outputs: list[str]) -> None:
    """Buggy kernels found within b cases per strategy; with no buggy kernel, the share of unlabelled
    kernels flagged within b cases (a flag rate, said so on the axis)."""
    plt = _plt()
    allk = budget[budget["bug_class"] == "(all)"]
    column, ylabel, title = "recall", "recall (buggy kernels found)", "Recall as a function of case budget"
    if allk.empty:
        allk = budget[budget["label"] == "unlabelled"]
        column, ylabel = "flag_rate", "unlabelled kernels flagged (not recall)"
        title = f"Kernels flagged as a function of case budget ({NO_LABELS})"
    if allk.empty:
        empty_figure("no buggy or unlabelled kernel ran a study case: nothing to draw", outputs)
        return
    fig, ax = plt.subplots(figsize=(6, 4.5))
    for strategy, g in allk.groupby("strategy"):
        ax.plot(g["budget"], g[column], marker="o", label=strategy)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("cases per kernel (budget)")
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize=6, ncol=2)
    ax.set_title(title, fontsize=9)
    save(fig, outputs)


def tightening_figure(tight: pd.DataFrame, outputs: list[str]) -> None:
    """The tightening factor per calibrated (op, dtype); the uncalibrated ones are the table's NaN rows."""
    plt = _plt()
    df = tight[tight["tightening"].notna()].sort_values("tightening")
    if df.empty:
        empty_figure(f"{NO_LABELS} as controls: none of the {len(tight)} judged (op, dtype) was calibrated\n"
                     "(calibration runs on submissions labelled correct)", outputs)
        return
    fig, ax = plt.subplots(figsize=(6.5, max(3.0, 0.16 * len(df) + 1)))
    labels = [f"{o} / {d}" for o, d in zip(df["op"], df["dtype"])]
    ax.barh(labels, df["tightening"], color="#30638e")
    ax.set_xscale("log")
    ax.tick_params(axis="y", labelsize=6)
    ax.set_xlabel(f"tightening factor ({df['current_policy'].iloc[0]} bound / calibrated bound)")
    ax.set_title("How much tighter the calibrated bound is, per (op, dtype)", fontsize=9)
    save(fig, outputs)


def control_error_figure(ratios: pd.DataFrame, outputs: list[str]) -> None:
    """Each control case's error as a fraction of each policy's bound (<= 1 passes)."""
    plt = _plt()
    if ratios.empty:
        empty_figure(f"{NO_LABELS} as controls: no evaluation case of a submission labelled correct", outputs)
        return
    policies = [c for c in ratios.columns if c not in ("op", "dtype", "label")]
    fig, ax = plt.subplots(figsize=(7, 4))
    data = [ratios[p].astype(float).replace([0.0, float("inf")], [1e-12, 1e12]).clip(1e-12, 1e12).dropna()
            for p in policies]
    ax.boxplot(data, showfliers=True)
    ax.set_xticks(range(1, len(policies) + 1), policies)
    ax.axhline(1.0, color="#d1495b", lw=1)
    ax.set_yscale("log")
    ax.tick_params(axis="x", labelrotation=30, labelsize=7)
    ax.set_ylabel("control error / policy bound")
    ax.set_title("Correct kernels' errors against each policy's bound (evaluation seeds)", fontsize=9)
    save(fig, outputs)


def sweep_figure(sweep: pd.DataFrame, outputs: list[str]) -> None:
    """Recall and control false positives of the calibrated policy against its safety multiplier; the
    unlabelled kernels' flag rate where there are some."""
    plt = _plt()
    series = [("case_recall_rate", "o", "recall (cases)"), ("kernel_recall_rate", "s", "recall (kernels)"),
              ("case_fp_rate", "^", "control false positives (cases)"),
              ("kernel_flag_rate", "x", "unlabelled kernels flagged")]
    drawn = [s for s in series if s[0] in sweep and sweep[s[0]].notna().any()]
    if not drawn:
        empty_figure(f"{NO_LABELS} as controls: the calibrated policy has no (op, dtype) to judge", outputs)
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    for column, marker, label in drawn:
        ax.plot(sweep["multiplier"], sweep[column], marker=marker, label=label)
    ax.set_xlabel("safety multiplier on the calibrated k")
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize=7)
    ax.set_title("Calibrated policy: multiplier sweep", fontsize=9)
    save(fig, outputs)


def empty_figure(message: str, outputs: list[str]) -> None:
    """A figure that says why there is nothing to draw (a rule's output must still exist)."""
    plt = _plt()
    lines = [part for line in message.splitlines() for part in textwrap.wrap(line, 100) or [""]]
    fig, ax = plt.subplots(figsize=(5, 1.2 + 0.15 * len(lines)))
    ax.text(0.5, 0.5, "\n".join(lines), ha="center", va="center", fontsize=8)
    ax.set_axis_off()
    save(fig, outputs)
