"""Whether one case row is headline evidence or a robustness finding, and why.

The headline verdict (what `illusion`, recall, the paper tables and `rescore check`'s exit code mean)
is *wrong where the op is defined, on ordinary values*: at any size, in any layout and any claimed
dtype. A row whose input holds NaN or Inf (`special_values`), magnitudes far from the benchmarks'
unit scale (`extreme_magnitude`), or an offset that dwarfs the values' spread (`cancellation`), and a
row that failed because one toolchain's compiler refused the kernel (`toolchain`), is a robustness
finding of that kind instead: reported beside the headline with its evidence, and counted toward it
only when the user asks (`verdicts.robustness_in_headline`, `rescore check --robustness-counts`).

Which value classes are ordinary was decided from the runs' data (docs/dumps.md, "Headline and
robustness"): every control case flagged on the H100 run of the gpuemu corpus, other than the
tolerance of its rounded references, is in a class listed in ROBUSTNESS_VALUES, and none is in
ORDINARY_VALUES. Every module that needs the distinction reads it here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass

from rescore.model.outcomes import Outcome, ValueEnum


class EvidenceKind(ValueEnum):
    HEADLINE = "headline"  # wrong where the op is defined, on ordinary values
    CANCELLATION = "cancellation"
    EXTREME_MAGNITUDE = "extreme_magnitude"
    SPECIAL_VALUES = "special_values"
    TOOLCHAIN = "toolchain"


ROBUSTNESS_KINDS: tuple[EvidenceKind, ...] = (
    EvidenceKind.CANCELLATION,
    EvidenceKind.EXTREME_MAGNITUDE,
    EvidenceKind.SPECIAL_VALUES,
    EvidenceKind.TOOLCHAIN,
)
"""The robustness kinds, nearest to ordinary inputs first (finite values of moderate size, then
finite values far from 1, then values that are not numbers, then no fault of the values at all):
a submission flagged only by robustness findings takes the first of its kinds as its tier."""

ROBUSTNESS_VALUES: dict[str, tuple[EvidenceKind, str]] = {
    "special": (EvidenceKind.SPECIAL_VALUES,
                "NaN, +-Inf, +-0, subnormals, the square root of the dtype's largest value, cancelling pairs"),
    "nan_few": (EvidenceKind.SPECIAL_VALUES, "one to three NaN per floating input"),
    "nan_sprinkled": (EvidenceKind.SPECIAL_VALUES, "1% of every floating input NaN"),
    "huge": (EvidenceKind.EXTREME_MAGNITUDE, "N(0, 1e4): a square overflows float16, exp overflows float32"),
    "large": (EvidenceKind.EXTREME_MAGNITUDE,
              "N(0, 100): past float16's square-root range (256) in its tails, exp overflows float32"),
    "negative_large": (EvidenceKind.EXTREME_MAGNITUDE, "every value below -100: exp underflows float32"),
    "tiny": (EvidenceKind.EXTREME_MAGNITUDE, "N(0, 1e-6): subnormal in float16"),
    "offset_mean": (EvidenceKind.CANCELLATION, "N(100, 1): an offset 100 times the spread"),
    "near_constant": (EvidenceKind.CANCELLATION, "3 + N(0, 1e-3): an offset 3000 times the spread"),
}
"""Value classes (inputs/values.py) whose cases are robustness findings, with their kind and why."""

ORDINARY_VALUES: frozenset[str] = frozenset(
    {"normal", "uniform", "small", "negative", "positive", "integers", "small_integers", "sparse", "native"}
)
"""Value classes of the benchmarks' own scale (torch.randn, torch.rand, gpuemu's uniform [-10, 10]):
normals, uniforms, their signs, scaled by 1e-3 (well inside every dtype's normal range), small
integers, mostly zeros, and the benchmark's own draw (`native`)."""

TRITON_COMPILER_ERROR = "CompilationError"
"""How a case's reason starts when Triton's compiler refused a specialisation of a kernel that
loaded (worker/exceptions.py): the kernel's source is the same on every toolchain, the refusal is
this compiler's (Triton 3.6 rejects float16 `tl.exp`, 3.7 and the interpreter accept it)."""


@dataclass(frozen=True)
class Evidence:
    """What one case row is evidence of: its kind, the rule that decided it (`value_class`,
    `compiler`, `ordinary`), what the row showed (the value class, or the compiler's message and
    version), and why that rule puts it there."""

    kind: EvidenceKind
    rule: str
    detail: str
    why: str

    @property
    def headline(self) -> bool:
        return self.kind == EvidenceKind.HEADLINE

    def as_dict(self) -> dict:
        return {k: str(v) for k, v in asdict(self).items()}


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def compiler_of(versions: object) -> str:
    """`triton X.Y` from a row's `versions` JSON, or `triton` when it does not say."""
    try:
        found = json.loads(versions).get("triton") if isinstance(versions, str) else None
    except (ValueError, AttributeError):
        found = None
    return f"triton {found}" if found else "triton"


def classify(row: Mapping) -> Evidence:
    """The evidence one case row (of the cases table, or `rescore check`'s) gives: a compiler's refusal
    is `toolchain`; otherwise its value class decides (an unknown class or none, as the fixed check and
    a dead worker's rows have, counts as ordinary: a failure is never hidden for want of a label)."""
    reason = _text(row.get("reason"))
    if row.get("outcome") == Outcome.COMPILE_ERROR and reason.startswith(TRITON_COMPILER_ERROR):
        return Evidence(EvidenceKind.TOOLCHAIN, "compiler", f"{compiler_of(row.get('versions'))}: {reason}"[:300],
                        "the kernel loaded and this toolchain's compiler refused one specialisation of it")
    values = _text(row.get("values"))
    if values in ROBUSTNESS_VALUES:
        kind, why = ROBUSTNESS_VALUES[values]
        return Evidence(kind, "value_class", values, why)
    if values in ORDINARY_VALUES:
        return Evidence(EvidenceKind.HEADLINE, "ordinary", values, "values of the benchmarks' own scale")
    return Evidence(EvidenceKind.HEADLINE, "ordinary", values or "(none recorded)",
                    "no value class rescore draws as robustness: counted as ordinary")


def kind_of(row: Mapping) -> EvidenceKind:
    return classify(row).kind


def counts_in_headline(row: Mapping, robustness_in_headline: bool = False) -> bool:
    """Whether the row counts toward the headline verdict: headline evidence always, a robustness
    finding only when the user counts them (`verdicts.robustness_in_headline`)."""
    return robustness_in_headline or classify(row).headline
