"""The uncertainty statement (`results/uncertainty.md`): what the tests covered, what they did not
and why, and for every submission that passed, the 95% upper bound on its per-case failure
probability under each sampling distribution. Every number is computed from the `cases` table.
"""

from __future__ import annotations

import json
from collections import defaultdict

import pandas as pd

from rescore.analysis.robustness import describe_finding
from rescore.analysis.study import GPU_ONLY_CLASSES, headline_mask
from rescore.model.builds import ONLY_PYTORCH_RAN
from rescore.model.outcomes import FuzzVerdict, Outcome, SanitizerStatus, stopped_early
from rescore.model.records import LABELS
from rescore.model.schema import largest_in_json


def upper_bound(failures: int, n: int, confidence: float = 0.95) -> float:
    """One-sided exact (Clopper-Pearson) upper bound on a failure probability; 0 failures: 1-(1-c)^(1/n) ~ 3/n."""
    if n <= 0:
        return 1.0
    if failures == 0:
        return 1.0 - (1.0 - confidence) ** (1.0 / n)
    from scipy.stats import beta

    return float(beta.ppf(confidence, failures + 1, n - failures)) if failures < n else 1.0


def _size_ranges(df: pd.DataFrame) -> dict[str, tuple[int, int]]:
    ranges: dict[str, list[int]] = defaultdict(list)
    for s in df["sizes"].dropna():
        for k, v in json.loads(s).items():
            ranges[k].append(int(v))
    return {k: (min(v), max(v)) for k, v in ranges.items()}


def never_past_the_benchmark(cases: pd.DataFrame, ops: pd.Series) -> list[tuple[str, int, int]]:
    """(op, largest fuzz input, the benchmark's largest input) for each op whose executed fuzz cases
    never held more elements than the fixed-shape check's input: a kernel right up to the
    benchmark's size and wrong past it (one hard-coded to it) passes all of them."""
    ran = cases[cases["outcome"] != Outcome.SKIPPED].reset_index(drop=True)
    ran = ran.assign(op=ran["submission_id"].map(ops))
    largest = ran["shapes"].map(largest_in_json)
    fixed = largest[ran["oracle"] == "fixed"].groupby(ran["op"]).max()
    fuzz = largest[ran["oracle"] == "fuzz"].groupby(ran["op"]).max()
    return [(op, int(fuzz[op]), int(n)) for op, n in fixed.items() if op in fuzz and 0 < fuzz[op] <= n]


def stopped_lines(fuzz: pd.DataFrame, submissions: pd.DataFrame) -> list[str]:
    """The submissions whose remaining cases were not run (budget spent, or settled), each with how
    many of its evaluation fuzz cases ran: their verdicts rest on those alone."""
    stopped = fuzz[(fuzz["outcome"] == Outcome.SKIPPED) & fuzz["reason"].map(stopped_early).astype(bool)]
    if stopped.empty:
        return []
    names = submissions.set_index("submission_id")["name"]
    lines = ["", f"{stopped['submission_id'].nunique()} submissions were stopped before all their cases ran "
                 "(`submission_budget_s`, `settle` in the config); their verdicts rest on the cases that ran:", "",
             "| submission | fuzz cases run of planned | why the rest were not run |", "|---|---|---|"]
    for sid, g in stopped.groupby("submission_id"):
        planned = fuzz[fuzz["submission_id"] == sid]
        ran = int((planned["outcome"] != Outcome.SKIPPED).sum())
        lines.append(f"| {names.get(sid, sid)} | {ran} of {len(planned)} | {g['reason'].iloc[0][:200]} |")
    return lines


