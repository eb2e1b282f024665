"""Progress of a pipeline run on the terminal, and nothing in logs.

Snakemake runs each check shard in a process of its own, and what those processes print lands in
Snakemake's output. So a shard prints nothing: it keeps a small JSON file up to date instead
(`results/progress/<dump>/shard-<k>.json`), and writes its dump's plan beside it (`plan.json`: every
shard's submissions, cases and expected seconds, known to each shard from the manifest). `rescore
progress` reads those files and Snakemake's log and prints one line: the stage, the check shards,
submissions and cases done of the total, the slowest shard and the time left. `make all` runs
Snakemake under `rescore progress -- COMMAND`, which on a terminal sends Snakemake's own output to
`results/logs/snakemake.out` and redraws that line; with output going anywhere else it runs the
command as it is and adds nothing.

Time left is measured, not assumed: the check stage's weight done so far (each submission weighs its
expected seconds from `shard_costs.json`, since one kernel can cost 50 times another under the
interpreter, and a submission in hand counts by its cases done) over the time the checks have run.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

PROGRESS_DIR = Path("results") / "progress"
SNAKEMAKE_OUT = Path("results") / "logs" / "snakemake.out"
WRITE_EVERY_S = 1.0  # a shard rewrites its file at most this often between submissions


def write_json(path: Path, doc: dict) -> None:
    """Write `doc` so that a reader never sees half a file (a temporary file, then a rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path)


def write_plan(folder: str | Path, dump: str, shards: dict[int, dict]) -> None:
    """The dump's check plan: per shard, {submissions, cases, weight}. Every shard writes the same."""
    write_json(Path(folder) / "plan.json", {"dump": dump, "shards": {str(k): v for k, v in shards.items()}})


class ShardProgress:
    """One check shard's progress, kept in `folder/shard-<k>.json` (see the module's docstring).

    `submissions` lists the shard's (name, planned cases, weight) in run order. `step` is called per
    case (what `runner.run_submission` calls), `submission_done` after a submission and everything
    done for it (its shrinking), `close` at the end."""

    def __init__(self, folder: str | Path, dump: str, shard: int, submissions: list[tuple[str, int, float]],
                 clock=time.time):
        self.path = Path(folder) / f"shard-{shard}.json"
        self.clock = clock
        self.names = [name for name, _, _ in submissions]
        self.cases_of = {name: cases for name, cases, _ in submissions}
        self.weight_of = {name: weight for name, _, weight in submissions}
        self.doc = {
            "dump": dump,
            "shard": shard,
            "pid": os.getpid(),
            "started": clock(),
            "updated": clock(),
            "finished": False,
            "submissions": len(submissions),
            "submissions_done": 0,
            "cases": sum(cases for _, cases, _ in submissions),
            "cases_done": 0,
            "weight": sum(weight for _, _, weight in submissions),
            "weight_done": 0.0,
            "current": self.names[0] if self.names else "",
        }
        self.whole_done = 0.0  # weight of the submissions finished
        self.current_cases = 0  # cases done of the submission in hand
        self.written = 0.0
        self._write()

    def step(self, name: str, n: int = 1) -> None:
        if name != self.doc["current"]:
            self.doc["current"], self.current_cases = name, 0
        self.current_cases += n
        self.doc["cases_done"] += n
        if self.clock() - self.written >= WRITE_EVERY_S:
            self._write()

    def submission_done(self, name: str) -> None:
        self.whole_done += self.weight_of.get(name, 0.0)
        self.doc["submissions_done"] += 1
        self.current_cases = 0
        following = self.doc["submissions_done"]
        self.doc["current"] = self.names[following] if following < len(self.names) else ""
        self._write()

    def close(self) -> None:
        self.doc["finished"] = True
        self.doc["current"] = ""
        self._write()

    def _write(self) -> None:
        name = self.doc["current"]
        part = 0.0
        if name and self.cases_of.get(name):
            part = self.weight_of.get(name, 0.0) * min(1.0, self.current_cases / self.cases_of[name])
        self.doc["weight_done"] = self.whole_done + part
        self.doc["updated"] = self.written = self.clock()
        write_json(self.path, self.doc)


