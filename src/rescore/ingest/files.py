"""A submission from a pair of files on disk (`rescore check`, `rescore replay`): a KernelBench-format
problem and a candidate, read as text, with what the built-in corpus says of them where they are its own."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from rescore.corpus.catalog import CORPUS_ROOT, load_op
from rescore.model.language import detect_language
from rescore.model.records import Problem, Submission


def read_source(path: str) -> str:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    return p.read_text(encoding="utf-8", errors="surrogateescape")


def pair_from_files(problem_path: str, submission_path: str) -> Submission:
    """A Submission for a KernelBench-format pair of files (no schema file needed). A problem of
    the built-in corpus keeps what its entries.yaml says (schema, tolerance overrides, the entry's
    dtypes), so that `rescore check` and `rescore replay` draw and judge its cases as the pipeline
    does: an inferred schema draws other sizes from the same seed."""
    psrc = read_source(problem_path)
    problem = Problem(problem_id=Path(problem_path).stem, source=psrc, path=problem_path, op=Path(problem_path).stem)
    ssrc = read_source(submission_path)
    sub = Submission(
        name=Path(submission_path).stem,
        problem=problem,
        source=ssrc,
        path=submission_path,
        dump="cli",
        language=detect_language(ssrc),
        dtypes=(),
    )
    return _as_in_corpus(sub)


def _as_in_corpus(sub: Submission) -> Submission:
    folder = Path(sub.problem.path).resolve().parent
    if folder.parent != CORPUS_ROOT or not (folder / "entries.yaml").is_file():
        return sub
    entries = load_op(folder, folder)
    if not entries or entries[0].problem.source != sub.problem.source:
        return sub
    known = entries[0].problem
    problem = replace(sub.problem, problem_id=known.problem_id, op=known.op, schema=known.schema,
                      tolerance=known.tolerance)
    entry = next((e for e in entries if e.source == sub.source), None)
    return replace(sub, problem=problem, dtypes=entry.dtypes if entry else sub.dtypes)
