"""What the harness's own faults did to a run (issue 28, item 3), from its results folder:

python tools/harness_faults.py RESULTS [--dump cudal1]

Prints, per dump: the submissions without a fixed verdict and why; the cases that ended for want of
memory (`out of memory with the GPU to itself`, and any left as `crash` by an older run's forms:
OutOfMemoryError, CUDA "out of memory", CUBLAS_STATUS_ALLOC_FAILED, cuDNN's handle failures); the
cases the sandbox refused (`refused by the sandbox: ...`), by what was refused; and from the check
shards' logs how many requests ran again for memory (with every worker's cache handed back, once the
device reported room for them, or with the device to themselves, as a worker killed by a SIGKILL the
harness did not send is too), how they ended, how long the waits for room took and how long the
retries alone stopped the device, how long workers waited for memory, and how many of those waits
found the others holding more than the ledger's capacity (granted past its wait limit: a ledger over
capacity), how the waits ended (those at their limit by size, whether the device's last report of
free memory had room for them, and how many of their requests then ran out of memory all the same)
and how many reservations the device's measured free memory granted; and how the timeouts at a
call's own limit beside other workers ended when tried again with a longer limit
(`sandbox.confirms_timeout`): an answer then was the device's other work, not a hang.
A run on one GPU with many shards checks the sharing with it.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from rescore.engine.sandbox import ALONE, CONFIRM_LINE, HANDED_BACK, NO_ROOM, NOT_ALONE, RETRY_LINE, ROOM
from rescore.model.oom import OOM_MARKERS
from rescore.model.outcomes import REFUSED_PREFIX, Outcome, harness_fault
from rescore.runtime.device_share import BACKFILL
from rescore.stages import SHARD_LOG_LINE

WAITED = re.compile(r"waited ([\d.]+) s for ([\d.]+) (\w+) of")
GAVE_UP = re.compile(r"after ([\d.]+) s: the running requests went on")
# how a reservation was granted, in its line (`sharing.DeviceShare.reserve`; older runs' lines do not say)
ON_FREE = "on the device's measured free memory"
HOW = re.compile(r"granted (?:.* after [\d.]+ s )?"
                 rf"(at its wait limit|as the reservations fit|within what it held|{ON_FREE})")
# a grant at its limit: the device's last report of free memory then, and what the request grew by
# (and, since CREEP, what that report had to leave: lent against it, kept for a retry's room)
REPORTED = re.compile(r"at its wait limit \(the device's last report: ([\d.]+) (\w+) free [\d.]+ s before, "
                      r"([\d.]+) (\w+) more asked(?:; ([\d.]+) (\w+) lent against it, ([\d.]+) (\w+) kept for a "
                      r"retry's room)?\)")
# what the other reservations held at a wait, as its line says (capacity, their bytes)
OTHERS = re.compile(r"\(capacity ([\d.]+) (\w+); the others hold ([\d.]+) (\w+) in")
PEAK = re.compile(r"reference peak on \S+: traced ([\d.]+) (\w+), measured ([\d.]+) (\w+)")
UNITS = {"bytes": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


@dataclass
class LimitWait:
    """A wait for memory that ended at its limit: larger than BACKFILL of the capacity or not, its
    seconds, whether the device's last report had room for its growth (None: the line does not say),
    and whether its worker's next line of note was a retry for memory (its request ran out all the same)."""

    large: bool
    seconds: float
    room: bool | None
    ran_out: bool = False
    room_beside: bool | None = None  # room beside what the report had to leave (None: the line does not say)


def _bytes(number: str, unit: str) -> float:
    return float(number) * UNITS.get(unit, 1)


