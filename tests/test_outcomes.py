"""Outcomes are enum members that behave, everywhere a table, a message or a reproducer meets them,
exactly as their string values; and no module writes one as a bare string."""

from __future__ import annotations

import ast
import json
import pickle
import re
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

import rescore
from rescore.model.outcomes import (
    ALL_OUTCOMES,
    DIED,
    FLAGGING,
    RECORDED,
    FixedVerdict,
    FuzzVerdict,
    Outcome,
    RunStatus,
    SanitizerStatus,
    fixed_verdict,
    fuzz_verdict,
)
from rescore.model.tables import conform
from rescore.worker.protocol import Case, decode, encode, plain

MEMBERS = [*Outcome, *FixedVerdict, *FuzzVerdict, *RunStatus, *SanitizerStatus]


@pytest.mark.parametrize("m", MEMBERS, ids=lambda m: f"{type(m).__name__}.{m.name}")
def test_a_member_prints_and_formats_as_its_value(m):
    v = m.value
    assert str(m) == v and f"{m}" == v and "%s" % m == v and "{}".format(m) == v  # noqa: UP031, UP032
    assert f"{m:>14}" == f"{v:>14}" and "{:<9}|".format(m) == f"{v:<9}|"  # noqa: UP032
    assert json.dumps({m: m}) == json.dumps({v: v})
    assert repr(m) == repr(v) and f"{[m]}" == f"{[v]}" and "%r" % ({m: 1},) == "%r" % ({v: 1},)  # noqa: UP031
    assert hash(m) == hash(v) and m == v and v == m and not (m != v)
    assert v in {m} and m in frozenset({v}) and m in [v]


def test_frames_and_arrow_hold_the_values():
    s = pd.Series([Outcome.CRASH, "pass", Outcome.TIMEOUT, "crash"])
    assert s.isin([Outcome.CRASH]).tolist() == [True, False, False, True]
    assert s.isin(FLAGGING).tolist() == [True, False, True, True]
    assert (s == Outcome.CRASH).tolist() == [True, False, False, True]
    assert s.value_counts().to_dict() == {"crash": 2, "pass": 1, "timeout": 1}
    assert pa.array([Outcome.PASS, FuzzVerdict.FLAGGED, RunStatus.OK]).to_pylist() == ["pass", "flagged", "ok"]
    df = pd.DataFrame({"outcome": [Outcome.MISMATCH, Outcome.PASS], "reason": ["x", ""]})
    assert df.astype(str)["outcome"].tolist() == ["mismatch", "pass"]
    cols = conform(df, "cases").column("outcome").to_pylist()
    assert cols == ["mismatch", "pass"] and all(type(c) is str for c in cols)


def test_the_sets_keep_their_values():
    assert ALL_OUTCOMES == ("pass", "mismatch", "nonfinite", "bad_output", "mutated_input", "compile_error",
                            "crash", "timeout", "declined", "skipped")
    assert Outcome.OOM not in RECORDED and "oom" not in ALL_OUTCOMES
    assert "crash" in FLAGGING and "pass" not in FLAGGING and set(DIED) == {"crash", "timeout"}


def test_verdicts():
    assert fixed_verdict("pass") is FixedVerdict.PASS and fixed_verdict(Outcome.SKIPPED) is FixedVerdict.SKIPPED
    assert fixed_verdict("crash") is FixedVerdict.FAIL and fixed_verdict(None) is FixedVerdict.FAIL
    assert fuzz_verdict(["pass", "crash"]) is FuzzVerdict.FLAGGED
    assert fuzz_verdict(["pass", "declined"]) is FuzzVerdict.DECLINED
    assert fuzz_verdict(["skipped"]) is FuzzVerdict.SKIPPED and fuzz_verdict(["pass", "skipped"]) is FuzzVerdict.PASS


def test_only_builtins_cross_the_pipe():
    """A str enum pickles by class reference; the worker's answers must not carry one."""
    row = plain({"outcome": Outcome.CRASH, "nested": {"ref_outcome": Outcome.PASS}, "list": [RunStatus.OK]})
    data = pickle.dumps(row)
    assert b"rescore" not in data
    back = pickle.loads(data)
    assert back == {"outcome": "crash", "nested": {"ref_outcome": "pass"}, "list": ["ok"]}
    assert type(back["outcome"]) is str and type(back["nested"]["ref_outcome"]) is str
    wire = encode(Case("shrink", 3, "float32", {"sizes": [4], "outcome": Outcome.TIMEOUT}))
    assert b"rescore" not in pickle.dumps(wire) and decode(wire).override == {"sizes": [4], "outcome": "timeout"}


# --- no bare outcome literal -------------------------------------------------------------------------

