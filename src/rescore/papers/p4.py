"""P4: what each seeded bug changes in the compiled kernel, per (control, buggy) pair.

Registers and instructions come from the static study (rescore.static.study.paired_deltas: offline
PTX and ptxas, no GPU needed), for one architecture; where they are empty, `static_note` says why.
d_regs is ptxas's count of allocated registers; d_ptx_regs the PTX's declared virtual registers,
which move with the instructions that define them (the paper does not say which it printed).
Median time and perf% need kernels timed on a GPU: rescore has no timing stage yet, so they are NaN,
with the reason in `timing_note`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from rescore.papers.match import MATCHED, match_kernels, usable
from rescore.papers.published import any_differs, differs, parse

TIMING_NOTE = {
    "cpu": "no timings: the cases ran on the CPU (Triton interpreter), where kernel times mean nothing",
    "cuda": "no timings: rescore has no GPU timing stage yet",
}


def paired_table(
    pairs: pd.DataFrame,
    submissions: pd.DataFrame,
    mapping: pd.DataFrame,
    published: pd.DataFrame,
    device: str,
    arch: str,
) -> pd.DataFrame:
    """One row per (control, buggy) pair at `arch`: deltas beside the paper's; the paper's rows first."""
    subs = usable(submissions)
    matches = match_kernels(mapping, subs).set_index("paper_name")
    compiled_arch = bool(len(pairs)) and bool((pairs["arch"] == arch).any())
    if len(pairs):  # the static study covers every dump: keep this dump's pairs at this arch
        pairs = pairs[(pairs["arch"] == arch) & pairs["variant_id"].isin(set(subs["name"]))]
    by_variant = {r["variant_id"]: r for r in pairs.to_dict("records")}
    by_name = {r["name"]: r for r in subs.to_dict("records")}
    note = TIMING_NOTE.get(device, TIMING_NOTE["cuda"])
    rows, used = [], set()
    for p in published.to_dict("records"):
        buggy = p["pair"].split("->")[-1].strip()
        m = matches.loc[buggy] if buggy in matches.index else None
        how = m["match"] if m is not None else "not in mapping.csv"
        name = m["name"] if m is not None and m["match"] == MATCHED else None
        r = by_variant.get(name, {}) if name else {}
        if r:
            used.add(name)
        why = static_note(r, name, how, by_name.get(name), arch, compiled_arch)
        rows.append(_row(r, p, how, note, arch, why))
    for r in sorted(pairs.to_dict("records"), key=lambda r: (r["op"] or "", r["variant_id"])):
        if r["variant_id"] not in used:
            rows.append(_row(r, None, "new", note, arch, static_note(r, r["variant_id"], "new", None, arch, True)))
    out = pd.DataFrame(rows)
    out["differs"] = out["differs"].astype("boolean")
    for col in ("d_regs", "d_ptx_regs", "d_instrs"):
        out[col] = pd.to_numeric(out[col], errors="coerce").astype("Int64")
    return out


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
            if outcome != "ok":
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


def _row(r: dict, p: dict | None, how: str, note: str, arch: str, static_why: str) -> dict:
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
        "d_ms_median": np.nan,
        "d_ms_median_published": p["d_ms_median"] if p else None,
        "d_perf_pct": np.nan,
        "d_perf_pct_published": p["d_perf_pct"] if p else None,
        "metrics_identical": r.get("metrics_identical") if comparable else None,
        "ptx_identical": r.get("ptx_identical") if comparable else None,
        "changed_metrics": r.get("changed_metrics") if comparable else None,
        "static_note": static_why,
        "timing_note": note,
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
