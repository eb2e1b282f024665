"""Problems (a reference Model with its input factory) and Submissions (candidate code + provenance).

Both are plain data: source text, where it came from, and what the dump says about it. Code is
only executed in a worker process (see `sandbox.py`), through `runtime/modules.py`.
"""

from __future__ import annotations

import ast
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rescore.model.derivations import top_level_assignments

LABELS = ("correct", "buggy")
"""The labels recall and false positives are counted on. A submission with neither (every one of a
real dump: `unknown`) is never a control or a bug; the study tables give it flag rates only."""
ALL_LABELS = (*LABELS, "unknown")  # every label a dump or the corpus may give a submission


def content_hash(*texts: str) -> str:
    """A short, stable hash of source texts: the identity of problems and submissions."""
    h = hashlib.sha256()
    for text in texts:
        h.update(text.encode("utf-8", "surrogateescape"))
        h.update(b"\0")
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class Problem:
    """A KernelBench-format reference: `Model`, `get_inputs()`, `get_init_inputs()`, sizes as ints."""

    problem_id: str
    source: str
    path: str
    op: str = ""
    schema: dict | None = None  # explicit op schema (dims ranges, reduction, input domains)
    tolerance: dict | None = None  # per-dtype overrides of the fuzz tolerance

    @property
    def content_hash(self) -> str:
        return content_hash(self.source)

    def size_names(self) -> list[str]:
        """Module-level names bound to int literals: the sizes a benchmark fixes and we re-bind."""
        return module_int_names(self.source)


@dataclass(frozen=True)
class Submission:
    """A candidate implementation of a Problem (defines `ModelNew`), with what the dump says of it."""

    name: str
    problem: Problem
    source: str
    path: str
    dump: str = "corpus"
    language: str = "triton"
    label: str = "unknown"
    bug_class: str | None = None
    control: str | None = None
    description: str = ""
    trigger: dict | None = None
    dtypes: tuple[str, ...] = ("float32", "float16", "bfloat16")
    declines: str | None = None
    provenance: str = ""
    claimed_verdict: str | None = None
    extra: dict = field(default_factory=dict)

    @property
    def submission_id(self) -> str:
        return content_hash(self.problem.source, self.source)

    def row(self) -> dict[str, Any]:
        """This submission as a row of the `submissions` table."""
        return {
            "submission_id": self.submission_id,
            "name": self.name,
            "dump": self.dump,
            "problem_id": self.problem.problem_id,
            "op": self.problem.op,
            "language": self.language,
            "label": self.label,
            "bug_class": self.bug_class,
            "control": self.control,
            "description": self.description,
            "trigger": json.dumps(self.trigger) if self.trigger else None,
            "dtypes": ",".join(self.dtypes),
            "declines": self.declines,
            "provenance": self.provenance,
            "claimed_verdict": self.claimed_verdict,
            "source_path": self.path,
            "problem_path": self.problem.path,
            "ingest_error": self.extra.get("ingest_error"),
        }


def claims_dtype(dtypes: tuple[str, ...] | list[str], declines: str | None, dtype: str) -> bool:
    """Whether a submission's claim covers `dtype`: a dtype it lists, or any dtype when it lists none
    (`rescore check` on a bare pair: the user's `--dtypes` are the claim) or says what it declines
    (its claim on the dtypes it does not compute is that it refuses them cleanly)."""
    return not dtypes or bool(declines) or dtype in dtypes


def module_int_names(source: str) -> list[str]:
    """Names assigned an int literal (or a product/sum of them) at the top level of a module: its free
    sizes (a name computed from another is derived, model/derivations.py)."""
    return [a.targets[0] for a in top_level_assignments(source)
            if len(a.targets) == 1 and not a.targets[0].startswith("_") and _is_int_expr(a.value)]


def _is_int_expr(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, int) and not isinstance(node.value, bool)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Add, ast.Sub, ast.FloorDiv, ast.Pow)):
        return _is_int_expr(node.left) and _is_int_expr(node.right)
    return False


INGEST_ERROR = "rescore ingest error: "  # how a broken submission's stand-in problem raises (`ingest.common.broken`)

# A line a generated submission carries when its dump says the kernel runs only with CUDA (a gpuemu
# entry's `requires_gpu`). Kept in the source, so `rescore check` and `rescore replay` on the
# generated files skip it on a CPU machine as the pipeline does.
CUDA_ONLY_MARKER = "# rescore: this kernel runs only with CUDA (the dump says so)"


def cuda_only(source: str) -> bool:
    """Whether a source carries CUDA_ONLY_MARKER on a line of its own."""
    return CUDA_ONLY_MARKER in source.splitlines()


def submission_to_dict(sub: Submission) -> dict:
    """A Submission as plain JSON-able data (the ingest manifest)."""
    from dataclasses import asdict

    return asdict(sub)


def submission_from_dict(data: dict) -> Submission:
    data = dict(data)
    data["problem"] = Problem(**data["problem"])
    data["dtypes"] = tuple(data.get("dtypes") or ())
    return Submission(**data)


def read_manifests(paths: list[str]) -> list[Submission]:
    """The submissions of the ingest manifests at `paths` (JSON lists of `submission_to_dict`), in order."""
    return [submission_from_dict(d) for path in paths for d in json.loads(Path(path).read_text())]
