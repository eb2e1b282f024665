"""Shared fixtures: paths of the tiny test kernels, and a CPU worker."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TOY = REPO / "tests" / "fixtures" / "toy"

os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture
def toy() -> Path:
    return TOY


@pytest.fixture(scope="session")
def worker():
    from rescore.engine.sandbox import Worker

    w = Worker("cpu", 1 << 15)
    yield w
    w.stop()


def toy_submission(problem: str, candidate: str, **kw):
    from rescore.model.language import detect_language
    from rescore.model.records import Problem, Submission

    p = Problem(
        problem_id=f"toy/{Path(problem).stem}",
        source=(TOY / problem).read_text(),
        path=str(TOY / problem),
        op=Path(problem).stem,
    )
    src = (TOY / candidate).read_text()
    kw.setdefault("dtypes", ("float32", "float16"))
    return Submission(
        name=Path(candidate).stem, problem=p, source=src, path=str(TOY / candidate), language=detect_language(src), **kw
    )


@pytest.fixture(autouse=True)
def failure_store(tmp_path, monkeypatch):
    """Each test starts with an empty regression memory."""
    store = tmp_path / "failure-store"
    monkeypatch.setenv("RESCORE_FAILURE_STORE", str(store))
    return store
