"""P1: the verdict of every kernel under the fixed-shape check and the seeded oracle, and the headline.

The paper's vocabulary is kept: `bench` is the fixed-shape check (rescore's `fixed` oracle),
`seeded` is the seeded oracle (rescore's fuzz oracle against float64, NaN-aware) as pass / fail,
where fail means flagged. `differs` compares the verdicts and the illusion; failed/total is shown
beside the paper's but not compared, since the two runs draw different numbers of cases.
"""

from __future__ import annotations

import pandas as pd

from rescore.analysis.papers.match import MATCHED, match_kernels, usable
from rescore.analysis.papers.published import any_differs, differs, differs_text, parse
from rescore.analysis.study import illusion_table, wilson
from rescore.model.outcomes import FixedVerdict, FuzzVerdict

SEEDED = {
    FuzzVerdict.FLAGGED: FixedVerdict.FAIL,
    FuzzVerdict.PASS: FixedVerdict.PASS,
    FuzzVerdict.DECLINED: FixedVerdict.PASS,
    FuzzVerdict.SKIPPED: FixedVerdict.SKIPPED,
}


def _reproduced(cases: pd.DataFrame, subs: pd.DataFrame) -> pd.DataFrame:
    ill = illusion_table(cases, subs)
    meta = subs.set_index("submission_id")["provenance"]
    return pd.DataFrame(
        {
            "submission_id": ill["submission_id"],
            "name": ill["name"],
            "op": ill["op"],
            "label": ill["label"],
            "bug_class": ill["bug_class"],
            "source": ill["submission_id"].map(meta),
            "bench": ill["fixed_verdict"],
            "seeded": ill["fuzz_verdict"].map(SEEDED),
            "fuzz_verdict": ill["fuzz_verdict"],
            "failed": ill["failed_cases"],
            "total": ill["total_cases"],
            "fail_over_total": [f"{f}/{t}" for f, t in zip(ill["failed_cases"], ill["total_cases"])],
            "illusion": ill["illusion"].astype(bool),
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
                "illusion": None if not r or pub_illusion is None else r["illusion"] != pub_illusion,
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
                "seeded": r.get("seeded"),
                "seeded_published": p["seeded"],
                "fuzz_verdict": r.get("fuzz_verdict"),
                "failed": r.get("failed"),
                "total": r.get("total"),
                "fail_over_total": r.get("fail_over_total"),
                "fail_over_total_published": p["fail_over_total"],
                "illusion": r.get("illusion"),
                "illusion_published": pub_illusion,
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
    out["illusion_published"] = out["illusion_published"].astype("boolean")
    for col in ("failed", "total"):
        out[col] = out[col].astype("Int64")
    return out


def _count(k: int, n: int, label: str) -> dict:
    """k of n kernels labelled `label`; with n = 0 a note that says the rate needs that label."""
    lo, hi = wilson(k, n)
    note = "" if n else f"needs labels: no kernel here is labelled {label}"
    return {"k": k, "n": n, "rate": k / n if n else float("nan"), "lo": lo, "hi": hi, "reproduced": f"{k}/{n}",
            "note": note}


def headline_table(verdicts: pd.DataFrame, published: pd.DataFrame) -> pd.DataFrame:
    """Buggy kernels the seeded oracle flags and controls it passes: over the whole dump (beside each
    published headline) and over the paper's own kernels only (new rows)."""
    ran = verdicts[verdicts["seeded"].isin([FixedVerdict.PASS, FixedVerdict.FAIL])]
    scopes = {"dump": ran, "paper kernels": ran[ran["in_paper"]]}
    metrics = {
        "buggy_flagged": lambda d: _count(
            int((d["label"].eq("buggy") & d["seeded"].eq(FixedVerdict.FAIL)).sum()), int(d["label"].eq("buggy").sum()),
            "buggy",
        ),
        "controls_passing": lambda d: _count(
            int((d["label"].eq("correct") & d["seeded"].eq(FixedVerdict.PASS)).sum()),
            int(d["label"].eq("correct").sum()),
            "correct",
        ),
        "buggy_passing_bench": lambda d: _count(
            int((d["label"].eq("buggy") & d["bench"].eq(FixedVerdict.PASS)).sum()), int(d["label"].eq("buggy").sum()),
            "buggy",
        ),
        "illusions": lambda d: _count(
            int((d["label"].eq("buggy") & d["illusion"].fillna(False)).sum()), int(d["label"].eq("buggy").sum()),
            "buggy",
        ),
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
