"""The published tables as data: reading them, parsing their printed numbers, and saying when a
reproduced value differs from the printed one.

A printed number carries its precision: `73.2%` means 73.15..73.25, `2184` means 2183.5..2184.5.
A reproduced value differs when it falls outside that half unit of the last printed digit. A
printed value that is a condition rather than a number (`K>1`) is never compared.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

from rescore.model.paths import PUBLISHED_DIR

DEFAULT_DIR = PUBLISHED_DIR

_NUM = r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?"
_FRACTION = re.compile(rf"^(\d+)\s*/\s*(\d+)(?:\s*\(\s*({_NUM})\s*%\s*\))?$")
_PERCENT = re.compile(rf"^({_NUM})\s*%$")
_NUMBER = re.compile(rf"^({_NUM})\s*x?(?:\s*\(\s*({_NUM})\s*x\s*\))?$")
FRACTION_TOL = 0.005  # a bare k/n is compared as a rate to the nearest whole percent


@dataclass(frozen=True)
class Printed:
    """One published cell: its text, its value (None when not a number), the half unit of its last
    printed digit, k and n when it is a count, and a factor printed beside it (`2.29e-5 (2184x)`)."""

    text: str
    value: float | None = None
    tol: float | None = None
    k: int | None = None
    n: int | None = None
    factor: float | None = None


def half_unit(number: str) -> float:
    """Half a unit in the last printed digit of `number` (`2.29e-5` -> 5e-8, `2184` -> 0.5)."""
    m = re.fullmatch(r"[+-]?\d*(?:\.(\d*))?(?:[eE]([+-]?\d+))?", number.strip())
    if not m:
        raise ValueError(f"not a printed number: {number!r}")
    return 0.5 * 10.0 ** (int(m.group(2) or 0) - len(m.group(1) or ""))


def parse(text: object) -> Printed:
    """Parse one published cell (`29/30`, `1805/2467 (73.2%)`, `25%`, `-0.0034`, `2.29e-5 (2184x)`)."""
    s = "" if text is None or (isinstance(text, float) and math.isnan(text)) else str(text).strip()
    if m := _FRACTION.match(s):
        k, n = int(m.group(1)), int(m.group(2))
        tol = half_unit(m.group(3)) / 100 if m.group(3) else FRACTION_TOL
        return Printed(s, k / n if n else None, tol, k, n)
    if m := _PERCENT.match(s):
        return Printed(s, float(m.group(1)) / 100, half_unit(m.group(1)) / 100)
    if m := _NUMBER.match(s):
        factor = float(m.group(2)) if m.group(2) else None
        return Printed(s, float(m.group(1)), half_unit(m.group(1)), factor=factor)
    return Printed(s)


def differs(reproduced: object, printed: Printed | str | None) -> bool | None:
    """True when `reproduced` lies outside the printed value's precision; None when either is missing
    or the printed cell is not a number."""
    p = printed if isinstance(printed, Printed) else parse(printed)
    if p.value is None or reproduced is None:
        return None
    try:
        r = float(reproduced)
    except (TypeError, ValueError):
        return None
    if math.isnan(r):
        return None
    return bool(abs(r - p.value) > (p.tol or 0.0) * (1 + 1e-9))


def differs_text(reproduced: object, published: object) -> bool | None:
    """Exact comparison of two labels (verdicts); None when either is missing."""
    if reproduced is None or published is None or pd.isna(reproduced) or pd.isna(published):
        return None
    return str(reproduced).strip().lower() != str(published).strip().lower()


def any_differs(flags: dict[str, bool | None]) -> tuple[bool | None, str]:
    """(differs, which columns differ) over the comparable columns; None when nothing was comparable."""
    known = {k: v for k, v in flags.items() if v is not None}
    if not known:
        return None, ""
    bad = [k for k, v in known.items() if v]
    return bool(bad), ",".join(bad)


def read_csv(name: str, folder: str | Path = DEFAULT_DIR) -> pd.DataFrame:
    """One published CSV, every cell kept as printed text."""
    return pd.read_csv(Path(folder) / name, dtype=str, keep_default_na=False)


def mapping(folder: str | Path = DEFAULT_DIR) -> pd.DataFrame:
    """The paper-name -> (op, label, language, bug class) table (config/published/mapping.csv)."""
    return read_csv("mapping.csv", folder)


def strategies(folder: str | Path = DEFAULT_DIR) -> dict[str, str]:
    """Published strategy name -> rescore strategy name (config/published/strategies.csv)."""
    df = read_csv("strategies.csv", folder)
    return dict(zip(df["paper_strategy"], df["strategy"]))


def setups(folder: str | Path = DEFAULT_DIR) -> dict[str, dict]:
    """Per regenerated table: the paper, its CSV and the setup it reported (tables.yaml)."""
    return yaml.safe_load((Path(folder) / "tables.yaml").read_text(encoding="utf-8"))
