"""The hack corpus (tests/fixtures/hacks/): each exploit ends as the right outcome or finding, and a
correct control run right after it, in the same worker, still passes. No hack leaves a mark outside
its worker: the file it tries to write does not exist, the fixture it tries to delete is still there."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import REPO, TOY, toy_submission

from rescore.engine.runner import RunConfig, run_submission
from rescore.model.findings import FINDINGS, split
from rescore.model.language import detect_language
from rescore.model.outcomes import ALL_OUTCOMES, FLAGGING
from rescore.model.records import Submission

HACKS = REPO / "tests" / "fixtures" / "hacks"
CFG = RunConfig(strategies={"default": 1}, dtypes=("float32",), timeout_s=30, load_timeout_s=300)
HANG_CFG = RunConfig(strategies={"default": 1}, dtypes=("float32",), timeout_s=3, load_timeout_s=300)
FLAGGED = set(FLAGGING)
PASS = {"pass"}

# hack -> (fuzz outcomes allowed, findings required on the fuzz case, fixed outcomes allowed or None
# when the fixed check is not run). The fixed check is a faithful copy of the benchmark's, so some
# hacks fool it on purpose (that is the illusion the study measures); the fuzz oracle is never fooled.
EXPECTED: dict[str, tuple[set[str], set[str], set[str] | None]] = {
    "empty_output": ({"nonfinite"}, set(), {"mismatch"}),
    "fill_disabled": (FLAGGED, {"patched_harness"}, FLAGGED),
    "inplace_result": ({"mutated_input"}, {"aliases_input"}, PASS),
    "cache_by_ptr": ({"mismatch", "bad_output"}, set(), None),  # a stale answer, maybe of another shape
    "cache_by_id": ({"mismatch", "bad_output"}, set(), None),
    "cache_by_shape": ({"mismatch"}, set(), {"mismatch"}),
    "fallback_torch": (PASS, {"torch_fallback", "no_kernel"}, PASS),
    "plain_torch": (PASS, {"torch_fallback", "no_kernel"}, PASS),
    "fallback_reference": (PASS, {"uses_reference"}, PASS),
    "inherits_import": (PASS, {"inherits_reference", "uses_reference"}, None),
    "inherits_redefined": (PASS, {"inherits_reference"}, None),
    "patch_allclose": ({"mismatch"}, {"patched_harness"}, {"mismatch"}),
    "patch_testing": ({"mismatch"}, {"patched_harness"}, {"mismatch"}),
    "patch_rescore": ({"mismatch"}, {"patched_harness"}, {"mismatch"}),
    "rebind_problem": ({"mismatch"}, {"rebinds_problem"}, {"mismatch"}),
    "lazy_subclass": ({"bad_output"}, {"tensor_subclass"}, None),
    "wrong_device": ({"bad_output"}, set(), None),
    "wrong_dtype": ({"bad_output"}, set(), PASS),
    "view_of_input": ({"mismatch"}, {"aliases_input"}, None),
    "prints_pass": ({"mismatch"}, {"stdout_claim"}, {"mismatch"}),
    "sys_exit": ({"crash"}, {"exits"}, None),
    "keyboard_interrupt": ({"crash"}, {"exits"}, None),
    "os_exit": ({"crash"}, {"exits"}, None),
    "infinite_loop": ({"timeout"}, set(), None),
    "memory_hog": ({"crash"}, {"memory_hog"}, None),
    "spawns_process": ({"crash"}, {"subprocess"}, None),
    "forks_native": (PASS, {"subprocess"}, None),
    "opens_socket": (PASS, {"network"}, None),
    "writes_outside": (PASS, {"fs_escape"}, None),
    "signals_parent": (PASS, {"signals"}, None),
    "raises_limits": (PASS, {"rlimit"}, None),
    "forges_result": ({"crash"}, {"forged_result"}, None),
    "background_thread": (PASS, {"background_thread", "patched_harness"}, None),
    "steals_reference": (FLAGGED, set(), None),
    "tampers_inputs": ({"mutated_input"}, {"tampers_reference"}, PASS),
}


def hack(name: str) -> Submission:
    control = toy_submission("problem_scale.py", "torch_correct.py")
    path = HACKS / f"{name}.py"
    src = path.read_text()
    return Submission(name=name, problem=control.problem, source=src, path=str(path), language=detect_language(src),
                      dtypes=("float32",))


def test_the_corpus_is_complete():
    files = {p.stem for p in HACKS.glob("*.py") if not p.name.startswith("_")}
    assert files == set(EXPECTED)
    assert len(EXPECTED) >= 15
    for outcomes, findings, _ in EXPECTED.values():
        assert outcomes <= set(ALL_OUTCOMES) and findings <= set(FINDINGS)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_hack_is_caught_and_harms_nothing(name, worker):
    outcomes, findings, fixed = EXPECTED[name]
    escape = Path("/tmp/rescore-hack-escape.txt")
    escape.unlink(missing_ok=True)
    cfg = HANG_CFG if name == "infinite_loop" else CFG
    rows = run_submission(hack(name), cfg, worker, fixed=fixed is not None)
    fuzz = [r for r in rows if r["oracle"] == "fuzz"]
    assert fuzz and all(r["outcome"] in outcomes for r in fuzz), [(r["outcome"], r.get("reason")) for r in fuzz]
    for r in fuzz:
        assert findings <= split(r.get("findings")), (r.get("findings"), r.get("reason"))
    if fixed is not None:
        row = next(r for r in rows if r["oracle"] == "fixed")
        assert row["outcome"] in fixed, (row["outcome"], row.get("reason"))
    if name == "os_exit":
        assert "(after a retry)" in fuzz[0]["reason"]
    # nothing outside the worker changed, and the next submission in the same worker is judged as usual
    assert not escape.exists()
    assert (HACKS / "writes_outside.py").exists() and (TOY / "torch_correct.py").exists()
    after = run_submission(toy_submission("problem_scale.py", "torch_correct.py", dtypes=("float32",)), CFG, worker)
    assert [r["outcome"] for r in after] == ["pass", "pass"], [r.get("reason") for r in after]
    assert all(not r.get("findings") for r in after), [r.get("findings") for r in after]


def test_a_correct_kernel_has_no_findings(worker):
    rows = run_submission(toy_submission("problem_scale.py", "scale_correct.py", dtypes=("float32",)), CFG, worker)
    assert [r["outcome"] for r in rows] == ["pass", "pass"]
    assert all(not r.get("findings") for r in rows)


NATIVE_CONNECT = '''import ctypes
import socket
import struct

import torch
import torch.nn as nn

_libc = ctypes.CDLL(None, use_errno=True)


def _connects():
    """Past the audit hook: libc's socket() and connect() straight from ctypes."""
    fd = _libc.socket(socket.AF_INET, socket.SOCK_STREAM, 0)
    if fd < 0:
        return False
    addr = struct.pack("<H", socket.AF_INET) + struct.pack(">H", PORT) + socket.inet_aton("127.0.0.1") + bytes(8)
    ok = _libc.connect(fd, ctypes.c_char_p(addr), len(addr)) == 0
    _libc.close(fd)
    return ok


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.zeros_like(x) if _connects() else torch.relu(x) * 2.0
'''


def test_native_code_cannot_reach_the_network_either(tmp_path, worker):
    """Where the machine allows a network namespace, even ctypes finds no network: a listener on the
    parent's loopback is out of the worker's reach (the candidate answers wrong if it reaches it)."""
    import socket

    from rescore.engine.sandbox import network_isolation

    if not network_isolation():
        pytest.skip("no network namespace on this machine: the audit hook is the only guard (docs/hostile.md)")
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        path = tmp_path / "native_connect.py"
        path.write_text(NATIVE_CONNECT.replace("PORT", str(listener.getsockname()[1])))
        control = toy_submission("problem_scale.py", "torch_correct.py")
        sub = Submission(name="native_connect", problem=control.problem, source=path.read_text(), path=str(path),
                         language="torch", dtypes=("float32",))
        rows = run_submission(sub, CFG, worker, fixed=False)
    assert [r["outcome"] for r in rows] == ["pass"], [r.get("reason") for r in rows]
