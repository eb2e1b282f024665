"""Malformed input: broken submissions and problems each give one clear error (an outcome with a
reason naming the file) and the run goes on; broken dumps give error rows or one message naming the
file. Binary, non-UTF-8 and oversized files are generated here, not stored in the repository."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pandas as pd
import pytest
from conftest import REPO, TOY, toy_submission

from rescore.corpus.catalog import CorpusError, load_corpus
from rescore.engine.runner import RunConfig, run_submission
from rescore.ingest import kernelbench
from rescore.ingest.common import ingest_error, unreadable
from rescore.model.language import detect_language
from rescore.model.records import Problem, Submission
from rescore.model.sources import source_defect
from rescore.model.tables import write_parquet

MALFORMED = REPO / "tests" / "fixtures" / "malformed"
CFG = RunConfig(strategies={"default": 1}, dtypes=("float32",), timeout_s=60, load_timeout_s=300)
CONTROL = toy_submission("problem_scale.py", "torch_correct.py", dtypes=("float32",))

# submission file -> (outcome of every row, words the reason must hold)
SUBMISSIONS = {
    "syntax_error.py": ("compile_error", "SyntaxError"),
    "indentation_error.py": ("compile_error", "line 6"),
    "no_modelnew.py": ("compile_error", "defines no ModelNew"),
    "empty.py": ("compile_error", "empty"),
    "modelnew_not_callable.py": ("compile_error", "not a class"),
    "imports_missing.py": ("compile_error", "rescore_no_such_module"),
    "init_raises.py": ("crash", "cannot build the kernel"),
    "returns_none.py": ("bad_output", "NoneType"),
    "returns_numpy.py": ("bad_output", "ndarray"),
    "wrong_shape.py": ("bad_output", "shape"),
    "bom_crlf.py": ("pass", ""),
    "odd name ü 'quote' $x.py": ("pass", ""),
    "binary.py": ("compile_error", "NUL bytes"),
    "latin1.py": ("compile_error", "not UTF-8"),
    "huge.py": ("compile_error", "MiB"),
}
# problem file -> words of the `skipped` reason (the submission is not blamed)
PROBLEMS = {
    "problem_syntax.py": "SyntaxError",
    "problem_no_get_inputs.py": "get_inputs",
    "problem_get_inputs_raises.py": "the dataset file is missing",
    "problem_non_tensor_inputs.py": "not a list of inputs",
    "problem_init_raises.py": "KeyError",
    "problem_forward_raises.py": "this reference never runs",
}


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("malformed")
    (folder / "binary.py").write_bytes(bytes(range(256)) * 4)
    (folder / "latin1.py").write_bytes("# caf\xe9\nimport torch.nn as nn\nModelNew = nn.Identity\n".encode("latin-1"))
    (folder / "huge.py").write_text(CONTROL.source + "#" * (10 << 20) + "\n")
    return folder


def _submission(path: Path) -> Submission:
    src = path.read_text(encoding="utf-8", errors="surrogateescape")
    return Submission(name=path.stem, problem=CONTROL.problem, source=src, path=str(path),
                      language=detect_language(src), dtypes=("float32",))


def test_broken_submissions_each_give_one_clear_error(worker, generated):
    for name, (outcome, words) in SUBMISSIONS.items():
        path = generated / name if (generated / name).exists() else MALFORMED / name
        rows = run_submission(_submission(path), CFG, worker)
        fuzz = [r for r in rows if r["oracle"] == "fuzz"]
        assert {r["outcome"] for r in fuzz} == {outcome}, (name, [r.get("reason") for r in rows])
        assert all(words in (r.get("reason") or "") for r in fuzz), (name, fuzz[0].get("reason"))
        fixed = next(r for r in rows if r["oracle"] == "fixed")  # the benchmark's check calls a bad output wrong
        assert fixed["outcome"] == ("mismatch" if outcome == "bad_output" else outcome), (name, fixed.get("reason"))
        if outcome == "compile_error" and name in ("empty.py", "binary.py", "latin1.py", "huge.py",
                                                    "modelnew_not_callable.py"):
            assert name in rows[0]["reason"]  # the message names the file
    odd = run_submission(_submission(MALFORMED / "odd name ü 'quote' $x.py"), CFG, worker)
    assert all("'" in r["replay"] for r in odd)  # quoted for the shell
    after = run_submission(CONTROL, CFG, worker)  # and the run goes on
    assert {r["outcome"] for r in after} == {"pass"}


def test_broken_problems_are_skipped_with_the_problem_named(worker):
    for name, words in PROBLEMS.items():
        path = MALFORMED / name
        problem = Problem(problem_id=path.stem, source=path.read_text(), path=str(path), op=path.stem)
        sub = Submission(name=f"control@{path.stem}", problem=problem, source=CONTROL.source, path=CONTROL.path,
                         language="torch", dtypes=("float32",))
        rows = run_submission(sub, CFG, worker)
        assert {r["outcome"] for r in rows} == {"skipped"}, (name, [r.get("reason") for r in rows])
        assert all(name in r["reason"] for r in rows), (name, [r["reason"] for r in rows])
        assert any(words in r["reason"] for r in rows), (name, [r["reason"] for r in rows])


def test_source_defects_name_the_file():
    assert source_defect("import torch\n", "k.py") is None
    assert "k.py" in source_defect("", "k.py") and "empty" in source_defect("  \n", "k.py")
    latin = b"x = '\xe9'\n".decode("utf-8", "surrogateescape")
    assert "byte 0xe9 on line 1" in source_defect(latin, "k.py")
    assert source_defect("# -*- coding: latin-1 -*-\n" + latin, "k.py") is None


def _kernelbench_dump(root: Path) -> Path:
    problems = root / "KernelBench" / "level1"
    problems.mkdir(parents=True)
    shutil.copy(TOY / "problem_scale.py", problems / "1_Scale.py")
    shutil.copy(TOY / "problem_scale.py", problems / "2_Scale.py")
    shutil.copy(TOY / "problem_scale.py", problems / "02_Duplicate.py")  # a second problem 2
    (problems / "3_Broken.py").write_text("class Model:\n")  # no get_inputs
    run = root / "runs" / "r1"
    run.mkdir(parents=True)
    good = (TOY / "torch_correct.py").read_text()
    for pid, body in [(1, good), (2, good), (3, good), (4, good)]:
        (run / f"level_1_problem_{pid}_sample_0_kernel.py").write_text(body)
    (run / "level_1_problem_1_sample_1_kernel.py").write_bytes(b"\xff\xfe\x00binary")
    (run / "level_1_problem_1_sample_2_kernel.py").write_text("")
    loop = run / "level_1_problem_1_sample_3_kernel.py"
    os.symlink(loop.name, loop)  # a symlink to itself
    (run / "eval_results.json").write_text("{not json")
    return root


def test_a_kernelbench_dump_with_bad_entries_gives_error_rows_and_runs_on(tmp_path, worker):
    root = _kernelbench_dump(tmp_path / "kb")
    subs = kernelbench.read("kb", {"format": "kernelbench", "path": str(root)})
    errors = {s.name: ingest_error(s) for s in subs}
    assert "2_Scale.py" in errors["r1/level1/2/sample0"] and "duplicate" in errors["r1/level1/2/sample0"]
    assert "3_Broken.py" in errors["r1/level1/3/sample0"]
    assert "no problem 4" in errors["r1/level1/4/sample0"]
    assert "sample_1_kernel.py" in errors["r1/level1/1/sample1"]  # not UTF-8
    assert "sample_3_kernel.py" in errors["r1/level1/1/sample3"]  # the symlink loop
    assert errors["r1/level1/1/sample0"] is None and errors["r1/level1/1/sample2"] is None
    outcomes = {}
    for sub in subs:
        rows = run_submission(sub, CFG, worker, fixed=False)
        outcomes[sub.name] = {r["outcome"] for r in rows}
        if ingest_error(sub):
            assert rows and all(ingest_error(sub) in r["reason"] for r in rows)
    assert outcomes["r1/level1/1/sample0"] == {"pass"}
    assert outcomes["r1/level1/1/sample2"] == {"compile_error"}  # the empty kernel, named at load
    assert outcomes["r1/level1/2/sample0"] == {"skipped"}


def test_an_unreadable_problems_table_is_named_on_every_kernel(tmp_path):
    root = _kernelbench_dump(tmp_path / "kb")
    table = tmp_path / "problems.parquet"
    write_parquet(pd.DataFrame([{"code": "x", "level": 1, "name": "1_Scale.py", "problem_id": 1}]), table)
    table.write_bytes(table.read_bytes()[:40])  # truncated
    subs = kernelbench.read("kb", {"format": "kernelbench", "path": str(root), "problems": str(table)})
    assert subs and all("problems.parquet" in ingest_error(s) for s in subs)
    write_parquet(pd.DataFrame([{"code": "x", "level": 1}]), table)  # lacks columns
    subs = kernelbench.read("kb", {"format": "kernelbench", "path": str(root), "problems": str(table)})
    assert subs and all("lacks columns" in ingest_error(s) for s in subs)


def _corpus(root: Path, entries: str, files: dict[str, str] | None = None) -> Path:
    op = root / "scale"
    op.mkdir(parents=True)
    shutil.copy(TOY / "problem_scale.py", op / "problem.py")
    (op / "entries.yaml").write_text(entries)
    for name, text in (files or {}).items():
        (op / name).write_text(text)
    return root


GOOD = "- id: scale_torch\n    label: correct\n    language: torch\n"


@pytest.mark.parametrize(
    "entries, files, words",
    [
        ("entries: [unclosed\n", None, "cannot be read as YAML"),
        ("- just a list\n", None, "expected a mapping"),
        ("entries:\n  - id: a\n    language: torch\n", {"a.py": "x"}, "lacks ['label']"),
        ("entries:\n  - id: a\n    label: maybe\n    language: torch\n", {"a.py": "x"}, "label 'maybe'"),
        ("entries:\n  - id: a\n    label: correct\n    language: torch\n", None, "a.py does not exist"),
        ("entries:\n  " + GOOD + "  " + GOOD, {"scale_torch.py": "x"}, "duplicate entry ids"),
    ],
)
def test_a_bad_corpus_entry_is_one_message_naming_the_file(tmp_path, entries, files, words):
    root = _corpus(tmp_path / "corpus", entries, files)
    with pytest.raises(CorpusError, match=words.replace("[", r"\[").replace("]", r"\]")) as err:
        load_corpus(root)
    assert "scale" in str(err.value) or str(root) in str(err.value)


def test_symlink_loops_and_unreadable_paths_are_named(tmp_path):
    root = _corpus(tmp_path / "corpus", "entries:\n  " + GOOD, {"scale_torch.py": CONTROL.source})
    os.symlink("loop", root / "loop")
    assert [s.name for s in load_corpus(root)] == ["scale_torch"]  # the loop is passed over
    assert "loop of symbolic links" in unreadable(root / "loop")
    assert "does not exist" in unreadable(tmp_path / "nowhere")
    assert unreadable(root) is None
    if os.getuid() != 0:  # root reads everything: the permission case only exists for other users
        locked = tmp_path / "locked"
        locked.mkdir(mode=0)
        assert "cannot be read" in unreadable(locked)


def test_a_long_reason_keeps_its_start_and_the_error_at_its_end():
    from rescore.worker.executor import ends

    text = "problem /a/very/long/path" + "/deeper" * 80 + ".py could not be loaded: SyntaxError: line 3"
    clipped = ends(text, 200)
    assert len(clipped) <= 200 and clipped.startswith("problem /a/very") and clipped.endswith("SyntaxError: line 3")
    assert ends("short", 200) == "short"
