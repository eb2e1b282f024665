"""The paper-table stage: read the tables one dump produced, build one paper table, write it as
Parquet and Markdown. `workflow/scripts/paper_table.py` is a shim over `build`."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from rescore.analysis.papers import p1, p2, p3, p4, published, render
from rescore.model.records import LABELS
from rescore.model.tables import read_parquet, write_parquet, write_text

ABOUT_MATCH = (
    "Paper rows are matched to rescore kernels by name where the dump has a kernel of the paper's name (the "
    "papers' own gpuemu corpus), else by (op, label, bug class) through config/published/mapping.csv; "
    "`in_paper` False marks rows the paper lacks; `differs` is True where a reproduced value "
    "lies outside the printed value's last digit (or a verdict differs)."
)
ABOUT_BENCH = (
    "`bench` is the verdict the dump records for each kernel (gpuemu: meta.json `benchmark_verdict`; CUDA-L1: "
    "published correct; KernelBench: its eval results), read as the papers' drivers read it: no check is run for "
    "it, and it is empty where the dump records none. `fixed_reproduced` is rescore's own re-run of the "
    "benchmark's fixed-shape check (profile {profile}), which the papers never ran; it is not compared. "
    "`illusion` is the paper's rule (bench pass, seeded fail); `illusion_reproduced` is rescore's "
    "(fixed_reproduced pass, seeded fail)."
)
# The columns each Markdown table shows (the Parquet table has them all).
SHOWN = {
    "p1_verdicts": "kernel name source source_published bench bench_published fixed_reproduced seeded "
    "seeded_published fail_over_total fail_over_total_published illusion illusion_published illusion_reproduced "
    "in_paper match differs",
    "p1_headline": "metric scope reproduced lo hi published setup_published in_paper differs note",
    "p2_headline": "metric policy reproduced kernels_k kernels_n published in_paper differs note",
    "p2_tightening": "op dtype method paper_op current_atol current_atol_published calibrated_atol "
    "calibrated_atol_published tightening tightening_published in_paper differs note",
    "p3_headline": "strategy paper_strategy validator bug bug_recall_published ctl control_fp_published "
    "kernel_recall kernel_fp in_paper differs note",
    "p3_shape": "kernel name bug_class strategy recall recall_k recall_n recall_published in_paper match differs",
    "p4_paired": "pair variant bug_class bug_class_published d_regs d_regs_published d_ptx_regs d_instrs "
    "d_instrs_published d_ms_median d_ms_median_published d_perf_pct d_perf_pct_published ptx_identical in_paper "
    "differs static_note",
}
TITLES = {
    "p1_verdicts": "P1: verdict per kernel",
    "p1_headline": "P1: headline",
    "p2_headline": "P2: headline",
    "p2_tightening": "P2: tightening per (op, dtype)",
    "p3_headline": "P3: recall and false positives per strategy",
    "p3_shape": "P3: recall per shape-dependent buggy kernel",
    "p4_paired": "P4: paired static diffs (buggy minus control)",
}


def dump_tables(cases: pd.DataFrame, submissions: pd.DataFrame, dump: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The cases and submissions of one dump."""
    subs = submissions[submissions["dump"] == dump].reset_index(drop=True)
    if subs.empty:
        known = sorted(submissions["dump"].dropna().unique())
        raise ValueError(f"papers: dump {dump!r} has no submissions (dumps in the table: {known})")
    return cases[cases["submission_id"].isin(set(subs["submission_id"]))].reset_index(drop=True), subs


def tolerances(manifest: str | None, fmt: str) -> dict[str, dict]:
    """problem_id -> the benchmark's own per-dtype tolerance, for gpuemu dumps (whose entries carry one)."""
    if not manifest or fmt != "gpuemu":
        return {}
    docs = json.loads(Path(manifest).read_text())
    return {d["problem"]["problem_id"]: d["problem"].get("tolerance") or {} for d in docs}


def labels_note(subs: pd.DataFrame) -> str | None:
    """A note on the dump's unlabelled submissions (None when every one is labelled correct or buggy)."""
    unlabelled = int((~subs["label"].isin(LABELS)).sum())
    if not unlabelled:
        return None
    if unlabelled < len(subs):
        return (f"{unlabelled} of the dump's {len(subs)} submissions carry no label (correct / buggy): they never "
                "count as bugs or controls.")
    return (f"The dump's {unlabelled} submissions carry no labels (correct / buggy): verdicts, outcomes and flag "
            "counts are reproduced; recall, false positives, calibration and (control, variant) pairs need labels, "
            "so those cells are empty.")


