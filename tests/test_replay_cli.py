"""`rescore check` (summary, --json, exit codes) and `rescore replay` of a failure it printed."""

import json
import shlex
import subprocess
import sys

from conftest import REPO, TOY


def rescore(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rescore.cli", *args], cwd=REPO, capture_output=True, text=True, timeout=300
    )


def test_check_json_flags_the_illusion_and_replay_reproduces_it(tmp_path):
    out = tmp_path / "check.json"
    r = rescore(
        "check",
        str(TOY / "problem_scale.py"),
        str(TOY / "scale_tail_bug.py"),
        "--device",
        "cpu",
        "--cases",
        "10",
        "--dtypes",
        "float32",
        "--json",
        str(out),
    )
    assert r.returncode == 1, r.stderr
    assert "ILLUSION" in r.stdout
    doc = json.loads(out.read_text())
    assert doc["fixed"]["verdict"] == "pass"
    assert doc["fuzz"]["verdict"] == "flagged" and doc["fuzz"]["cases"] == 10
    failure = doc["fuzz"]["failures"][0]
    assert set(failure) >= {"outcome", "strategy", "seed", "dtype", "shapes", "max_abs_err", "replay"}
    argv = shlex.split(failure["replay"])
    assert argv[:2] == ["rescore", "replay"]
    first = rescore(*argv[1:])
    second = rescore(*argv[1:])
    assert first.returncode == 1
    assert f"outcome: {failure['outcome']}" in first.stdout
    assert first.stdout == second.stdout  # same inputs (hash printed), same outcome, same message


def test_check_exit_codes(tmp_path):
    ok = rescore(
        "check",
        str(TOY / "problem_scale.py"),
        str(TOY / "scale_correct.py"),
        "--device",
        "cpu",
        "--cases",
        "4",
        "--dtypes",
        "float32",
    )
    assert ok.returncode == 0, ok.stdout + ok.stderr
    missing = rescore("check", str(TOY / "nope.py"), str(TOY / "scale_correct.py"))
    assert missing.returncode == 2 and "no such file" in missing.stderr
    usage = rescore("check", str(TOY / "problem_scale.py"))
    assert usage.returncode == 2