def robustness_lines(illusion: pd.DataFrame, in_headline: bool) -> list[str]:
    """The robustness findings (model/evidence.py) of the submissions whose headline fuzz verdict passes,
    each with its kinds, tiers and first failing case: what the headline leaves out (or, with
    `verdicts.robustness_in_headline`, what it counts); those of flagged submissions are counted."""
    if "robustness" not in illusion:
        return []
    found = illusion[illusion["robustness_kinds"].fillna("") != ""]
    apart = found[found["fuzz_verdict"] != FuzzVerdict.FLAGGED]
    counted = ("are counted in the verdicts above" if in_headline
               else "are not counted in the verdicts above, nor in the bounds on passing submissions")
    lines = ["", "## Robustness findings", "",
             "Failures on NaN/Inf inputs, extreme magnitudes, cancelling values, or from one toolchain's compiler "
             f"{counted} (`verdicts.robustness_in_headline`). {len(found)} submissions have such findings, "
             f"{len(found) - len(apart)} of them also flagged on ordinary values; the others are below, each "
             "finding with its tier (where it fails) and its first failing case (all of them: `robustness` in "
             "illusion.parquet).", ""]
    if apart.empty:
        return lines
    lines += ["| submission | label | headline fuzz verdict | findings |", "|---|---|---|---|"]
    for r in apart.sort_values("name").to_dict("records"):
        parts = [describe_finding(f).replace("|", "/") for f in json.loads(r["robustness"])]
        lines.append(f"| {r['name']} | {r['label']} | {r['fuzz_verdict']} | {'<br>'.join(parts)} |")
    return lines


def _fmt(p: float) -> str:
    return f"{100 * p:.2g}%"


def _labels_paragraph(submissions: pd.DataFrame) -> list[str]:
    """A paragraph (and its blank line) on the submissions that carry no label, or nothing when all do."""
    unlabelled = int((~submissions["label"].isin(LABELS)).sum())
    if not unlabelled:
        return []
    return [f"{unlabelled} of {len(submissions)} submissions carry no label (correct or buggy), as a real dump's do: "
            "their verdicts and outcomes below are what the tests found, but recall and false-positive rates need "
            "labels, so the study tables count them only in flag rates (`needs_labels`, `note`) and never as bugs or "
            "controls.", ""]


def gpus_paragraph(ran: pd.DataFrame, submissions: pd.DataFrame) -> list[str]:
    """A paragraph (and its blank line) on the GPUs the executed cases ran on, from the `gpu` column
    ("<index>: <model>", engine/gpus.py), or nothing when they ran on one GPU or none."""
    if "gpu" not in ran.columns:
        return []
    on_gpu = ran[ran["gpu"].notna()]
    gpus = sorted(on_gpu["gpu"].unique())
    if len(gpus) < 2:
        return []
    model = on_gpu["gpu"].map(lambda g: str(g).split(": ", 1)[-1])
    models = sorted(model.unique())
    if len(models) == 1:
        return [f"The cases ran on {len(gpus)} GPUs of one model ({models[0]}): {', '.join(gpus)}.", ""]
    names = submissions.set_index("submission_id")["name"]
    parts = []
    for m in models:
        rows = on_gpu[model == m]
        parts.append(f"{m} ({rows['gpu'].nunique()} GPUs, {rows['submission_id'].nunique()} submissions, "
                     f"{len(rows)} cases)")
    spread = on_gpu.assign(model=model).groupby("submission_id")["model"].nunique()
    split = sorted(names.get(s, s) for s in spread[spread > 1].index)
    return [f"**The cases ran on GPUs of {len(models)} different models**: {'; '.join(parts)}. Each submission's "
            "cases ran on the GPU its check shard was given, so two submissions may have been judged on "
            "different models: rounding, scheduling, races and memory limits differ between models, and a "
            "verdict holds for the model in its cases' `gpu` column, not for the others. To compare "
            "submissions on one model, run with `gpus: 1` or on GPUs of one model."
            + (f" These submissions have cases on more than one model: {', '.join(split)}."
               if split else ""), ""]


UNSEEN_PAST_BUFFERS = [
    "- That a kernel never writes past the end of a buffer it allocated itself (its output): on a GPU such a",
    "  write lands in whatever the allocator placed next, and is seen only when that is an input, a snapshot",
    "  or another judged tensor, so which cases catch it changes with the harness's own allocations. Under",
    "  the interpreter every access outside a tensor argument fails its launch.",
]


