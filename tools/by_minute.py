"""How many submissions had their verdicts by each minute of a pipeline step, from its check shards' logs.

python tools/by_minute.py STEP_FOLDER [--step ext] [--marks 10 14 20 24]

STEP_FOLDER is what a GPU lease's step leaves (`scripts/gpu/gpu_lease_steps.sh`): `driver.log`, whose
`HH:MM:SS <step> start` line is minute 0, and `<step>/results/logs/check/*/shard-*.log`, where each
submission's `NAME: N cases` line is written when its cases are. Prints the count at each mark, the
total and the minute of the last one: a run cut short (the device time spent) is compared with
another at the same minutes. The times are the device's clock in both files.
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
from pathlib import Path

from rescore.stages import SHARD_LOG_LINE


def _clock(text: str) -> dt.datetime:
    return dt.datetime.strptime(text, "%H:%M:%S")


def minutes_done(folder: Path, step: str) -> list[float]:
    """The minute of the step at which each submission's cases were written, in order."""
    start = re.search(rf"^(\d\d:\d\d:\d\d) {re.escape(step)} start$", (folder / "driver.log").read_text(), re.M)
    if start is None:
        raise SystemExit(f"{folder / 'driver.log'}: no `{step} start` line; is --step right?")
    began = _clock(start.group(1))
    done = []
    for log in sorted((folder / step / "results" / "logs" / "check").glob("*/shard-*.log")):
        for line in log.read_text(errors="replace").splitlines():
            if (m := SHARD_LOG_LINE.match(line)) and m["name"]:
                seconds = (_clock(m["at"][11:19]) - began).total_seconds()
                done.append((seconds + 86400 if seconds < 0 else seconds) / 60)  # past midnight
    return sorted(done)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--step", default="ext")
    parser.add_argument("--marks", type=float, nargs="+", default=[10, 14, 20, 24])
    args = parser.parse_args()
    done = minutes_done(args.folder, args.step)
    for mark in args.marks:
        print(f"by minute {mark:g}: {sum(t <= mark for t in done)}")
    print(f"in all: {len(done)}" + (f", the last at minute {done[-1]:.1f}" if done else ""))


if __name__ == "__main__":
    main()
