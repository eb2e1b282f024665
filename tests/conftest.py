"""Shared fixtures: paths of the tiny test kernels, and a CPU worker."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TOY = REPO / "tests" / "fixtures" / "toy"

os.environ.setdefault("TRITON_INTERPRET", "1")


def _slurm_clients_fail_fast() -> None:
    """SLURM's executor plugin runs `scontrol show config` as Snakemake starts. On a machine with
    SLURM's client commands but no controller running (the project's CI image) that fails only after
    9 s, in every snakemake a test starts, and `sinfo` likewise in the SLURM tests' probe. Where
    `scontrol ping` does not answer within 2 s, commands that fail at once with that reason go first
    on PATH; a machine whose controller answers (the SLURM tests' cluster) keeps its own."""
    try:
        if subprocess.run(["scontrol", "ping"], capture_output=True, timeout=2).returncode == 0:
            return
    except FileNotFoundError:
        return  # no SLURM client: the plugin's probe fails at once by itself
    except subprocess.TimeoutExpired:
        pass
    shims = Path(tempfile.mkdtemp(prefix="rescore-tests-slurm-"))
    atexit.register(shutil.rmtree, shims, True)
    for name in ("scontrol", "sinfo"):
        (shims / name).write_text(f"#!/bin/sh\necho '{name}: the SLURM controller does not answer (scontrol ping, "
                                  "2 s; tests/conftest.py)' >&2\nexit 1\n")
        (shims / name).chmod(0o755)
    os.environ["PATH"] = f"{shims}{os.pathsep}{os.environ.get('PATH', '')}"


_slurm_clients_fail_fast()


def _own_device_share() -> None:
    """The tests' device locks and ledgers in a folder of this test process's own: `make test` runs
    the tests in two processes (pytest-xdist), and one's retry with the device to itself must not
    stop the other's requests, nor its ledger count the other's reservations."""
    if "RESCORE_DEVICE_SHARE" not in os.environ:
        folder = tempfile.mkdtemp(prefix="rescore-tests-share-")
        atexit.register(shutil.rmtree, folder, True)
        os.environ["RESCORE_DEVICE_SHARE"] = folder


_own_device_share()


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