def _named(rows: pd.DataFrame, limit: int = 6) -> str:
    names = sorted(rows["name"].dropna().unique())
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def memory_safety_lines(sanitizer: pd.DataFrame | None) -> list[str]:
    """What the statement says of memory past a kernel's buffers, and of races: unseen on a GPU unless
    the sanitizer stage (engine/sanitizer.py) ran, and then what it found on which submissions.
    Reports in kernels of the harness's own libraries (torch's fills and copies) are counted apart."""
    if sanitizer is None:
        return UNSEEN_PAST_BUFFERS
    ran = sanitizer[sanitizer["status"].isin([SanitizerStatus.FOUND, SanitizerStatus.CLEAN])]
    if ran.empty:
        why = sorted(sanitizer["reason"].dropna().unique())[:1] or ["no flagged CUDA or Triton submission to run"]
        return [*UNSEEN_PAST_BUFFERS, f"  The compute-sanitizer stage, which sees such accesses, did not run: {why[0]}"]
    library = ran.get("library_kernel", pd.Series(False, index=ran.index)).eq(True)  # missing: not a library's
    lines = []
    for tool, g in ran.groupby("tool", sort=True):
        found = g[(g["status"] == SanitizerStatus.FOUND) & ~library.loc[g.index]]
        kinds = "; ".join(f"{kind} in {d['submission_id'].nunique()} ({_named(d)})"
                          for kind, d in found.groupby("diagnosis", sort=True)) or "nothing"
        lines.append(f"  {tool} ran on {g['submission_id'].nunique()} submissions' first failing (or a "
                     f"representative) case and found {kinds}.")
    if library.any():
        lines.append(f"  {int(library.sum())} reports name kernels of the harness's own libraries (torch, cub, "
                     "cuBLAS); they are in the table and not counted above.")
    pytorch_only = sanitizer[sanitizer["reason"].fillna("").str.contains(ONLY_PYTORCH_RAN, regex=False)]
    if len(pytorch_only):
        lines.append(f"  {pytorch_only['submission_id'].nunique()} CUDA submissions were not sanitized: the case "
                     f"chosen {ONLY_PYTORCH_RAN} (it failed to build or was never called), so only PyTorch's "
                     "kernels ran.")
    return [
        "- That a kernel never reads or writes past its own buffers, races on shared memory or misuses a barrier",
        "  on inputs other than the one case each submission was sanitized on (results/tables/sanitizer.parquet,",
        "  memcheck and initcheck with PyTorch's caching allocator off, so a tensor's bounds are the sanitizer's;",
        "  initcheck without the harness's NaN fill of fresh memory, so a read of memory nothing wrote is its to see):",
        *lines,
        "  Submissions not among them (passing ones, unless `sanitizer.passing` is on) were not sanitized: there a",
        "  write past a buffer lands in whatever the allocator placed next and is seen only when that is judged.",
    ]


