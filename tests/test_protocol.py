"""The worker protocol: typed requests on both sides, plain tuples of builtins on the pipe."""

from __future__ import annotations

import pickle
from enum import Enum

import pytest

from rescore.worker.protocol import Case, Fixed, Load, Status, Stop, Time, UnknownMessage, decode, encode, plain

JOB = {"problem": {"path": "p.py"}, "submission": {"path": "s.py"}}
WIRES = [
    (Load(JOB), ("load", JOB)),
    (Fixed("kernelbench-v0.1", "float16"), ("fixed", "kernelbench-v0.1", "float16")),
    (Case("boundary", 7, "float32", {"sizes": {"N": 3}}),
     ("case", {"strategy": "boundary", "seed": 7, "dtype": "float32", "override": {"sizes": {"N": 3}}})),
    (Time("float32", 2, 5, 1.5, True, 1 << 16),
     ("time", {"dtype": "float32", "warmup": 2, "repeats": 5, "budget_s": 1.5, "host_clock": True,
               "flush_bytes": 1 << 16})),
    (Stop(), ("stop",)),
]


@pytest.mark.parametrize(("msg", "wire"), WIRES)
def test_a_request_goes_over_the_pipe_as_the_tuple_it_always_was_and_comes_back_equal(msg, wire):
    assert encode(msg) == wire
    assert decode(wire) == msg
    assert b"rescore" not in pickle.dumps(encode(msg))  # builtins only: nothing unpickled by qualified name


def test_the_short_fixed_message_takes_the_default_dtype_and_an_unknown_kind_is_named():
    assert decode(("fixed", "kernelbench-head")) == Fixed("kernelbench-head", "float32")
    with pytest.raises(UnknownMessage, match="unknown message 'bench'"):
        decode(("bench", {}))


def test_plain_leaves_no_enum_member_in_an_answer():
    class Colour(str, Enum):
        RED = "red"

    row = plain({"outcome": Colour.RED, "status": Status.RESTART, "n": 3})
    assert row == {"outcome": "red", "status": "restart", "n": 3}
    assert all(not isinstance(v, Enum) for v in row.values())
