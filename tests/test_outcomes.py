"""Outcomes are enum members that behave, everywhere a table, a message or a reproducer meets them,
exactly as their string values; and no module writes one as a bare string."""

from __future__ import annotations

import json
import pickle

import pandas as pd
import pyarrow as pa
import pytest

from rescore.model.outcomes import (
    ALL_OUTCOMES,
    DIED,
    FLAGGING,
    RECORDED,
    FixedVerdict,
    FuzzVerdict,
    Outcome,
    RunStatus,
    fixed_verdict,
    fuzz_verdict,
)
from rescore.model.tables import conform
from rescore.worker.protocol import plain

MEMBERS = [*Outcome, *FixedVerdict, *FuzzVerdict, *RunStatus]


@pytest.mark.parametrize("m", MEMBERS, ids=lambda m: f"{type(m).__name__}.{m.name}")
def test_a_member_prints_and_formats_as_its_value(m):
    v = m.value
    assert str(m) == v and f"{m}" == v and "%s" % m == v and "{}".format(m) == v  # noqa: UP031, UP032
    assert f"{m:>14}" == f"{v:>14}" and "{:<9}|".format(m) == f"{v:<9}|"  # noqa: UP032
    assert json.dumps({m: m}) == json.dumps({v: v})
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
