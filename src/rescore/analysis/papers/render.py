"""A regenerated paper table as Markdown, headed by two lines: the setup it ran on and the paper's."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd


def versions(cases: pd.DataFrame) -> dict[str, str]:
    """The toolchain the cases ran with, from their `versions` JSON: key -> every distinct value."""
    seen: dict[str, set[str]] = {}
    for text in cases["versions"].dropna().unique() if "versions" in cases else []:
        try:
            doc = json.loads(text)
        except (TypeError, ValueError):
            continue
        for k, v in doc.items() if isinstance(doc, dict) else []:
            seen.setdefault(str(k), set()).add(str(v))
    return {k: " / ".join(sorted(v)) for k, v in sorted(seen.items())}


def run_setup(cases: pd.DataFrame, submissions: pd.DataFrame, dump: str, fmt: str, iterations: str) -> str:
    """One line: the dump, its size, the device, the toolchain and the iterations of this run."""
    labels = submissions["label"].value_counts().to_dict()
    tools = versions(cases)
    devices = tools.pop("device", None) or (", ".join(sorted(cases["device"].dropna().unique())) if len(cases) else "")
    toolchain = ", ".join(f"{k} {v}" for k, v in tools.items()) or "versions not recorded"
    dtypes = ", ".join(sorted(cases.loc[cases["oracle"] == "fuzz", "dtype"].dropna().unique())) if len(cases) else ""
    return (
        f"Reproduced: dump `{dump}` (format {fmt}; {len(submissions)} submissions: "
        f"{labels.get('buggy', 0)} buggy, {labels.get('correct', 0)} correct), device {devices or 'none'}, "
        f"{toolchain}; {iterations}; dtypes {dtypes or '-'}."
    )


def _cell(v: object) -> str:
    if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v).replace("|", "\\|").replace("\n", " ")


def table(df: pd.DataFrame, columns: list[str] | None = None) -> str:
    """A GitHub Markdown table of `columns` (default: all)."""
    cols = [c for c in (columns or list(df.columns)) if c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in df[cols].itertuples(index=False):
        lines.append("| " + " | ".join(_cell(v) for v in row) + " |")
    return "\n".join(lines)


def document(
    title: str, setup: str, paper_setup: str, sections: list[tuple[str, pd.DataFrame, list[str]]], notes: list[str] = ()
) -> str:
    """The Markdown file: title, the two setup lines, each table, then notes."""
    out = [f"# {title}", "", setup, f"Paper: {paper_setup}", ""]
    for heading, df, cols in sections:
        if heading:
            out += [f"## {heading}", ""]
        out += [table(df, cols), ""]
    if notes:
        out += ["Notes:", ""] + [f"- {n}" for n in notes] + [""]
    return "\n".join(out)
