"""Which rescore submission stands for each kernel a paper names: by name in the papers' own corpus,
else through config/published/mapping.csv.

The papers were made on the gpuemu corpus, whose entries carry the very names the papers print
(`gelu_triton_buggy`): a dump of that corpus matches each paper row to the one submission of that
name. A dump without such a name (the built-in corpus, which re-seeds the same bugs under its own
names) goes through the mapping: a buggy paper kernel matches the one submission with its (op,
label, language, bug class); a control matches the control that its `control_of` variant was
seeded from (the variant's `control` field; for dumps without one, the one correct submission of
the variant's op and language). No match, or more than one, is reported, never guessed.
"""

from __future__ import annotations

import pandas as pd

MATCHED = "matched"


def usable(submissions: pd.DataFrame) -> pd.DataFrame:
    """Submissions that were read (no ingest error)."""
    if "ingest_error" not in submissions:
        return submissions
    return submissions[submissions["ingest_error"].isna() | (submissions["ingest_error"] == "")]


def _candidates(row: dict, subs: pd.DataFrame) -> pd.DataFrame:
    sel = (subs["op"] == row["op"]) & (subs["label"] == row["label"]) & (subs["bug_class"] == row["bug_class"])
    if row.get("language"):
        sel &= subs["language"] == row["language"]
    return subs[sel]


def control_candidates(variant: dict, subs: pd.DataFrame) -> pd.DataFrame:
    """The control a buggy submission was seeded from: its `control` field, else (dumps that do not
    record one) every correct submission of its op and language."""
    correct = subs[subs["label"] == "correct"]
    if isinstance(variant.get("control"), str) and variant["control"]:
        return correct[correct["name"] == variant["control"]]
    return correct[(correct["op"] == variant["op"]) & (correct["language"] == variant["language"])]


def match_kernels(mapping: pd.DataFrame, submissions: pd.DataFrame) -> pd.DataFrame:
    """One row per paper kernel: paper_name, op, label, submission_id, name, match, matched_by, basis.

    `match` is `matched`, `no rescore counterpart` (the mapping names none), `not in this dump`,
    `ambiguous: a, b`, or `its variant is unmatched` (a control whose variant found no match);
    `matched_by` is `name` or `mapping`.
    """
    subs = usable(submissions)
    kernels = mapping[mapping["kind"] == "kernel"].to_dict("records")
    found: dict[str, dict] = {}
    rows = []
    for r in sorted(kernels, key=lambda r: bool(r["control_of"])):  # variants before their controls
        sid = name = None
        named = subs[subs["name"] == r["paper_name"]]
        by = "name" if len(named) else "mapping"
        if len(named):
            cands, status = named, ""
        elif r["control_of"]:
            variant = found.get(r["control_of"])
            if variant is None:
                status = "its variant is unmatched"
                cands = subs.iloc[0:0]
            else:
                cands, status = control_candidates(variant, subs), ""
        elif not r["bug_class"]:
            status, cands = "no rescore counterpart", subs.iloc[0:0]
        else:
            cands, status = _candidates(r, subs), ""
        if not status:
            if len(cands) == 1:
                status = MATCHED
                hit = cands.iloc[0].to_dict()
                sid, name = hit["submission_id"], hit["name"]
                found[r["paper_name"]] = hit
            elif len(cands) == 0:
                status = "not in this dump"
            else:
                status = "ambiguous: " + ", ".join(sorted(cands["name"]))
        rows.append(
            {
                "paper_name": r["paper_name"],
                "op": r["op"],
                "label": r["label"],
                "submission_id": sid,
                "name": name,
                "match": status,
                "matched_by": by,
                "basis": r["basis"],
            }
        )
    order = {r["paper_name"]: i for i, r in enumerate(kernels)}
    columns = ["paper_name", "op", "label", "submission_id", "name", "match", "matched_by", "basis"]
    out = pd.DataFrame(rows, columns=columns)
    return out.sort_values("paper_name", key=lambda s: s.map(order)).reset_index(drop=True)


def op_of(mapping: pd.DataFrame, submissions: pd.DataFrame | None = None) -> dict[str, str]:
    """Paper name (kernel or op) -> rescore op, for tables keyed by op (P2's tightening): the op of
    the dump's one submission of that name (the papers' own corpus names its ops after its
    controls), else the mapping's."""
    ops = {r["paper_name"]: r["op"] for r in mapping.to_dict("records") if r["op"]}
    if submissions is not None and len(submissions):
        subs = usable(submissions)
        named = subs[subs["name"].isin(set(mapping["paper_name"]))].drop_duplicates("name", keep=False)
        ops.update(dict(zip(named["name"], named["op"])))
    return ops
