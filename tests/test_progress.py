"""Progress on the terminal and nowhere else: a check shard's progress file, the line `rescore
progress` draws from those files and Snakemake's log, `make all`'s wrapper (quiet when its output is a
log, drawn on a terminal), and `rescore check`'s own line."""

from __future__ import annotations

import fcntl
import io
import json
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import textwrap
import time

from conftest import REPO, TOY

from rescore.engine.progress import (
    ShardProgress,
    Snapshot,
    parse_snakemake_log,
    read_progress,
    run_with_progress,
    status_line,
    write_plan,
)
from rescore.engine.runner import Progress

SNAKEMAKE_LOG = """\
Job stats:
job                    count
-------------------  -------
ingest                     1
check_shard                2
static_study               1
all                        1
total                      5

Select jobs to execute...
[Sat Dec  5 04:21:49 2026]
localrule ingest:
    output: results/ingest/corpus/manifest.json
    jobid: 2
[Sat Dec  5 04:21:50 2026]
Finished jobid: 2 (Rule: ingest)
1 of 5 steps (20%) done
[Sat Dec  5 04:21:50 2026]
rule static_study:
    jobid: 7
[Sat Dec  5 04:21:50 2026]
rule check_shard:
    wildcards: dump=corpus, shard=0
    jobid: 3
[Sat Dec  5 04:21:51 2026]
rule check_shard:
    wildcards: dump=corpus, shard=1
    jobid: 4
"""


