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
import sys
from pathlib import Path

from rescore.engine.progress import JobSpan, job_spans

SHARDS = "check_shard"


def _minutes(seconds: float) -> float:
    return seconds / 60


def _line(job: JobSpan) -> str:
    end = "running" if job.end_s is None else f"{_minutes(job.end_s):.2f}"
    return f"{job.rule} {job.wildcards}".strip() + f": {_minutes(job.start_s):.2f} to {end}"


def report(jobs: list[JobSpan], rule: str | None = None) -> list[str]:
    """The printed lines: every job but the check shards, a summary of those, and the last end."""
    if rule is not None:
        return [_line(j) for j in jobs if j.rule == rule] or [f"no {rule} job in the output"]
    lines = [_line(j) for j in jobs if j.rule != SHARDS]
    shards = [j for j in jobs if j.rule == SHARDS]
    if shards:
        ended = [j for j in shards if j.end_s is not None]
        longest = max(ended, key=lambda j: j.end_s - j.start_s, default=None)
        first = _minutes(min(j.start_s for j in shards))
        lines.append(f"{SHARDS}: {len(shards)} jobs, {len(ended)} finished; first start {first:.2f}"
                     + (f", last end {_minutes(max(j.end_s for j in ended)):.2f}" if ended else "")
                     + (f", longest {_minutes(longest.end_s - longest.start_s):.2f} ({longest.wildcards})"
                        if longest else ""))
    ends = [j.end_s for j in jobs if j.end_s is not None]
    running = sum(j.end_s is None for j in jobs)
    lines.append(f"last end {_minutes(max(ends)):.2f}" if ends else "no job finished")
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
