"""Pair tables: one row per submission, holding the reference module's code and the submission's
code side by side (exports such as archives of generated CUDA kernels), read from Parquet or JSONL.

The config maps the table's columns onto what rescore needs:
`{format: pairs, path: FILE, columns: {problem_code, submission_code, claimed, id: [..], op, label,
keep: [..]}, function: NAME, dtypes: [..]}`. Submission code is used as is when it defines
`ModelNew`; when it defines a function instead (`function`, default `forward` or `module_fn`), or
is CUDA C++ with a `forward` (a pybind11 module or a plain function), it is wrapped in a generated
ModelNew that calls it as fn(*inputs, *reference params). Anything else is an ingest-error row.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from rescore.ingest.common import (
    ProblemIds,
    broken,
    materialise,
    normalize_dtypes,
    normalize_verdict,
    problem_defect,
    slug,
    top_level_names,
)
from rescore.ingest.templates import FUNCTION_SUBMISSION, LOAD_CUDA_FUNCTION, LOAD_PYTHON_FUNCTION, literal, render
from rescore.model.language import detect_language
from rescore.model.records import Problem, Submission, content_hash

REQUIRED = ("problem_code", "submission_code")
FUNCTIONS = ("forward", "module_fn")
CPP_MARKERS = re.compile(r"#include|__global__|PYBIND11_MODULE|torch::Tensor")


class PairError(ValueError):
    """A row whose submission cannot be made into a ModelNew."""


def read(name: str, spec: dict) -> list[Submission]:
    """Every row of the table as a Submission; unreadable tables and rows become error rows."""
    path = Path(spec["path"])
    cols = dict(spec.get("columns") or {})
    try:
        rows = read_rows(path)
    except ValueError as exc:
        return [broken(name, f"{name}/*", f"{name}/*", str(path), str(exc))]
    wanted = [
        c
        for key in ("problem_code", "submission_code", "claimed", "op", "label")
        if (c := cols.get(key, key if key in REQUIRED else None))
    ]
    wanted += _as_list(cols.get("id")) + _as_list(cols.get("keep"))
    if not rows:
        return [broken(name, f"{name}/*", f"{name}/*", str(path), "the table has no rows")]
    present = set().union(*(r.keys() for r in rows if isinstance(r, dict)))
    missing = [c for c in wanted if c not in present]
    if missing:
        return [
            broken(
                name,
                f"{name}/*",
                f"{name}/*",
                str(path),
                f"no column(s) {missing} (columns: {sorted(present)}); fix `columns:` in the dump's config",
            )
        ]
    ids = ProblemIds()
    problems: dict[str, Problem] = {}
    seen: dict[str, int] = {}
    subs = []
    for i, row in enumerate(rows):
        sub = _row(name, spec, cols, path, i, row, ids, problems)
        if sub.name in seen and sub.extra.get("ingest_error") is None:
            sub = broken(
                name,
                sub.name,
                sub.problem.problem_id,
                f"{path} row {i}",
                f"duplicate id {sub.name!r} (also row {seen[sub.name]})",
                source=sub.source,
            )
        seen.setdefault(sub.name, i)
        subs.append(sub)
    return subs


def read_rows(path: Path) -> list:
    """The table's rows as dicts (a JSONL line that is not an object is kept as an error marker)."""
    if path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            return pq.read_table(path).to_pylist()
        except (pa.ArrowInvalid, OSError) as exc:
            raise ValueError(f"not a readable Parquet table ({exc})") from exc
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"unreadable ({exc})") from exc
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"not valid JSON ({exc})") from exc
        if not isinstance(data, list):
            raise ValueError("expected a JSON list of row objects")
        return data
    rows: list = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            row = _BadLine(lineno, str(exc))
        rows.append(row if isinstance(row, (dict, _BadLine)) else _BadLine(lineno, "not a JSON object"))
    return rows


class _BadLine:
    """A JSONL line that could not be read as a row object."""

    def __init__(self, lineno: int, error: str):
        self.lineno, self.error = lineno, error

    def keys(self) -> set:
        return set()


def _as_list(value) -> list[str]:
    if value is None:
        return []
    return [str(v) for v in value] if isinstance(value, (list, tuple)) else [str(value)]


