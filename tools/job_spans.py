"""When each job of a Snakemake run started and ended, in minutes from its first job, from the run's
own output (what `snakemake` printed: a GPU step's `snakemake.out`, `scripts/gpu/gpu_lease_steps.sh`).

python tools/job_spans.py SNAKEMAKE_OUT [--rule check_shard]

Prints one line per job (its rule, its wildcards, its start and end; `running` for a job the output
never saw finish, as in a step the device time cut), except the check shards, which get one summary
line (how many, the first start, the last end, the longest), and the minute of the last job's end.
With `--rule`, only that rule's jobs, each on its own line. Snakemake prints a timestamp line
(`[Mon Dec  7 19:26:24 2026]`) before each job's start and each `Finished jobid: N`, to the second.
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
import sys
from dataclasses import dataclass
from pathlib import Path

STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")
RULE = re.compile(r"^(?:local)?(?:rule|checkpoint) (\w+):$")
JOBID = re.compile(r"^\s+jobid: (\d+)$")
WILDCARDS = re.compile(r"^\s+wildcards: (.*)$")
FINISHED = re.compile(r"^Finished jobid: (\d+)")
SHARDS = "check_shard"


@dataclass
class Job:
    rule: str
    start: float
    wildcards: str = ""
    end: float | None = None


def job_spans(text: str) -> list[Job]:
    """Every job the output started, in order, with its start and end in minutes from the first
    timestamp."""
    first = now = None
    jobs: dict[str, Job] = {}
    rule = last = None
    for line in text.splitlines():
        if m := STAMP.match(line):
            now = dt.datetime.strptime(" ".join(m[1].split()), "%a %b %d %H:%M:%S %Y")
            first = first or now
        elif m := RULE.match(line):
            rule = m[1]
        elif (m := JOBID.match(line)) and rule and now is not None:
            last = m[1]
            jobs[last] = Job(rule, _minutes(now, first))
            rule = None
        elif (m := WILDCARDS.match(line)) and last in jobs:
            jobs[last].wildcards = m[1]
        elif (m := FINISHED.match(line)) and m[1] in jobs and now is not None:
            jobs[m[1]].end = _minutes(now, first)
    return list(jobs.values())


def _minutes(at: dt.datetime, first: dt.datetime | None) -> float:
    return round((at - (first or at)).total_seconds() / 60, 2)


def _line(job: Job) -> str:
    end = "running" if job.end is None else f"{job.end:.2f}"
    return f"{job.rule} {job.wildcards}".strip() + f": {job.start:.2f} to {end}"


def report(jobs: list[Job], rule: str | None = None) -> list[str]:
    """The printed lines: every job but the check shards, a summary of those, and the last end."""
    if rule is not None:
        return [_line(j) for j in jobs if j.rule == rule] or [f"no {rule} job in the output"]
    lines = [_line(j) for j in jobs if j.rule != SHARDS]
    shards = [j for j in jobs if j.rule == SHARDS]
    if shards:
        ended = [j for j in shards if j.end is not None]
        longest = max(ended, key=lambda j: j.end - j.start, default=None)
        first = min(j.start for j in shards)
        lines.append(f"{SHARDS}: {len(shards)} jobs, {len(ended)} finished; first start {first:.2f}"
                     + (f", last end {max(j.end for j in ended):.2f}" if ended else "")
                     + (f", longest {longest.end - longest.start:.2f} ({longest.wildcards})" if longest else ""))
    ends = [j.end for j in jobs if j.end is not None]
    running = sum(j.end is None for j in jobs)
    lines.append(f"last end {max(ends):.2f}" if ends else "no job finished")
    if running:
        lines.append(f"{running} jobs never seen to finish")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", type=Path, help="what snakemake printed (a step's snakemake.out)")
    parser.add_argument("--rule", help="only this rule's jobs, each on its own line")
    args = parser.parse_args(argv)
    try:
        text = args.output.read_text(errors="replace")
    except OSError as exc:
        print(f"job_spans.py: cannot read {args.output}: {exc.strerror}; give the snakemake.out of a step",
              file=sys.stderr)
        return 2
    jobs = job_spans(text)
    if not jobs:
        print(f"job_spans.py: {args.output} has no job start Snakemake prints (`rule NAME:` with a `jobid:`, "
              "after a timestamp line); is it what snakemake printed?", file=sys.stderr)
        return 2
    print("\n".join(report(jobs, args.rule)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