def memory_crash(reason: str) -> bool:
    text = reason.lower()
    return any(m in text for m in OOM_MARKERS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", type=Path)
    parser.add_argument("--dump", help="only this dump")
    args = parser.parse_args()
    tables = args.results / "tables"
    if (tables / "cases.parquet").is_file() and (tables / "submissions.parquet").is_file():
        cases = pd.read_parquet(tables / "cases.parquet")
        subs = pd.read_parquet(tables / "submissions.parquet")[["submission_id", "dump"]]
        cases = cases.merge(subs, on="submission_id", how="left")
    else:  # a run cut short: its shard logs still say how the device was shared
        print(f"{tables}: no cases or submissions table (a run cut short?); `python tools/partial_tables.py "
              f"{args.results}` makes the tables of the shards that finished. The check shards' logs only:")
        cases = pd.DataFrame(columns=["dump"])
    for dump, group in cases.groupby("dump"):
        if args.dump and dump != args.dump:
            continue
        reason = group["reason"].fillna("").astype(str)
        fixed = group[group["oracle"] == "fixed"]
        no_verdict = fixed[fixed["outcome"] == Outcome.SKIPPED]
        print(f"## {dump}: {group['submission_id'].nunique()} submissions, {len(group)} cases")
        print(f"no fixed verdict: {len(no_verdict)}")
        for why, n in Counter(r[:120] for r in no_verdict["reason"].fillna("")).most_common(10):
            print(f"  {n:4d}  {why}")
        alone = group[(group["outcome"] == Outcome.SKIPPED) & reason.str.startswith("out of memory with")]
        crashed = group[(group["outcome"] == Outcome.CRASH) & reason.map(memory_crash)]
        print(f"skipped, out of memory alone: {len(alone)} cases of {alone['submission_id'].nunique()} submissions")
        print(f"crash on an out-of-memory form: {len(crashed)} cases of {crashed['submission_id'].nunique()} "
              "submissions (0 expected)")
        faults = group[list(map(harness_fault, group["outcome"], group["reason"]))]
        print(f"rescore's own code raised (harness faults): {len(faults)} cases of "
              f"{faults['submission_id'].nunique()} submissions (0 expected)")
        for text, n in Counter(faults["reason"].str[:120]).most_common(5):
            print(f"  {n:4d}  {text}")
        refused = group[(group["outcome"] == Outcome.SKIPPED) & reason.str.startswith(REFUSED_PREFIX)]
        print(f"refused by the sandbox: {len(refused)} cases of {refused['submission_id'].nunique()} submissions")
        what = refused["reason"].str.removeprefix(REFUSED_PREFIX).str.split(" \\(at ").str[0]
        for text, n in Counter(what.str[:100]).most_common(10):
            print(f"  {n:4d}  {text}")
    logs = sorted((args.results / "logs" / "check").glob(f"{args.dump or '*'}/shard-*.log"))
    ended: Counter = Counter()  # (how, outcome) of each retry
    alone_s, alone_waits = [], []  # a retry alone's seconds, and those waiting for the running requests
    room_waits: list[float] = []  # a retry once the device had room: the seconds it waited for that
    no_room = 0  # waits for room that ended without it (the request then ran alone)
    gave_up: list[float] = []  # tries alone that gave up waiting for the running requests, their seconds
    waits: list[float] = []
    granted: Counter = Counter()  # how each wait over a second ended (`HOW`)
    free_grants = 0  # reservations granted on the device's measured free memory (`Ledger.note_free`)
    over, told = 0, 0  # waits while the others held more than the capacity; waits whose line says
    ratios: list[float] = []  # traced / measured reference peak, per submission
    confirmed: Counter = Counter()  # how the timeouts tried again with a longer limit ended
    at_limit: list[LimitWait] = []
    for log in logs:
        after_limit = None  # the wait at its limit whose request has not been seen to end yet
        for line in log.read_text(errors="replace").splitlines():
            retry = RETRY_LINE.search(line)
            if after_limit is not None and (retry or WAITED.search(line) or HOW.search(line)
                                            or SHARD_LOG_LINE.match(line)):
                after_limit.ran_out = retry is not None  # the worker's next line of note
                after_limit = None
            if m := retry:
                ended[(m.group(1), m.group(4))] += 1
                if m.group(1) == ALONE and m.group(5):
                    alone_s.append(float(m.group(5)))
                    alone_waits.append(float(m.group(6) or 0))
                if m.group(1) == ROOM and m.group(6):
                    room_waits.append(float(m.group(6)))
            elif NO_ROOM in line:
                no_room += 1
            elif NOT_ALONE in line and (m := GAVE_UP.search(line)):
                gave_up.append(float(m.group(1)))
            elif m := CONFIRM_LINE.search(line):
                confirmed[m.group(3)] += 1
            elif m := WAITED.search(line):
                waits.append(float(m.group(1)))
                how = HOW.search(line)
                granted[how.group(1) if how else "(not said)"] += 1
                free_grants += bool(how) and how.group(1) == ON_FREE
                if o := OTHERS.search(line):
                    told += 1
                    over += _bytes(o.group(3), o.group(4)) > _bytes(o.group(1), o.group(2))
                if how and how.group(1) == "at its wait limit" and o:
                    large = _bytes(m.group(2), m.group(3)) > BACKFILL * _bytes(o.group(1), o.group(2))
                    r = REPORTED.search(line)  # None in a run older than that part of the line
                    room = None if r is None else _bytes(r.group(1), r.group(2)) >= _bytes(r.group(3), r.group(4))
                    beside = None if r is None or r.group(5) is None else (
                        _bytes(r.group(1), r.group(2)) - _bytes(r.group(5), r.group(6)) - _bytes(r.group(7), r.group(8))
                        >= _bytes(r.group(3), r.group(4)))
                    after_limit = LimitWait(large, float(m.group(1)), room, room_beside=beside)
                    at_limit.append(after_limit)
            elif (how := HOW.search(line)) and how.group(1) == ON_FREE:
                free_grants += 1  # within a second
            elif (m := PEAK.search(line)) and float(m.group(3)):
                ratios.append(_bytes(m.group(1), m.group(2)) / _bytes(m.group(3), m.group(4)))
    print(f"## check shard logs ({len(logs)})")
    for how in (HANDED_BACK, ROOM, ALONE):
        outcomes = {outcome: n for (way, outcome), n in ended.items() if way == how}
        print(f"requests retried {how}: {sum(outcomes.values())}, ending {outcomes}")
    if alone_s:
        print(f"the retries alone took {sum(alone_s):.0f} s, {sum(alone_waits):.0f} s of it waiting for the running "
              f"requests (every other worker of the device stopped meanwhile), longest {max(alone_s):.0f} s")
    if gave_up:
        print(f"tries alone that gave up waiting for the running requests (new ones let in again): {len(gave_up)}, "
              f"{sum(gave_up):.0f} s in all")
    if room_waits or no_room:
        print(f"waits for room before a retry alone: {len(room_waits)} found it in {sum(room_waits):.0f} s "
              f"(longest {max(room_waits, default=0):.0f} s), {no_room} did not")
    if waits:
        print(f"waits for memory over 1 s: {len(waits)}, {sum(waits):.0f} s in all, longest {max(waits):.0f} s; "
              + (f"{over} of {told} with the others holding more than the capacity" if told
                 else "the lines do not say what the others held (a run older than that part of the log line)"))
        print(f"  granted: {dict(granted)}")
        for large in (True, False):
            these = [w for w in at_limit if w.large == large]
            if these:
                print(f"  at their wait limit, {'larger' if large else 'no larger'} than BACKFILL of the capacity: "
                      f"{len(these)}, {sum(w.seconds for w in these):.0f} s; then out of memory (the worker's next "
                      f"line a retry): {sum(w.ran_out for w in these)}")
                told_room = [w for w in these if w.room is not None]
                if told_room:
                    roomy = [w for w in told_room if w.room]
                    print(f"    the device's last report then had room for the growth: {len(roomy)} of "
                          f"{len(told_room)} (then out of memory: {sum(w.ran_out for w in roomy)}); had not: "
                          f"{len(told_room) - len(roomy)} (then out of memory: "
                          f"{sum(w.ran_out for w in told_room if not w.room)})")
                told_beside = [w for w in these if w.room_beside is not None]
                if told_beside:
                    print(f"    and beside what it had to leave (lent against it, kept for a retry's room): "
                          f"{sum(bool(w.room_beside) for w in told_beside)} of {len(told_beside)}")
    print(f"reservations granted on the device's measured free memory: {free_grants}")
    if confirmed:
        print(f"timeouts at a call's limit beside other workers, tried again with a longer limit: "
              f"{sum(confirmed.values())}, ending {dict(confirmed)}")
    if ratios:
        ratios.sort()
        print(f"traced / measured reference peak, {len(ratios)} submissions: median {ratios[len(ratios) // 2]:.2f}, "
              f"lowest {ratios[0]:.2f}, highest {ratios[-1]:.2f}")


if __name__ == "__main__":
    main()