def statement(cases: pd.DataFrame, submissions: pd.DataFrame, illusion: pd.DataFrame, config: dict) -> str:
    fuzz = cases[(cases["oracle"] == "fuzz") & (cases["purpose"] == "evaluation")]
    ran = fuzz[~fuzz["outcome"].isin([Outcome.SKIPPED])]
    devices = sorted(ran["device"].dropna().unique()) or ["(none)"]
    lines = [
        "# What these tests cover, and what they cannot rule out",
        "",
        f"Generated from `results/tables/cases.parquet` ({len(cases)} cases, {len(fuzz)} fuzz cases on evaluation "
        f"seeds, {len(ran)} of them executed) for {submissions['submission_id'].nunique()} submissions in dumps "
        f"{', '.join(sorted(submissions['dump'].unique()))}; device {', '.join(devices)}; master seed "
        f"{config.get('master_seed')}; strategies {', '.join(sorted(ran['strategy'].unique()))}.",
        "",
        *gpus_paragraph(ran, submissions),
        *_labels_paragraph(submissions),
        "## The input space covered",
        "",
        "| op | sizes (min..max per dim) | dtypes | value classes | layouts | cases |",
        "|---|---|---|---|---|---|",
    ]
    ops = submissions.set_index("submission_id")["op"]
    ran = ran.assign(op=ran["submission_id"].map(ops))
    for op, g in ran.groupby("op"):
        sizes = ", ".join(f"{k} {lo}..{hi}" for k, (lo, hi) in sorted(_size_ranges(g).items()))
        lines.append(f"| {op} | {sizes} | {', '.join(sorted(g['dtype'].unique()))} | "
                     f"{', '.join(sorted(g['values'].dropna().unique()))} | "
                     f"{', '.join(sorted(g['layout'].dropna().unique()))} | {len(g)} |")
    lines += ["", "## What was not covered, and why", ""]
    skipped = fuzz[fuzz["outcome"] == Outcome.SKIPPED]
    stopped = skipped["reason"].map(stopped_early).astype(bool)
    if len(skipped[~stopped]):
        lines += ["| reason | cases | submissions |", "|---|---|---|"]
        for reason, g in skipped[~stopped].groupby(skipped["reason"].fillna("")):
            lines.append(f"| {reason.splitlines()[0][:160]} | {len(g)} | {g['submission_id'].nunique()} |")
    elif not stopped.any():
        lines.append("No case was skipped.")
    lines += stopped_lines(fuzz, submissions)
    declined = fuzz[fuzz["outcome"] == Outcome.DECLINED]
    if len(declined):
        names = submissions.set_index("submission_id")["name"]
        lines += ["", "Declined inputs (the kernel refused them; their correctness there is untested):", ""]
        for sid, g in declined.groupby("submission_id"):
            lines.append(f"- {names.get(sid, sid)}: {len(g)} cases declined ({', '.join(sorted(g['dtype'].unique()))};"
                         f" layouts {', '.join(sorted(g['layout'].dropna().unique()))})")
    if "cpu" in devices:
        gpu_only = submissions[submissions["bug_class"].isin(GPU_ONLY_CLASSES)]
        lines += ["", f"On the CPU the Triton interpreter runs programs one after another and cannot hold more than "
                      f"memory allows: races and 32-bit offset overflow cannot show ({len(gpu_only)} corpus variants "
                      f"of those classes are left out of recall), and bfloat16 results are not computed (skipped)."]
    budget = config.get("budget", {})
    lines += ["", f"Sizes were capped by an element budget per input ({budget}); nothing larger was tried."]
    short = never_past_the_benchmark(cases, ops)
    if short:
        lines += ["", f"No fuzz case of these {len(short)} ops held more elements than the benchmark's own input "
                      "(the schema's ranges or the budget end there), so a kernel right up to the benchmark's size "
                      "and wrong past it, such as one hard-coded to it, passes every case: "
                      + ", ".join(f"{op} ({fz:,} of {fx:,})" for op, fz, fx in short) + "."]
    lines += ["", "## Submissions that passed: how unlikely is a failure?", "",
              "For a submission with no failure in n cases drawn from a strategy's distribution, the 95% upper "
              "bound on the probability that one more case from that distribution fails is 1-0.05^(1/n) "
              "(about 3/n). It says nothing about inputs that distribution does not draw.", "",
              "| submission | label | strategy: cases -> 95% upper bound on per-case failure probability |",
              "|---|---|---|"]
    passed = illusion[illusion["fuzz_verdict"] == FuzzVerdict.PASS]
    counted = ran[headline_mask(ran, bool(config.get("robustness_in_headline")))]
    for r in passed.sort_values("name").to_dict("records"):
        g = counted[counted["submission_id"] == r["submission_id"]]
        parts = [f"{s}: {len(gs)} -> {_fmt(upper_bound(0, len(gs)))}" for s, gs in g.groupby("strategy")]
        parts.append(f"all: {len(g)} -> {_fmt(upper_bound(0, len(g)))}")
        lines.append(f"| {r['name']} | {r['label']} | {'; '.join(parts)} |")
    lines += robustness_lines(illusion, bool(config.get("robustness_in_headline")))
    lines += [
        "",
        "## What no test here can establish",
        "",
        "- That a kernel is correct on inputs outside the sampled sizes, dtypes, value classes and layouts above:",
        "  a bound on the failure probability holds only for the distribution the cases were drawn from.",
        "- That a kernel is correct on another GPU, driver, compiler or Triton version: every case records the",
        "  versions it ran with, and a different toolchain can change rounding, scheduling and races.",
        "- That a race or an uninitialised read is absent: each passing case ran twice and agreed, which only",
        "  shows the interleavings that happened; the CPU interpreter runs programs sequentially.",
        *memory_safety_lines(None),  # the sanitizer runs after this statement: results/sanitizer.md
        "- That the reference is right: the float64 reference is the problem's own PyTorch module; a wrong",
        "  problem is reproduced faithfully.",
        "- That a tolerance is the right one for a user's purpose: the verdicts depend on the policy named in",
        "  every case, and the tolerance study shows how they move between policies.",
        "",
    ]
    return "\n".join(lines)