@dataclass
class SnakemakeState:
    """What Snakemake's log says: steps done of the total, the rules running, how many check shards."""

    steps_done: int = 0
    steps_total: int = 0
    running: dict[str, str] = field(default_factory=dict)  # jobid -> rule
    check_shards: int | None = None  # from the job stats (the shards this run has to run)
    failed: bool = False
    complete: bool = False


_RULE = re.compile(r"^(?:local)?(?:rule|checkpoint) (\w+):$")
_JOBID = re.compile(r"^\s+jobid: (\d+)$")
_WILDCARDS = re.compile(r"^\s+wildcards: (.*)$")
_FINISHED = re.compile(r"^Finished job(?:id:)? (\d+)")
_STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")  # before each job's start and end
_STEPS = re.compile(r"^(\d+) of (\d+) steps \(.*\) done$")
_STATS = re.compile(r"^check_shard\s+(\d+)$")


def parse_snakemake_log(text: str) -> SnakemakeState:
    """The state of a run from Snakemake's output (its log file or what it printed)."""
    state = SnakemakeState()
    rule = None
    for line in text.splitlines():
        if m := _RULE.match(line):
            rule = m.group(1)
        elif (m := _JOBID.match(line)) and rule:
            state.running[m.group(1)] = rule
            rule = None
        elif m := _FINISHED.match(line):
            state.running.pop(m.group(1), None)
        elif m := _STEPS.match(line):
            state.steps_done, state.steps_total = int(m.group(1)), int(m.group(2))
        elif (m := _STATS.match(line)) and state.check_shards is None:
            state.check_shards = int(m.group(1))
        elif line.startswith("Error in rule") or line.startswith("Exiting because a job execution failed"):
            state.failed = True
        elif line.startswith("Nothing to be done") or (
            state.steps_total and state.steps_done == state.steps_total
        ):
            state.complete = True
    return state


@dataclass
class JobSpan:
    """One job as Snakemake printed it: its rule and wildcards, and its start and end in seconds from
    the output's first timestamp (to the second; `end_s` None: never seen to finish)."""

    rule: str
    start_s: float
    wildcards: str = ""
    end_s: float | None = None


def job_spans(text: str) -> list[JobSpan]:
    """Every job Snakemake's output (its log file or what it printed) started, in order, with its start
    and end (bench/pipeline_bench.py's stage times, tools/job_spans.py)."""
    import datetime as dt

    first = now = None
    jobs: dict[str, JobSpan] = {}
    rule = last = None
    for line in text.splitlines():
        if m := _STAMP.match(line):
            now = dt.datetime.strptime(" ".join(m.group(1).split()), "%a %b %d %H:%M:%S %Y")
            first = first or now
        elif m := _RULE.match(line):
            rule = m.group(1)
        elif (m := _JOBID.match(line)) and rule and now is not None:
            last = m.group(1)
            jobs[last] = JobSpan(rule, (now - first).total_seconds())
            rule = None
        elif (m := _WILDCARDS.match(line)) and last in jobs:
            jobs[last].wildcards = m.group(1)
        elif (m := _FINISHED.match(line)) and m.group(1) in jobs and now is not None:
            jobs[m.group(1)].end_s = (now - first).total_seconds()
    return list(jobs.values())


@dataclass
class Snapshot:
    """The progress files of one run: each dump's plan and each shard's state."""

    plans: dict[str, dict]
    shards: list[dict]


def read_progress(folder: str | Path = PROGRESS_DIR, since: float = 0.0) -> Snapshot:
    """Plans and shard files under `folder` written at or after `since` (older ones are another run's)."""
    plans: dict[str, dict] = {}
    shards: list[dict] = []
    for path in sorted(Path(folder).glob("*/*.json")):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # being replaced right now: the next look sees it
        if path.name == "plan.json":
            if path.stat().st_mtime >= since:
                plans[str(doc.get("dump", path.parent.name))] = doc
        elif doc.get("updated", 0.0) >= since:
            shards.append(doc)
    return Snapshot(plans, shards)