SRC = Path(rescore.__file__).parent
OUTCOME_WORDS = {o.value for o in Outcome}
# fail, flagged, ok; found, clean, incomplete, not_run
VERDICT_WORDS = {m.value for m in (*FixedVerdict, *FuzzVerdict, *RunStatus, *SanitizerStatus)} - OUTCOME_WORDS
OUTCOME_KEYS = re.compile(r"(^|_)(outcome|verdict|status)$")  # a dict key or keyword that holds one
COMPARED_BY = {"isin", "eq", "ne"}
# Files where these words are another vocabulary, never an outcome rescore writes: the benchmarks'
# own result words, mapped to claimed verdicts by the dump adapters.
ALLOWED = {"ingest/common.py"}


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _in_enum_body(node: ast.AST, parent: dict) -> bool:
    """`A = "pass"` in the body of an Enum class: a member's definition."""
    up = parent.get(node)
    klass = parent.get(up)
    return (isinstance(up, ast.Assign) and isinstance(klass, ast.ClassDef)
            and any(isinstance(b, ast.Name) and b.id.endswith("Enum") for b in klass.bases))


def _compared(node: ast.AST, parent: dict) -> bool:
    """An operand of a comparison, or an argument of `.isin`/`.eq`/`.ne`, directly or in a collection."""
    up = parent.get(node)
    if isinstance(up, (ast.Tuple, ast.List, ast.Set)):
        node, up = up, parent.get(up)
    if isinstance(up, ast.Compare):
        return True
    return (isinstance(up, ast.Call) and node in up.args and isinstance(up.func, ast.Attribute)
            and up.func.attr in COMPARED_BY)


def _stored_as_outcome(node: ast.AST, parent: dict) -> bool:
    """The value of an `outcome`/`verdict`/`status` key or keyword, or a function's return value."""
    up = parent.get(node)
    if isinstance(up, ast.IfExp):
        node, up = up, parent.get(up)
    if isinstance(up, ast.keyword):
        return up.arg is not None and bool(OUTCOME_KEYS.search(up.arg))
    if isinstance(up, ast.Dict) and node in up.values:
        key = up.keys[up.values.index(node)]
        return isinstance(key, ast.Constant) and isinstance(key.value, str) and bool(OUTCOME_KEYS.search(key.value))
    return isinstance(up, ast.Return)


def bare_outcomes(source: str) -> list[tuple[int, str]]:
    """(line, word) of every outcome written as a bare string in `source`.

    A word of Outcome's counts anywhere but as a subscript key (`row["skipped"]`, a column) or an enum
    member's definition; a verdict-only word (fail, flagged, ok: also column names and record keys)
    counts where it is compared or stored as an outcome, verdict or status."""
    tree = ast.parse(source)
    parent = _parents(tree)
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            continue
        up = parent.get(node)
        if isinstance(up, ast.Subscript) and up.slice is node or _in_enum_body(node, parent):
            continue
        if node.value in OUTCOME_WORDS or (
            node.value in VERDICT_WORDS and (_compared(node, parent) or _stored_as_outcome(node, parent))
        ):
            found.append((node.lineno, node.value))
    return found


def _package_files() -> list[Path]:
    return [p for p in sorted(SRC.rglob("*.py")) if "corpus/ops" not in p.relative_to(SRC).as_posix()]


def test_no_module_writes_an_outcome_as_a_bare_string():
    found = [f"{p.relative_to(SRC)}:{line}: {word!r}"
             for p in _package_files() if p.relative_to(SRC).as_posix() not in ALLOWED
             for line, word in bare_outcomes(p.read_text())]
    assert not found, ("write these as Outcome/FixedVerdict/FuzzVerdict/RunStatus/SanitizerStatus members:\n"
                       + "\n".join(found))


def test_the_allowed_files_do_use_the_words():
    """An allow-listed file that no longer holds any of the words should leave the list."""
    for name in ALLOWED:
        assert bare_outcomes((SRC / name).read_text()), name


@pytest.mark.parametrize("planted", [
    'row = {"outcome": "crash", "reason": why}',
    'return dict(row, outcome="skipped", reason=why)',
    'raise WorkerDied("timeout", why)',
    'v = Verdict("oom", text)',
    'if r["outcome"] == "pass": pass',
    'ran = df[~df["outcome"].isin(["skipped", "declined"])]',
    'if loaded.get("outcome") in ("crash", "timeout"): pass',
    'ok = df[df["fuzz_verdict"] == "flagged"]',
    'x = df["seeded"].eq("fail")',
    'row.update(outcome="ok", reason="")',
    'return "fail" if bad else "pass"',
    'doc = {"verdict": "fail"}',
    'rows.append(dict(base, status="ok"))',
    'return [dict(base, status="clean", reason=why)]',
    'shown = table[~table["status"].isin(["clean", "not_run"])]',
])
def test_the_walk_finds_a_planted_literal(planted):
    assert bare_outcomes(planted), planted


@pytest.mark.parametrize("clean", [
    'n = row["skipped"] + df["flagged"].sum()',
    'class Kind(ValueEnum):\n    PASS = "pass"\n    OK = "ok"',
    'record = {"ok": ok}; good = record.get("ok")',
    'df["flagged"] = df["outcome"].isin(FLAGGING)',
    'row["why"] = "nondeterministic" if nd else "flagged"',
    'if r["outcome"] == Outcome.PASS and v == FuzzVerdict.FLAGGED: pass',
])
def test_the_walk_leaves_other_words_alone(clean):
    assert not bare_outcomes(clean), clean
