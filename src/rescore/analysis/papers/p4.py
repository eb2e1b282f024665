"""P4: what each seeded bug changes in the compiled kernel, per (control, buggy) pair.

Registers and instructions come from the static study (rescore.static.study.paired_deltas: offline
PTX and ptxas, no GPU needed), for one architecture; where they are empty, `static_note` says why.
d_regs is ptxas's count of allocated registers; d_ptx_regs the PTX's declared virtual registers,
which move with the instructions that define them (the paper does not say which it printed).
Times come from the timing stage (results/tables/timing.parquet, rescore.worker.timing): d_ms_median is the
buggy kernel's median time minus its control's, d_perf_pct that difference as a percentage of the
control's median (positive: the buggy kernel is slower), as the paper's signs read. Where either
kernel has no time (no GPU, a crash, a dump not timed, a timed output that was wrong) both are NaN
and `timing_note` says why. Times are never compared with the paper's (`differs`): they were taken on
another GPU.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from rescore.analysis.papers.match import MATCHED, match_kernels, usable
from rescore.analysis.papers.published import any_differs, differs, parse
from rescore.model.outcomes import Outcome, RunStatus

TIMES = ("control_ms", "variant_ms", "d_ms_median", "d_perf_pct")


class Times:
    """The timing table's rows of one dump's submissions, by submission name."""

    def __init__(self, timing: pd.DataFrame, subs: pd.DataFrame):
        ids = dict(zip(subs["name"], subs["submission_id"]))
        rows = timing[timing["submission_id"].isin(set(ids.values()))] if len(timing) else timing
        by_id = {r["submission_id"]: r for r in rows.to_dict("records")}
        self.by_name = {name: by_id[sid] for name, sid in ids.items() if sid in by_id}

    def pair(self, control: str | None, variant: str | None) -> dict:
        """control_ms, variant_ms, d_ms_median, d_perf_pct and timing_note of one pair (NaN and the
        reason where either kernel has no time)."""
        out: dict = dict.fromkeys(TIMES, np.nan)
        if not self.by_name:
            return dict(out, timing_note="no times: results/tables/timing.parquet has no row of this dump "
                                         "(config timing.dumps)")
        if not variant or not control:
            return dict(out, timing_note="no times: the pair's kernels are not both in this dump")
        got = {}
        for role, name in (("control", control), ("buggy", variant)):
            r = self.by_name.get(name)
            if r is None:
                return dict(out, timing_note=f"no times: {role} {name} has no row in timing.parquet")
            if r["status"] != RunStatus.OK:
                return dict(out, timing_note=f"no times: {role} {name} {r['status']}: {r['reason']}")
            if wrong_when_timed(r):
                return dict(out, timing_note=f"no times: {role} {name}'s timed output is {r['timed_output']} "
                                             f"(its times are not its work): {r.get('timed_reason') or ''}"[:600])
            got[role] = r
        c, v = got["control"], got["buggy"]
        d = v["median_ms"] - c["median_ms"]
        note = (f"timed on {v['device']} ({v['dtype']}): control {_spread(c)}, buggy {_spread(v)}")
        return {"control_ms": c["median_ms"], "variant_ms": v["median_ms"], "d_ms_median": d,
                "d_perf_pct": 100.0 * d / c["median_ms"] if c["median_ms"] else np.nan, "timing_note": note}


def wrong_when_timed(r: dict) -> bool:
    """Whether a timing row's last timed output was judged and found wrong (`timed_output` other than
    pass or skipped, the output not judged; rows written before the column existed have none)."""
    verdict = r.get("timed_output")
    return isinstance(verdict, str) and verdict not in (Outcome.PASS, Outcome.SKIPPED)


def _spread(r: dict) -> str:
    return f"{r['median_ms']:.4g} ms [p10-p90 {r['p10_ms']:.4g}-{r['p90_ms']:.4g}, {int(r['repeats'])} runs]"


def timing_summary(timing: pd.DataFrame, subs: pd.DataFrame, table: pd.DataFrame) -> str:
    """One line for the Markdown: how many pairs have times, where they were taken, or why none."""
    subs = usable(subs)
    timed = int(table["d_ms_median"].notna().sum()) if len(table) else 0
    mine = timing[timing["submission_id"].isin(set(subs["submission_id"]))] if len(timing) else timing
    ok = mine[mine["status"] == RunStatus.OK] if len(mine) else mine
    wrong = [r["name"] for r in ok.to_dict("records") if wrong_when_timed(r)]
    left_out = (f" Left out, their timed output wrong: {', '.join(sorted(wrong))}." if wrong else "")
    if not len(ok):
        why = "; ".join(sorted(set(mine["reason"].dropna()))[:3]) if len(mine) else "the dump was not timed"
        return f"No times ({len(mine)} rows of timing.parquet for this dump, none timed: {why}): d_ms, d_perf% NaN."
    return (f"Times: {timed} of {len(table)} pairs, on {', '.join(sorted(set(ok['device'])))} (CUDA events, L2 flushed "
            f"before each call, median of up to {int(ok['repeats'].max())} calls after {int(ok['warmup'].max())} "
            "warm-up calls); d_perf_pct = 100 x d_ms_median / the control's median (positive: buggy slower). "
            "The paper timed on an RTX 3060: times are shown beside its values, never compared." + left_out)


def paired_table(
    pairs: pd.DataFrame,
    submissions: pd.DataFrame,
    mapping: pd.DataFrame,
    published: pd.DataFrame,
    timing: pd.DataFrame,
    arch: str,
) -> pd.DataFrame:
    """One row per (control, buggy) pair at `arch`: deltas beside the paper's; the paper's rows first."""
    subs = usable(submissions)
    matches = match_kernels(mapping, subs).set_index("paper_name")
    compiled_arch = bool(len(pairs)) and bool((pairs["arch"] == arch).any())
    if len(pairs):  # the static study covers every dump: keep this dump's pairs at this arch
        pairs = pairs[(pairs["arch"] == arch) & pairs["variant_id"].isin(set(subs["name"]))]
    by_variant = {r["variant_id"]: r for r in pairs.to_dict("records")}
    times = Times(timing, subs)
    by_name = {r["name"]: r for r in subs.to_dict("records")}
    rows, used = [], set()
    for p in published.to_dict("records"):
        buggy = p["pair"].split("->")[-1].strip()
        m = matches.loc[buggy] if buggy in matches.index else None
        how = m["match"] if m is not None else "not in mapping.csv"
        name = m["name"] if m is not None and m["match"] == MATCHED else None
        r = by_variant.get(name, {}) if name else {}
        if r:
            used.add(name)
        control = r.get("control_id") or _matched(matches, p["pair"].split("->")[0].strip())
        why = static_note(r, name, how, by_name.get(name), arch, compiled_arch)
        rows.append(_row(r, p, how, times.pair(control, name), arch, why))
    for r in sorted(pairs.to_dict("records"), key=lambda r: (r["op"] or "", r["variant_id"])):
        if r["variant_id"] not in used:
            why = static_note(r, r["variant_id"], "new", None, arch, True)
            rows.append(_row(r, None, "new", times.pair(r["control_id"], r["variant_id"]), arch, why))
    out = pd.DataFrame(rows)
    out["differs"] = out["differs"].astype("boolean")
    for col in ("d_regs", "d_ptx_regs", "d_instrs"):
        out[col] = pd.to_numeric(out[col], errors="coerce").astype("Int64")
    for col in TIMES:
        out[col] = pd.to_numeric(out[col], errors="coerce").astype("float64")
    return out


def _matched(matches: pd.DataFrame, paper_name: str) -> str | None:
    """The name of the submission matched to a paper kernel, or None."""
    if paper_name not in matches.index or matches.loc[paper_name, "match"] != MATCHED:
        return None
    return matches.loc[paper_name, "name"]


def static_note(r: dict, name: str | None, how: str, sub: dict | None, arch: str, compiled_arch: bool) -> str:
    """Why a row's d_regs / d_instrs are empty ("" when they are filled).

    r is the static study's pair row of the variant (empty when there is none), name the variant's
    submission (None when no submission matches the paper's kernel: `how` says why), sub its
    submissions row, compiled_arch whether the static study compiled anything for `arch`."""
    if r:
        if r.get("comparable"):
            return ""
        sides = []
        for side in ("variant", "control"):
            outcome = r.get(f"{side}_outcome")
            if outcome != RunStatus.OK:
                error = r.get(f"{side}_error")
                error = f": {error[:300]}" if isinstance(error, str) and error else ""
                sides.append(f"{side} {r.get(f'{side}_id')} {outcome}{error}")
        return f"not compared at {arch}: " + "; ".join(sides)
    if name is None:
        return f"no kernel of this dump stands for the paper's: {how}"
    if sub is not None and sub.get("language") != "triton":
        return f"{name} is {sub.get('language')}: the static study compiles Triton kernels only"
    if sub is not None and sub.get("label") != "buggy":
        return (
            f"{name} is labelled {sub.get('label')}: the static study pairs buggy kernels with their "
            "controls (label it in the dump spec's `labels:`)"
        )
    if sub is not None and not sub.get("control"):
        return f"{name} names no control: the static study cannot pair it (name one in the dump spec's `controls:`)"
    if not compiled_arch:
        return f"the static study compiled nothing for {arch} (config static.archs)"
    return f"the static study has no pair for {name} at {arch}"


def _row(r: dict, p: dict | None, how: str, timed: dict, arch: str, static_why: str) -> dict:
    comparable = bool(r.get("comparable")) if r else False
    d_regs = r.get("delta_registers") if comparable else None
    d_instrs = r.get("delta_instructions") if comparable else None
    row = {
        "pair": p["pair"] if p else f"{r['control_id']}->{r['variant_id']}",
        "control": r.get("control_id"),
        "variant": r.get("variant_id"),
        "op": r.get("op"),
        "bug_class": r.get("bug_class"),
        "bug_class_published": p["bug_class"] if p else None,
        "arch": arch,
        "comparable": comparable,
        "variant_outcome": r.get("variant_outcome"),
        "control_outcome": r.get("control_outcome"),
        "d_regs": d_regs,
        "d_regs_published": p["d_regs"] if p else None,
        "d_ptx_regs": r.get("delta_ptx_registers") if comparable else None,
        "d_instrs": d_instrs,
        "d_instrs_published": p["d_instrs"] if p else None,
        "control_ms": timed["control_ms"],
        "variant_ms": timed["variant_ms"],
        "d_ms_median": timed["d_ms_median"],
        "d_ms_median_published": p["d_ms_median"] if p else None,
        "d_perf_pct": timed["d_perf_pct"],
        "d_perf_pct_published": p["d_perf_pct"] if p else None,
        "metrics_identical": r.get("metrics_identical") if comparable else None,
        "ptx_identical": r.get("ptx_identical") if comparable else None,
        "changed_metrics": r.get("changed_metrics") if comparable else None,
        "static_note": static_why,
        "timing_note": timed["timing_note"],
        "in_paper": p is not None,
        "match": how,
    }
    if p:
        row["differs"], row["differs_in"] = any_differs(
            {"d_regs": differs(d_regs, parse(p["d_regs"])), "d_instrs": differs(d_instrs, parse(p["d_instrs"]))}
        )
    else:
        row["differs"], row["differs_in"] = None, ""
    return row