def _duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    return f"{seconds // 60}:{seconds % 60:02d}"


def _left(seconds: float) -> str:
    return f"~{max(1, round(seconds / 60))} min left" if seconds >= 90 else f"~{max(1, int(seconds))} s left"


def status_line(snap: Snapshot, sm: SnakemakeState, now: float, started: float) -> str:
    """One line: elapsed, stage, check counts, the slowest shard, time left, Snakemake's step."""
    parts = [f"rescore {_duration(now - started)}"]
    planned = [s for plan in snap.plans.values() for s in plan.get("shards", {}).values()]
    shards_total = sm.check_shards if sm.check_shards is not None else len(planned)
    finished = [s for s in snap.shards if s.get("finished")]
    running = [s for s in snap.shards if not s.get("finished")]
    checking = bool(snap.shards) and len(finished) < max(shards_total, 1)
    if checking:
        subs_total = sum(int(s.get("submissions", 0)) for s in planned)
        cases_total = sum(int(s.get("cases", 0)) for s in planned)
        subs_done = sum(int(s.get("submissions_done", 0)) for s in snap.shards)
        cases_done = sum(int(s.get("cases_done", 0)) for s in snap.shards)
        parts.append(f"checks: {len(finished)}/{shards_total} shards ({len(running)} running), "
                     f"{subs_done}/{subs_total} submissions, {cases_done:,}/{cases_total:,} cases")
        left, slowest = _time_left(snap, planned, running, now)
        if slowest:
            parts.append(slowest)
        if left is not None:
            parts.append(_left(left))
    else:
        if snap.shards:
            cases = sum(int(s.get("cases_done", 0)) for s in snap.shards)
            parts.append(f"checks done ({len(finished)} shards, {cases:,} cases)")
        rules = sorted(set(sm.running.values()))
        if rules:
            shown = ", ".join(rules[:3]) + (f" +{len(rules) - 3}" if len(rules) > 3 else "")
            parts.append(f"running {shown}")
    if sm.steps_total:
        parts.append(f"step {sm.steps_done}/{sm.steps_total}")
    return " | ".join(parts)


def _time_left(snap: Snapshot, planned: list[dict], running: list[dict], now: float) -> tuple[float | None, str]:
    """Seconds left in the checks and a note on the slowest running shard (see the module docstring)."""
    total = sum(float(s.get("weight", 0.0)) for s in planned)
    done = sum(float(s.get("weight_done", 0.0)) for s in snap.shards)
    begun = min(float(s.get("started", now)) for s in snap.shards)
    left = None
    if done > 0 and now > begun:
        left = (total - done) / (done / (now - begun))
    note, worst = "", -1.0
    for s in running:
        weight, part = float(s.get("weight", 0.0)), float(s.get("weight_done", 0.0))
        ran = now - float(s.get("started", now))
        own = (weight - part) / (part / ran) if part > 0 and ran > 0 else None
        key = own if own is not None else 0.0
        if key > worst:
            worst = key
            share = f"{100 * part / weight:.0f}%" if weight else "?"
            doing = f", {s['current']}" if s.get("current") else ""
            note = f"slowest: {s.get('dump')} shard {s.get('shard')} at {share}{doing}"
            if own is not None and left is not None:
                left = max(left, own)  # the stage ends with its last shard
    return left, note


def newest_snakemake_log(directory: str | Path = ".") -> Path | None:
    logs = sorted(Path(directory, ".snakemake", "log").glob("*.snakemake.log"), key=lambda p: p.stat().st_mtime)
    return logs[-1] if logs else None