def _finish(table: str, df: pd.DataFrame, out: dict, cases: pd.DataFrame, subs: pd.DataFrame, opts: dict,
            what: str, notes: list[str], shown: pd.DataFrame | None = None) -> None:
    """Write the table and its Markdown (the two setup lines, the shown columns, the notes)."""
    notes = [n for n in (*notes, labels_note(subs)) if n]
    setup = render.run_setup(cases, subs, opts["dump"], opts.get("format", "?"), what)
    paper = published.setups(opts["published"])[table]["setup"]
    md = render.document(TITLES[table], setup, paper, [("", df if shown is None else shown, SHOWN[table].split())],
                         notes)
    write_parquet(df, out["table"])
    write_text(md, out["table_md"])


def _load(inputs: dict[str, str], opts: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    # a cases table made before rescore recorded `output_nonfinite` is read too: P3 then says which rows
    # it cannot give instead of refusing the whole run
    cases = read_parquet(inputs["cases"], "cases", optional={p3.NAN_COLUMN})
    return dump_tables(cases, read_parquet(inputs["submissions"], "submissions"), opts["dump"])


def build_p1_verdicts(inputs: dict, out: dict, opts: dict) -> None:
    cases, subs = _load(inputs, opts)
    pub = published.read_csv("p1_verdicts.csv", opts["published"])
    df = p1.verdicts_table(cases, subs, published.mapping(opts["published"]), pub)
    profile = opts.get("fixed_profile", "?")
    what = f"every case the config ran per kernel (fixed check: profile {profile})"
    _finish("p1_verdicts", df, out, cases, subs, opts, what, [
        ABOUT_MATCH, ABOUT_BENCH.format(profile=profile),
        "`seeded` fail = flagged by rescore's NaN-aware fuzz oracle (its headline verdict); failed/total is shown "
        "but not compared (the two runs draw different numbers of cases)."])


def build_p1_headline(inputs: dict, out: dict, opts: dict) -> None:
    cases, subs = _load(inputs, opts)
    df = p1.headline_table(read_parquet(inputs["verdicts"]), published.read_csv("p1_headline.csv", opts["published"]))
    _finish("p1_headline", df, out, cases, subs, opts, "every case the config ran per kernel", [
        "`dump` counts every labelled kernel the seeded oracle ran; `paper kernels` only those matched to the "
        "paper's rows. lo/hi: 95% Wilson interval.",
        "`buggy_passing_bench` and `illusions` read `bench`, the verdict the dump records (as the paper did); "
        "`buggy_passing_fixed_reproduced` and `illusions_fixed_reproduced` read rescore's own re-run of the "
        "fixed-shape check instead (rows the paper lacks)."])


def _p2(inputs: dict, opts: dict) -> tuple:
    cases, subs = _load(inputs, opts)
    atols = p2.current_atols(tolerances(inputs.get("manifest"), opts.get("format", "")),
                             sorted(cases["dtype"].dropna().unique()))
    multiplier = float(opts["multiplier"])
    df, flagged, cal, dropped = p2.judged_frame(cases, subs, atols, multiplier, opts.get("strategies"),
                                                float(opts.get("quantile", 1.0)))
    tight = p2.tightening_table(df, cal, cases, subs, published.mapping(opts["published"]),
                                published.read_csv("p2_tightening.csv", opts["published"]), multiplier)
    current = "the gpuemu entries' own atol" if atols else "gpuemu's default atol (policy gpuemu-default)"
    notes = [f"current = {current}, absolute only; p95x1.5 = the published calibration, reproduced on purpose; "
             f"calibrated = rescore's own policy (multiplier {multiplier}), extra rows.",
             "Calibration uses calibration seeds of correct kernels only; evaluation uses the evaluation seeds."]
    if dropped:
        notes.append(f"{dropped} evaluation cases left out: their (op, dtype) has no control to calibrate from.")
    what = f"evaluation cases of strategies {', '.join(opts.get('strategies') or ['all'])}"
    return cases, subs, df, flagged, tight, notes, what


def build_p2_headline(inputs: dict, out: dict, opts: dict) -> None:
    cases, subs, df, flagged, tight, notes, what = _p2(inputs, opts)
    table = p2.headline_table(df, flagged, tight, published.read_csv("p2_headline.csv", opts["published"]))
    _finish("p2_headline", table, out, cases, subs, opts, what, notes)


def build_p2_tightening(inputs: dict, out: dict, opts: dict) -> None:
    cases, subs, _, _, tight, notes, what = _p2(inputs, opts)
    _finish("p2_tightening", tight, out, cases, subs, opts, what, notes + [
        "For `calibrated` rows, calibrated_atol is the policy's bound at the median reference scale of the "
        "calibration cases."])


def _frac(r: dict, prefix: str) -> str | None:
    k, n = r.get(f"{prefix}_k"), r.get(f"{prefix}_n")
    if k is None or n is None or pd.isna(k) or pd.isna(n):
        return None
    return f"{int(k)}/{int(n)} ({100 * k / n:.0f}%)" if n else f"{int(k)}/0"


def build_p3_headline(inputs: dict, out: dict, opts: dict) -> None:
    cases, subs = _load(inputs, opts)
    n = int(opts["iterations"])
    df = p3.headline_table(cases, subs, n, published.strategies(opts["published"]),
                           published.read_csv("p3_headline.csv", opts["published"]))
    rows = df.to_dict("records")
    shown = df.assign(bug=[_frac(r, "bug_recall") for r in rows], ctl=[_frac(r, "control_fp") for r in rows])
    gap = [g for g in df.loc[df["validator"] == p3.NAN_UNAWARE, "note"].dropna() if g.startswith(p3.CANNOT)]
    nan = (f"this run cannot give the `{p3.NAN_UNAWARE}` rows ({gap[0].removeprefix(p3.CANNOT)})" if gap
           else f"the `{p3.NAN_UNAWARE}` rows apply it")
    _finish("p3_headline", df, out, cases, subs, opts, f"first {n} cases per strategy and dtype", [
        f"The published design is reproduced on purpose: its seven strategies at {n} iterations, "
        "single_dtype_f32/f16 run as rescore's single_dtype_fp32/fp16 (config/published/strategies.csv); "
        "counts are per case, as published.",
        f"`{p3.NAN_AWARE}`: rescore's oracle, where a NaN or Inf the reference has too passes. The paper's validator "
        f"failed any NaN or Inf in the output (the cases column `{p3.NAN_COLUMN}`); {nan}. The published values are "
        "those of that rule: `differs` on a NaN-aware row compares two rules."], shown)


def build_p3_shape(inputs: dict, out: dict, opts: dict) -> None:
    cases, subs = _load(inputs, opts)
    n = int(opts["iterations"])
    df = p3.shape_table(cases, subs, n, published.mapping(opts["published"]),
                        published.read_csv("p3_shape.csv", opts["published"]))
    _finish("p3_shape", df, out, cases, subs, opts, f"first {n} cases per strategy and dtype", [
        ABOUT_MATCH, "New rows: every buggy kernel whose trigger names sizes (shape-dependent)."])


def build_p4_paired(inputs: dict, out: dict, opts: dict) -> None:
    cases, subs = _load(inputs, opts)
    timing = read_parquet(inputs["timing"], "timing")
    df = p4.paired_table(read_parquet(inputs["pairs"]), subs, published.mapping(opts["published"]),
                         published.read_csv("p4_paired.csv", opts["published"]), timing, opts["arch"])
    what = f"static metrics offline for {opts['arch']} (PTX + ptxas), times from results/tables/timing.parquet"
    _finish("p4_paired", df, out, cases, subs, opts, what, [
        ABOUT_MATCH, p4.timing_summary(timing, subs, df),
        f"The paper compiled for sm_86 (RTX 3060); these deltas are for {opts['arch']} "
        "(results/tables/static.parquet, the static study), each kernel captured at "
        + ("each dim's largest candidate where its problem lists candidates, else its fixed sizes "
           "(config static.sizes: largest)."
           if opts.get("static_sizes") == "largest" else "its problem's fixed sizes (config static.sizes: fixed)."),
        "d_regs: registers ptxas allocates (compared with the published d_regs); d_ptx_regs: virtual registers "
        "the PTX declares, shown beside it, as the paper does not say which it counted. `static_note` says why "
        "a row has no d_regs / d_instrs."])


BUILDERS: dict[str, Callable[[dict, dict, dict], None]] = {
    "p1_verdicts": build_p1_verdicts,
    "p1_headline": build_p1_headline,
    "p2_headline": build_p2_headline,
    "p2_tightening": build_p2_tightening,
    "p3_headline": build_p3_headline,
    "p3_shape": build_p3_shape,
    "p4_paired": build_p4_paired,
}


def build(table: str, inputs: dict[str, str], outputs: dict[str, str], opts: dict) -> None:
    """Build one paper table (a key of BUILDERS): outputs `table` (Parquet) and `table_md` (Markdown)."""
    if table not in BUILDERS:
        raise ValueError(f"unknown paper table {table!r}; known: {sorted(BUILDERS)}")
    BUILDERS[table](inputs, outputs, opts)
