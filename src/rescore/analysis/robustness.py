"""A submission's robustness findings: its failing cases that are not headline evidence
(`rescore.model.evidence`), one finding per kind, each with its tier (where it fails: severity.py's
`where_tier` of that kind's cases) and its evidence (how many cases, which values and dtypes, the
first failing input, its reason and replay, and the rule that made it a robustness finding).

Pure Python over case rows as dicts, so the pipeline's tables (analysis/study.py) and `rescore
check` (engine/check.py) report the same findings the same way.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping

from rescore.analysis.severity import describe, where_tier
from rescore.model.evidence import ROBUSTNESS_KINDS, classify
from rescore.model.failures import first_failure_key
from rescore.model.outcomes import FLAGGING, Outcome

FIRST_FIELDS = ("strategy", "dtype", "seed", "sizes", "layout", "values", "outcome", "cause", "replay")


def _first_line(text: object) -> str:
    return text.strip().splitlines()[0][:300] if isinstance(text, str) and text.strip() else ""


def findings(rows: Iterable[Mapping], own_sizes: dict | None) -> list[dict]:
    """One finding per robustness kind among `rows`' failing cases (a submission's fuzz cases in the
    dtypes it claims), in evidence.ROBUSTNESS_KINDS order; [] when every failure is headline evidence."""
    by_kind: dict[str, list[Mapping]] = {}
    for row in rows:
        if row.get("outcome") == Outcome.SKIPPED:
            continue
        evidence = classify(row)
        if not evidence.headline:
            by_kind.setdefault(evidence.kind.value, []).append(row)
    out = []
    for kind in ROBUSTNESS_KINDS:
        ran = by_kind.get(kind.value, [])
        failing = [r for r in ran if r.get("outcome") in FLAGGING]
        if not failing:
            continue
        first = min(failing, key=first_failure_key)
        described = [c for c in (describe(dict(r), own_sizes) for r in failing) if c is not None]
        out.append({
            "kind": kind.value,
            "tier": where_tier(described),
            "failed_cases": len(failing),
            "cases": len(ran),
            "values": sorted({str(r.get("values")) for r in failing if r.get("values")}),
            "dtypes": sorted({str(r.get("dtype")) for r in failing if r.get("dtype")}),
            "outcomes": dict(sorted(Counter(str(r.get("outcome")) for r in failing).items())),
            "first": {k: first.get(k) for k in FIRST_FIELDS} | {"reason": _first_line(first.get("reason"))},
            "evidence": classify(first).as_dict(),
        })
    return out


def kinds_text(found: list[dict]) -> str:
    """The kinds of a submission's findings, comma-separated ("" for none): a column easy to filter on."""
    return ",".join(f["kind"] for f in found)


def as_json(found: list[dict]) -> str:
    return json.dumps(found, default=str)


def describe_finding(finding: Mapping) -> str:
    """One line for a person: kind, tier, counts, where the first failure was and what it was."""
    first = finding["first"]
    return (f"{finding['kind']} ({finding['tier']}): {finding['failed_cases']} of {finding['cases']} cases, "
            f"values {', '.join(finding['values'])}, {', '.join(finding['dtypes'])}; first {first.get('outcome')} "
            f"({first.get('strategy')}, {first.get('dtype')}, {first.get('values')}, sizes {first.get('sizes')}): "
            f"{first.get('reason')}")