class Clock:
    def __init__(self, t: float = 1000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_check_shard_keeps_its_progress_in_a_file(tmp_path):
    clock = Clock()
    progress = ShardProgress(tmp_path, "corpus", 3, [("a", 4, 10.0), ("b", 2, 30.0)], clock=clock)
    doc = json.loads((tmp_path / "shard-3.json").read_text())
    assert (doc["dump"], doc["shard"], doc["submissions"], doc["cases"], doc["weight"]) == ("corpus", 3, 2, 6, 40.0)
    assert (doc["cases_done"], doc["finished"], doc["current"]) == (0, False, "a")
    progress.step("a")
    clock.t += 0.1
    progress.step("a")  # within a second of the last write: not written yet
    assert json.loads((tmp_path / "shard-3.json").read_text())["cases_done"] == 0
    clock.t += 2
    progress.step("a")
    doc = json.loads((tmp_path / "shard-3.json").read_text())
    assert doc["cases_done"] == 3 and doc["weight_done"] == 10.0 * 3 / 4  # a submission in hand counts by its cases
    progress.step("a")
    progress.submission_done("a")
    progress.step("b", 2)
    progress.submission_done("b")
    progress.close()
    doc = json.loads((tmp_path / "shard-3.json").read_text())
    assert (doc["cases_done"], doc["submissions_done"], doc["weight_done"], doc["finished"]) == (6, 2, 40.0, True)


def test_the_line_says_the_stage_the_counts_the_slowest_shard_and_the_time_left(tmp_path):
    folder = tmp_path / "corpus"
    write_plan(folder, "corpus", {0: {"submissions": 2, "cases": 100, "weight": 20.0},
                                  1: {"submissions": 3, "cases": 300, "weight": 60.0}})
    fast = ShardProgress(folder, "corpus", 0, [("a", 50, 10.0), ("b", 50, 10.0)], clock=Clock(1000.0))
    slow = ShardProgress(folder, "corpus", 1, [("c", 100, 20.0), ("d", 100, 20.0), ("e", 100, 20.0)],
                         clock=Clock(1000.0))
    fast.clock.t = slow.clock.t = 1060.0
    fast.step("a", 50)
    fast.submission_done("a")
    slow.step("c", 50)  # c is still in hand
    sm = parse_snakemake_log(SNAKEMAKE_LOG)
    assert sm.check_shards == 2 and (sm.steps_done, sm.steps_total) == (1, 5)
    assert sorted(sm.running.values()) == ["check_shard", "check_shard", "static_study"]
    line = status_line(read_progress(tmp_path, since=999.0), sm, now=1060.0, started=990.0)
    assert line.startswith("rescore 1:10")
    assert "checks: 0/2 shards (2 running), 1/5 submissions, 100/400 cases" in line
    assert "slowest: corpus shard 1 at 17%, c" in line  # 10 of its 60 expected seconds done
    # 20 of 80 done in 60 s: 180 s left at that rate, but shard 1 alone needs 300 s more
    assert "~5 min left" in line and "step 1/5" in line
    assert read_progress(tmp_path, since=2000.0).shards == []  # another run's files are left out


def test_before_and_after_the_checks_the_line_names_the_rules_running():
    sm = parse_snakemake_log(SNAKEMAKE_LOG + "Finished jobid: 3 (Rule: check_shard)\n"
                             "Finished jobid: 4 (Rule: check_shard)\n4 of 5 steps (80%) done\n")
    before = status_line(Snapshot({}, []), parse_snakemake_log(SNAKEMAKE_LOG), now=100.0, started=95.0)
    assert "running check_shard, static_study" in before
    shards = [{"dump": "corpus", "shard": k, "finished": True, "cases_done": 10, "started": 0.0} for k in (0, 1)]
    after = status_line(Snapshot({}, shards), sm, now=100.0, started=95.0)
    assert "checks done (2 shards, 20 cases)" in after and "running static_study" in after
    assert "step 4/5" in after


def test_make_all_adds_nothing_when_its_output_is_not_a_terminal(capfd):
    script = "import sys; print('snakemake says hello'); sys.exit(3)"
    assert run_with_progress([sys.executable, "-c", script], tty=False) == 3
    out, err = capfd.readouterr()
    assert "snakemake says hello" in out and "rescore" not in out + err


def test_make_all_on_a_terminal_draws_the_line_and_keeps_snakemakes_output(tmp_path):
    """`rescore progress -- COMMAND` under a pseudo-terminal, with a command that writes what Snakemake
    and a check shard would."""
    fake = tmp_path / "fake_snakemake.py"
    fake.write_text(textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(REPO / 'src')!r})
        from rescore.engine.progress import ShardProgress, write_plan
        print({SNAKEMAKE_LOG!r}, flush=True)
        write_plan("results/progress/corpus", "corpus", {{0: {{"submissions": 1, "cases": 4, "weight": 1.0}}}})
        shard = ShardProgress("results/progress/corpus", "corpus", 0, [("relu_triton", 4, 1.0)])
        shard.step("relu_triton", 2)
        shard._write()
        time.sleep(1.5)
        print("5 of 5 steps (100%) done", flush=True)
    """))
    command = [sys.executable, "-m", "rescore.cli", "progress", "--interval", "0.2", "--", sys.executable, str(fake)]
    text = run_in_terminal(command, tmp_path)
    assert "checks: 0/2 shards (1 running), 0/1 submissions, 2/4 cases" in text
    assert "rescore: done in" in text and "Snakemake's output: results/logs/snakemake.out" in text
    assert "Job stats:" not in text  # Snakemake's own output went to its file
    assert "5 of 5 steps (100%) done" in (tmp_path / "results/logs/snakemake.out").read_text()


def run_in_terminal(command: list[str], cwd) -> str:
    """Run `command` with a pseudo-terminal as its stdout and stderr; everything it wrote there."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 200, 0, 0))  # 200 columns
    env = dict(os.environ, PYTHONPATH=str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen(command, cwd=cwd, stdin=subprocess.DEVNULL, stdout=follower, stderr=follower, env=env)
    os.close(follower)
    chunks = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 0.5)
        if ready:
            try:
                data = os.read(leader, 4096)
            except OSError:  # the terminal closed: the command has exited
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    proc.wait(timeout=10)
    os.close(leader)
    return b"".join(chunks).decode(errors="replace")


def test_rescore_check_shows_cases_and_time_left_on_a_terminal_only():
    tty, log = Terminal(), io.StringIO()
    for stream in (tty, log):
        progress = Progress(3, label="relu: ", stream=stream)
        progress.step("relu_triton")
        progress.step("relu_triton")
        progress.close()
    assert "relu: 2/3 cases" in tty.getvalue() and "s left" in tty.getvalue()
    assert log.getvalue() == ""


def test_rescore_check_on_a_terminal_redraws_its_line():
    text = run_in_terminal([sys.executable, "-m", "rescore.cli", "check", str(TOY / "problem_scale.py"),
                            str(TOY / "scale_correct.py"), "--device", "cpu", "--cases", "4", "--dtypes",
                            "float32"], REPO)
    assert "scale_correct: 4/4 cases" in text and "fuzz oracle (4 cases)" in text
