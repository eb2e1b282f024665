"""P1: the verdict of every kernel under the benchmark and the seeded oracle, and the headline.

The paper's vocabulary is kept, and its meaning: `bench` is the verdict the dump RECORDS for the
kernel (gpuemu's meta.json `benchmark_verdict`, CUDA-L1's published claim, KernelBench's eval
result: the submissions table's `claimed_verdict`), read as the papers' drivers read it, with no
check run. rescore's own re-run of the benchmark's fixed-shape check is a separate column,
`fixed_reproduced`, which the paper has no counterpart for. `seeded` is the seeded oracle
(rescore's fuzz oracle against float64, NaN-aware: illusion.parquet's headline `fuzz_verdict`) as
pass / fail, where fail means flagged. `illusion` is the paper's rule (bench pass, seeded fail);
`illusion_reproduced` is rescore's (fixed_reproduced pass, seeded fail). `differs` compares bench,
seeded and illusion; failed/total is shown beside the paper's but not compared, since the two runs
draw different numbers of cases.
"""

from __future__ import annotations

import pandas as pd

from rescore.analysis.papers.match import MATCHED, match_kernels, usable
from rescore.analysis.papers.published import any_differs, differs, differs_text, parse
from rescore.analysis.study import illusion_table, wilson
from rescore.model.outcomes import FixedVerdict, FuzzVerdict

# The submissions table's normalised claims (ingest.common.normalize_verdict) in P1's words.
RECORDED = {"correct": FixedVerdict.PASS, "incorrect": FixedVerdict.FAIL, "not_compiled": FixedVerdict.FAIL}

SEEDED = {
    FuzzVerdict.FLAGGED: FixedVerdict.FAIL,
    FuzzVerdict.PASS: FixedVerdict.PASS,
    FuzzVerdict.DECLINED: FixedVerdict.PASS,
    FuzzVerdict.SKIPPED: FixedVerdict.SKIPPED,
}


def recorded_bench(claimed: object) -> str | None:
    """P1's `bench` from a `claimed_verdict` cell: pass / fail, None where the dump records none (a
    claim in words rescore does not know stays as written, so it is never silently dropped)."""
    if claimed is None or (isinstance(claimed, float) and claimed != claimed) or claimed == "":
        return None
    return RECORDED.get(str(claimed), str(claimed))


def paper_illusion(bench: object, seeded: object) -> bool | None:
    """The paper's illusion: the benchmark's verdict passes and the seeded oracle fails; None when the
    dump records no verdict or the seeded oracle ran nothing."""
    if bench is None or seeded not in (FixedVerdict.PASS, FixedVerdict.FAIL):
        return None
    return bench == FixedVerdict.PASS and seeded == FixedVerdict.FAIL


def _reproduced(cases: pd.DataFrame, subs: pd.DataFrame) -> pd.DataFrame:
    ill = illusion_table(cases, subs)
    meta = subs.set_index("submission_id")["provenance"]
    claims = subs.set_index("submission_id")["claimed_verdict"] if "claimed_verdict" in subs else pd.Series(
        dtype=object)
    bench = [recorded_bench(claims.get(sid)) for sid in ill["submission_id"]]
    seeded = ill["fuzz_verdict"].map(SEEDED)
    return pd.DataFrame(
        {
            "submission_id": ill["submission_id"],
            "name": ill["name"],
            "op": ill["op"],
            "label": ill["label"],
            "bug_class": ill["bug_class"],
            "source": ill["submission_id"].map(meta),
            "bench": bench,
            "fixed_reproduced": ill["fixed_verdict"],
            "seeded": seeded,
            "fuzz_verdict": ill["fuzz_verdict"],
            "failed": ill["failed_cases"],
            "total": ill["total_cases"],
            "fail_over_total": [f"{f}/{t}" for f, t in zip(ill["failed_cases"], ill["total_cases"])],
            "illusion": [paper_illusion(b, sd) for b, sd in zip(bench, seeded)],
            "illusion_reproduced": ill["illusion"].astype(bool),
        }
    )


