"""The hack corpus (tests/fixtures/hacks/): each exploit ends as the right outcome or finding, and a
correct control run right after it, in the same worker, still passes. No hack leaves a mark outside
its worker: the file it tries to write does not exist, the fixture it tries to delete is still there."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from conftest import REPO, TOY, toy_submission

from rescore.engine.runner import RunConfig, run_submission
from rescore.inputs.strategies import STRATEGIES
from rescore.model.findings import FINDINGS, split
from rescore.model.language import detect_language
from rescore.model.outcomes import ALL_OUTCOMES, FLAGGING
from rescore.model.records import Submission
from rescore.worker.experiments import Cause

HACKS = REPO / "tests" / "fixtures" / "hacks"
CFG = RunConfig(strategies={"default": 1}, dtypes=("float32",), timeout_s=30, load_timeout_s=300)
HANG_CFG = RunConfig(strategies={"default": 1}, dtypes=("float32",), timeout_s=3, load_timeout_s=300)
FLAGGED = set(FLAGGING)
PASS = {"pass"}


def _outcomes(value: str | list[str] | None) -> set[str] | None:
    """An outcome set of expected.yaml: a list, FLAGGED or PASS by name, or null (not run)."""
    if value is None:
        return None
    return set({"FLAGGED": FLAGGED, "PASS": PASS}[value] if isinstance(value, str) else value)


# hack -> (fuzz outcomes allowed, findings required on the fuzz case, fixed outcomes allowed or None
# when the fixed check is not run, the cause every flagged fuzz case names or None, the strategies
# it runs or None for CFG's), from tests/fixtures/hacks/expected.yaml (tools/hack_corpus.py reads it too).
EXPECTED: dict[str, tuple[set[str], set[str], set[str] | None, str | None, dict | None]] = {
    name: (_outcomes(e["fuzz"]), set(e["findings"]), _outcomes(e["fixed"]), e.get("cause"), e.get("strategies"))
    for name, e in yaml.safe_load((HACKS / "expected.yaml").read_text()).items()
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
    for outcomes, findings, _, cause, strategies in EXPECTED.values():
        assert outcomes <= set(ALL_OUTCOMES) and findings <= set(FINDINGS)
        assert cause is None or cause in {c.value for c in Cause}
        assert strategies is None or set(strategies) <= set(STRATEGIES)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_hack_is_caught_and_harms_nothing(name, worker):
    outcomes, findings, fixed, cause, strategies = EXPECTED[name]
    escape = Path("/tmp/rescore-hack-escape.txt")
    escape.unlink(missing_ok=True)
    cfg = HANG_CFG if name == "infinite_loop" else CFG
    if strategies:
        cfg = replace(cfg, strategies=strategies)
    rows = run_submission(hack(name), cfg, worker, fixed=fixed is not None)
    fuzz = [r for r in rows if r["oracle"] == "fuzz"]
    assert fuzz and all(r["outcome"] in outcomes for r in fuzz), [(r["outcome"], r.get("reason")) for r in fuzz]
    if cause is not None:
        assert all(r.get("cause") == cause for r in fuzz if r["outcome"] in FLAGGED), [
            (r["outcome"], r.get("cause"), r.get("reason")) for r in fuzz]
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


@pytest.mark.parametrize("kernel", ["scale_correct.py", "torch_compiled.py"])
def test_a_correct_kernel_has_no_findings(kernel, worker):
    """torch.compile's own patch of torch.nn.Module (Dynamo's tagging of modules, at its first compile)
    is torch's, made before the harness's snapshot: no `patched_harness` for a kernel that compiles."""
    rows = run_submission(toy_submission("problem_scale.py", kernel, dtypes=("float32",)), CFG, worker)
    assert [r["outcome"] for r in rows] == ["pass", "pass"]
    assert all(not r.get("findings") for r in rows), [r.get("findings") for r in rows]


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


def test_the_gpu_corpus_is_complete():
    """Every GPU-only exploit fixture has its problem and expected outcome in the script that runs
    it on a GPU (scripts/gpu/wild_exploits.py), and that script refuses clearly without CUDA."""
    import importlib.util
    import subprocess
    import sys

    spec = importlib.util.spec_from_file_location("wild_exploits", REPO / "scripts" / "gpu" / "wild_exploits.py")
    script = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = script  # its dataclass looks its module up there
    spec.loader.exec_module(script)
    folder = REPO / "tests" / "fixtures" / "hacks_gpu"
    assert {p.stem for p in folder.glob("*.py") if not p.name.startswith("problem_")} == set(script.EXPECTED)
    for want in script.EXPECTED.values():
        assert want.problem.is_file() and want.fuzz <= set(ALL_OUTCOMES) and want.why
    import torch

    if torch.cuda.is_available():
        return
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "gpu" / "wild_exploits.py")], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and "needs a CUDA device" in done.stderr