def _row(
    dump: str, spec: dict, cols: dict, path: Path, i: int, row, ids: ProblemIds, problems: dict[str, Problem]
) -> Submission:
    where = f"{path} row {i}"
    if isinstance(row, _BadLine):
        return broken(dump, f"row{i}", f"{dump}/*", f"{path} line {row.lineno}", f"not valid JSON ({row.error})")
    id_cols = _as_list(cols.get("id"))
    name = "/".join(slug(row.get(c)) for c in id_cols) if id_cols else f"row{i}"
    op = str(row.get(cols["op"])) if cols.get("op") else ""
    problem_code = row.get(cols.get("problem_code", "problem_code"))
    code = row.get(cols.get("submission_code", "submission_code"))
    base_id = f"{dump}/{slug(op)}" if op else f"{dump}/p{content_hash(str(problem_code))[:8]}"
    if not isinstance(problem_code, str) or not problem_code.strip():
        return broken(dump, name, base_id, where, "empty reference module code")
    defect = problem_defect(problem_code)
    if defect:
        return broken(dump, name, base_id, where, f"reference module: {defect}")
    if not isinstance(code, str) or not code.strip():
        return broken(dump, name, base_id, where, "empty submission code")
    problem_id = ids(base_id, problem_code)
    problem = problems.get(problem_id)
    if problem is None:
        problem = problems[problem_id] = Problem(
            problem_id=problem_id,
            source=problem_code,
            op=op or problem_id,
            path=materialise(problem_code, "pairs_problem"),
        )
    try:
        source, how = submission_source(code, problem_code, spec.get("function"), name)
    except PairError as exc:
        return broken(dump, name, problem_id, where, str(exc), source=code)
    label = str(row.get(cols["label"], "")).lower() if cols.get("label") else ""
    extra = {"row": i, "wrapped": how}
    extra.update({c: row.get(c) for c in _as_list(cols.get("keep"))})
    return Submission(
        name=name,
        problem=problem,
        source=source,
        path=materialise(source, "pairs_submission"),
        dump=dump,
        language=detect_language(source),
        dtypes=normalize_dtypes(spec.get("dtypes")),
        label=label if label in ("correct", "buggy") else "unknown",
        claimed_verdict=normalize_verdict(row.get(cols["claimed"])) if cols.get("claimed") else None,
        provenance=f"{where}",
        extra=extra,
    )


def submission_source(code: str, problem_code: str, function: str | None, title: str) -> tuple[str, str]:
    """(a ModelNew source for this submission code, how it was made: as_is | function | cuda)."""
    names = top_level_names(code)
    is_cpp = names is None and CPP_MARKERS.search(code) is not None
    if names is not None and "ModelNew" in names:
        return code, "as_is"
    if names is None and not is_cpp:
        if "ModelNew" in code:
            return code, "as_is"  # a broken ModelNew file: the worker records its compile_error
        raise PairError(
            "submission code is neither Python nor CUDA C++ (a syntax error, and no #include, "
            "__global__, PYBIND11_MODULE or torch::Tensor)"
        )
    candidates = [function] if function else list(FUNCTIONS)
    if is_cpp:
        fn = next((f for f in candidates if re.search(rf"\b{re.escape(f)}\s*\(", code)), None)
        if fn is None:
            raise PairError(f"CUDA C++ submission defines no function named {' or '.join(candidates)}")
        cuda = code
        if "PYBIND11_MODULE" not in code:
            cuda += (
                "\n#include <torch/extension.h>\n"
                f'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {{ m.def("{fn}", &{fn}); }}\n'
            )
        loader = render(
            LOAD_CUDA_FUNCTION,
            source=literal(cuda),
            function=literal(fn),
            ext_name=literal(f"rescore_pairs_{content_hash(cuda)}"),
        )
        how = "cuda"
    else:
        fn = next((f for f in candidates if f in (names or set())), None)
        if fn is None:
            raise PairError(f"submission code defines neither ModelNew nor a function named {' or '.join(candidates)}")
        loader = render(LOAD_PYTHON_FUNCTION, source=literal(code), function=literal(fn))
        how = "function"
    return render(
        FUNCTION_SUBMISSION, title=slug(title), reference_source=literal(problem_code), load_function=loader
    ), how