def verdicts_table(
    cases: pd.DataFrame, submissions: pd.DataFrame, mapping: pd.DataFrame, published: pd.DataFrame
) -> pd.DataFrame:
    """Per kernel: the reproduced verdicts beside the published ones; the paper's rows first."""
    subs = usable(submissions)
    rep = _reproduced(cases, subs).set_index("submission_id")
    matches = match_kernels(mapping, subs).set_index("paper_name")
    rows, used = [], set()
    for p in published.to_dict("records"):
        m = matches.loc[p["kernel"]] if p["kernel"] in matches.index else None
        r = rep.loc[m["submission_id"]].to_dict() if m is not None and m["match"] == MATCHED else {}
        if r:
            used.add(m["submission_id"])
        pub_illusion = {"yes": True, "no": False}.get(p["illusion"].strip().lower())
        flag, which = any_differs(
            {
                "bench": differs_text(r.get("bench"), p["bench"]),
                "seeded": differs_text(r.get("seeded"), p["seeded"]),
                "illusion": None if r.get("illusion") is None or pub_illusion is None
                else r["illusion"] != pub_illusion,
            }
        )
        rows.append(
            {
                "kernel": p["kernel"],
                "name": r.get("name"),
                "op": r.get("op", m["op"] if m is not None else None),
                "label": r.get("label", m["label"] if m is not None else None),
                "bug_class": r.get("bug_class"),
                "source": r.get("source"),
                "source_published": p["source"],
                "bench": r.get("bench"),
                "bench_published": p["bench"],
                "fixed_reproduced": r.get("fixed_reproduced"),
                "seeded": r.get("seeded"),
                "seeded_published": p["seeded"],
                "fuzz_verdict": r.get("fuzz_verdict"),
                "failed": r.get("failed"),
                "total": r.get("total"),
                "fail_over_total": r.get("fail_over_total"),
                "fail_over_total_published": p["fail_over_total"],
                "illusion": r.get("illusion"),
                "illusion_published": pub_illusion,
                "illusion_reproduced": r.get("illusion_reproduced"),
                "in_paper": True,
                "match": m["match"] if m is not None else "not in mapping.csv",
                "differs": flag,
                "differs_in": which,
            }
        )
    for sid, r in rep.sort_values(["op", "label", "name"]).iterrows():
        if sid in used:
            continue
        rows.append(
            {**r.to_dict(), "kernel": r["name"], "in_paper": False, "match": "new", "differs": None, "differs_in": ""}
        )
    out = pd.DataFrame(rows)
    out["differs"] = out["differs"].astype("boolean")
    out["illusion"] = out["illusion"].astype("boolean")
    out["illusion_reproduced"] = out["illusion_reproduced"].astype("boolean")
    out["illusion_published"] = out["illusion_published"].astype("boolean")
    for col in ("failed", "total"):
        out[col] = out[col].astype("Int64")
    return out


def _count(k: int, n: int, empty: str) -> dict:
    """k of n kernels; with n = 0, `empty` says why there is nothing to count."""
    lo, hi = wilson(k, n)
    return {"k": k, "n": n, "rate": k / n if n else float("nan"), "lo": lo, "hi": hi, "reproduced": f"{k}/{n}",
            "note": "" if n else empty}


NO_RECORD = "needs the dump's recorded verdicts: this dump records no benchmark verdict (`bench` is empty)"


def _among(d: pd.DataFrame, label: str, column: str, value: object, unknown: str = "") -> dict:
    """Kernels labelled `label` whose `column` is `value`, over those of that label where it is known;
    with none, the note says why (no such label, or `unknown` where the column is empty)."""
    known = d[d["label"].eq(label) & d[column].notna()]
    labelled = d["label"].eq(label).any()
    return _count(int(known[column].eq(value).sum()), len(known),
                  unknown if labelled else f"needs labels: no kernel here is labelled {label}")


def headline_table(verdicts: pd.DataFrame, published: pd.DataFrame) -> pd.DataFrame:
    """Buggy kernels the seeded oracle flags and controls it passes: over the whole dump (beside each
    published headline) and over the paper's own kernels only (new rows). `buggy_passing_bench` and
    `illusions` read the dump's recorded verdict, as the paper did; their `_fixed_reproduced` twins
    read rescore's own re-run of the fixed check instead (rows the paper lacks)."""
    ran = verdicts[verdicts["seeded"].isin([FixedVerdict.PASS, FixedVerdict.FAIL])]
    scopes = {"dump": ran, "paper kernels": ran[ran["in_paper"]]}
    metrics = {
        "buggy_flagged": lambda d: _among(d, "buggy", "seeded", FixedVerdict.FAIL),
        "controls_passing": lambda d: _among(d, "correct", "seeded", FixedVerdict.PASS),
        "buggy_passing_bench": lambda d: _among(d, "buggy", "bench", FixedVerdict.PASS, NO_RECORD),
        "illusions": lambda d: _among(d, "buggy", "illusion", True, NO_RECORD),
        "buggy_passing_fixed_reproduced": lambda d: _among(d, "buggy", "fixed_reproduced", FixedVerdict.PASS),
        "illusions_fixed_reproduced": lambda d: _among(d, "buggy", "illusion_reproduced", True),
    }
    rows = []
    for metric, fn in metrics.items():
        for scope, d in scopes.items():
            stats = fn(d)
            pubs = published[published["metric"] == metric].to_dict("records") if scope == "dump" else []
            for p in pubs or [None]:
                rows.append(
                    {
                        "metric": metric,
                        "scope": scope,
                        **stats,
                        "published": p["published"] if p else None,
                        "setup_published": p["setup"] if p else None,
                        "differs": differs(stats["rate"], parse(p["published"])) if p else None,
                        "in_paper": p is not None,
                    }
                )
    out = pd.DataFrame(rows)
    out["differs"] = out["differs"].astype("boolean")
    return out