def show(directory: str | Path = ".", stream: IO[str] = sys.stdout) -> int:
    """Print the progress of the latest Snakemake run in `directory` once (from another terminal)."""
    log = newest_snakemake_log(directory)
    if log is None:
        print(f"rescore progress: no Snakemake log under {Path(directory, '.snakemake', 'log')}: "
              "start the run first (make all, or snakemake all)", file=stream)
        return 1
    started = log.stat().st_ctime
    match = re.match(r"(\d{4}-\d\d-\d\dT\d{6})", log.name)
    if match:
        started = time.mktime(time.strptime(match.group(1), "%Y-%m-%dT%H%M%S"))
    sm = parse_snakemake_log(log.read_text(errors="replace"))
    snap = read_progress(Path(directory) / PROGRESS_DIR, since=started)
    print(status_line(snap, sm, time.time(), started), file=stream)
    return 0


def interactive(stream: IO[str]) -> bool:
    """Progress is drawn only when both stdout and `stream` are a terminal: never into a log."""
    return sys.stdout.isatty() and stream.isatty()


def run_with_progress(command: list[str], directory: str | Path = ".", stream: IO[str] = sys.stderr,
                      interval: float = 2.0, tty: bool | None = None) -> int:
    """Run `command` (Snakemake) and return its exit code; on a terminal, with a progress line.

    On a terminal its output goes to `results/logs/snakemake.out` (the last lines are printed if it
    fails). Anywhere else it runs as it is, its output where it would go, and nothing is added."""
    try:
        if not (interactive(stream) if tty is None else tty):
            return subprocess.call(command, cwd=directory)
        return _run_drawn(command, Path(directory), stream, interval)
    except FileNotFoundError as exc:
        print(f"rescore progress: cannot run {command[0]!r}: {exc.strerror}; is the environment set up "
              "(make venv)?", file=stream)
        return 127


def _run_drawn(command: list[str], directory: Path, stream: IO[str], interval: float) -> int:
    """`run_with_progress` on a terminal."""
    out_path = directory / SNAKEMAKE_OUT
    out_path.parent.mkdir(parents=True, exist_ok=True)
    progress = directory / PROGRESS_DIR
    started = time.time()  # progress files older than this are another run's
    print(f"rescore: running {' '.join(command)}\n  Snakemake's output: {out_path}", file=stream, flush=True)
    width = 0
    with open(out_path, "wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=directory)
        while True:
            try:
                rc = proc.wait(timeout=interval)
                break
            except subprocess.TimeoutExpired:
                pass
            except KeyboardInterrupt:  # a Ctrl-C reaches Snakemake too: let it stop its jobs
                try:
                    rc = proc.wait(timeout=10)
                except subprocess.TimeoutExpired:  # the interrupt was this process's alone
                    proc.send_signal(signal.SIGINT)
                    rc = proc.wait()
                break
            width = _draw(stream, _line(out_path, progress, started), width)
    line = _line(out_path, progress, started)
    _draw(stream, line, width)
    stream.write("\n")
    if rc != 0:
        tail = out_path.read_text(errors="replace").splitlines()[-40:]
        stream.write("\n".join(tail) + f"\nrescore: the run failed (exit code {rc}); Snakemake's whole output is in "
                     f"{out_path}\n")
    else:
        stream.write(f"rescore: done in {_duration(time.time() - started)}; tables in results/tables, figures in "
                     "results/figures, the papers' tables in results/papers\n")
    stream.flush()
    return rc


def _line(out_path: Path, progress: Path, started: float) -> str:
    sm = parse_snakemake_log(out_path.read_text(errors="replace"))
    return status_line(read_progress(progress, since=started), sm, time.time(), started)


def _draw(stream: IO[str], line: str, previous: int) -> int:
    """Redraw the progress line in place, cut to the terminal's width."""
    try:
        columns = os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError, AttributeError):
        columns = 0
    line = line[: columns - 1 if columns > 20 else 160]  # a terminal that reports no size: 160
    stream.write("\r" + line + " " * max(0, previous - len(line)))
    stream.flush()
    return len(line)
