"""Sharing one device between workers (runtime/device_share.py, engine/sharing.py), plain Python: the
lock's retry alone comes first and waits for the running requests; the ledger grants memory in
order (a small request that fits now excepted), drops the entries of dead processes, never lets a
stream of requests starve an earlier big one past its limit, and grants what a fresh report of the
device's free memory has room for; the reservation follows the reference's peak and what was seen
at the request's scale; every form an out-of-memory error took on the H100 run is recognised as one
(model/oom.py)."""

from __future__ import annotations

import logging
import re
import subprocess
import threading
import time
from pathlib import Path

import pytest

from rescore.engine import sharing
from rescore.engine.sharing import CONTEXT_BYTES, FACTOR, USABLE, DeviceShare, alone_result
from rescore.model.oom import in_use_bytes, is_oom, requested_bytes, size_text
from rescore.model.outcomes import Outcome
from rescore.runtime.device_share import MAX_WAIT_ENV, DeviceLock, Ledger, retry_waiting
from rescore.worker.protocol import ALONE_KEY, BENCHMARK, FUZZ, Case, Explain, Fixed, Load, Time, scale_of


def test_a_retry_alone_waits_for_running_requests_and_goes_before_new_ones(tmp_path):
    running, retry, late = (DeviceLock(tmp_path, "gpu-0") for _ in range(3))
    order: list[str] = []
    started = threading.Event()

    def run_request() -> None:
        with running.shared():
            started.set()
            time.sleep(0.6)
            order.append("running request ends")

    def retry_alone() -> None:
        with retry.exclusive():
            order.append("retry alone")
            time.sleep(0.3)

    def later_request() -> None:
        with late.shared():
            order.append("later request")

    threads = [threading.Thread(target=run_request)]
    threads[0].start()
    started.wait(5)
    threads.append(threading.Thread(target=retry_alone))
    threads[1].start()
    time.sleep(0.2)  # the retry is waiting now
    assert retry_waiting(str(running.paths["waiting"]))  # what a worker reads to hand its cache back
    threads.append(threading.Thread(target=later_request))
    threads[2].start()
    for t in threads:
        t.join(10)
    assert order == ["running request ends", "retry alone", "later request"]
    assert not retry_waiting(str(running.paths["waiting"]))


def test_a_retry_alone_with_a_limit_gives_up_on_a_long_request_and_lets_new_ones_in(tmp_path):
    """A retry alone holds new requests back only for its limit: a request running past it goes on,
    the retry holds nothing for its block, and a new request gets in at once; without the limit it
    waits for the running request to end."""
    running, retry, late = (DeviceLock(tmp_path, "gpu-0") for _ in range(3))
    started, done = threading.Event(), threading.Event()

    def run_request() -> None:
        with running.shared():
            started.set()
            done.wait(10)

    holder = threading.Thread(target=run_request)
    holder.start()
    started.wait(5)
    began = time.monotonic()
    with retry.exclusive(0.3) as held:
        assert not held and retry.held is None
    assert 0.3 <= time.monotonic() - began < 2.0
    assert not retry_waiting(str(running.paths["waiting"]))  # the workers keep their caches again
    with late.shared():  # the running request still runs: a new one is let in beside it
        assert not done.is_set()
    done.set()
    holder.join(10)
    with retry.exclusive(0.3) as held:  # nothing running: alone at once
        assert held and retry.held == "exclusive"


def test_the_ledger_grants_in_order_and_a_release_lets_the_next_in(tmp_path):
    ledger = Ledger(tmp_path, "gpu-0", poll_s=0.01)
    assert ledger.reserve("a", 60, 100).waited_s < 0.5
    granted: list[str] = []

    def reserve(owner: str, nbytes: int) -> None:
        Ledger(tmp_path, "gpu-0", poll_s=0.01).reserve(owner, nbytes, 100)
        granted.append(owner)

    b = threading.Thread(target=reserve, args=("b", 50))
    b.start()
    time.sleep(0.3)
    # c would fit beside a (60 + 30), but not beside b's earlier request as well: it waits its turn
    c = threading.Thread(target=reserve, args=("c", 30))
    c.start()
    time.sleep(0.3)
    assert granted == []
    ledger.release("a")
    b.join(5)
    c.join(5)
    assert sorted(granted) == ["b", "c"]  # both fit now: c may go first, since it delays b no longer
    assert {k: e["held"] for k, e in ledger.entries().items()} == {"b": 50, "c": 30}


def test_a_small_request_that_fits_now_goes_ahead_of_a_big_one_waiting(tmp_path):
    """Backfill: a request of at most BACKFILL of the capacity that fits beside what is held does not
    queue behind an earlier big one (which waits for its room or its limit either way); a larger one
    still does."""
    from rescore.runtime.device_share import BACKFILL

    ledger = Ledger(tmp_path, "gpu-0", poll_s=0.01)
    ledger.reserve("a", 60, 100)
    waiting = threading.Thread(target=lambda: Ledger(tmp_path, "gpu-0", poll_s=0.01, max_wait_s=2).reserve(
        "big", 50, 100))
    waiting.start()
    time.sleep(0.3)
    assert ledger.entries()["big"]["want"] == 50
    assert Ledger(tmp_path, "gpu-0", poll_s=0.01).reserve("small", int(BACKFILL * 100), 100).waited_s < 0.2
    assert Ledger(tmp_path, "gpu-0", poll_s=0.01, max_wait_s=0.3).reserve("medium", 25, 100).waited_s >= 0.3
    waiting.join(5)


def test_entries_of_processes_that_are_gone_are_dropped(tmp_path):
    gone = subprocess.Popen(["sleep", "30"])
    Ledger(tmp_path, "gpu-0").reserve("a", 90, 100)  # this process
    ledger = Ledger(tmp_path, "gpu-0", poll_s=0.01)
    # an entry of another process, as its shard left it
    ledger._edit(lambda state: state["entries"].update(
        {"dead-shard": {"pid": gone.pid, "start": None, "held": 90, "want": None, "order": 0}}))
    assert "dead-shard" in ledger.entries()
    gone.kill()
    gone.wait()
    assert "dead-shard" not in ledger.entries()


def test_a_killed_holder_left_a_zombie_holds_nothing(tmp_path):
    """A worker killed after its shard was gone stays a zombie where nothing reaps it (so on the H100,
    2026-12-05): its pid and start time remain, but it holds no memory. Its 55 GB entry, kept as
    alive, held every later worker of the machine up."""
    zombie = subprocess.Popen(["true"])
    deadline = time.monotonic() + 10
    while Path(f"/proc/{zombie.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
        assert time.monotonic() < deadline, "the child never became a zombie"
        time.sleep(0.05)
    ledger = Ledger(tmp_path, "gpu-0", poll_s=0.01)
    ledger._edit(lambda state: state["entries"].update(
        {"zombie": {"pid": zombie.pid, "start": None, "held": 90, "want": None, "order": 0}}))
    assert "zombie" not in ledger.entries()
    zombie.wait()


def test_a_reservation_waits_at_most_its_limit_then_goes_ahead(tmp_path):
    """The ledger spaces out what its estimates say will not fit; past its limit a request goes ahead
    (one that then runs out of memory is retried alone), so no estimate holds the run up."""
    ledger = Ledger(tmp_path, "gpu-0", poll_s=0.01)
    ledger.reserve("big", 90, 100)
    grant = Ledger(tmp_path, "gpu-0", poll_s=0.01, max_wait_s=0.3).reserve("late", 50, 100)
    assert 0.3 <= grant.waited_s < 3 and grant.by == "limit"
    assert grant.free_bytes is None  # no report of the device's free memory yet
    assert ledger.entries()["late"]["held"] == 50
    ledger.note_free(20)
    reported = Ledger(tmp_path, "gpu-0", poll_s=0.01, max_wait_s=0.3).reserve("later", 40, 100)
    assert reported.by == "limit" and reported.free_bytes == 20 and 0.3 <= reported.age_s < 3


def test_on_a_full_device_a_small_request_waits_in_proportion_to_its_size(tmp_path):
    """A ledger granted past its capacity holds every request that grows; a small one goes ahead after
    its share of the limit (a worker's 1 GiB on an H100: 3.4 s of the minute), a quarter of the
    capacity or more waits the whole limit."""
    from rescore.runtime.device_share import FULL_WAIT_SHARE, wait_limit

    assert wait_limit(60.0, 1 << 30, int(71.26 * (1 << 30))) == pytest.approx(3.37, abs=0.01)
    assert wait_limit(60.0, int(FULL_WAIT_SHARE * 100), 100) == wait_limit(60.0, 90, 100) == 60.0
    Ledger(tmp_path, "gpu-0", poll_s=0.01).reserve("forced", 110, 100)  # alone, then it grew past the device
    small = Ledger(tmp_path, "gpu-0", poll_s=0.01, max_wait_s=2.0).reserve("small", 5, 100).waited_s
    assert 0.4 <= small < 1.5
    big = Ledger(tmp_path, "gpu-0", poll_s=0.01, max_wait_s=2.0).reserve("big", 30, 100).waited_s
    assert big >= 2.0
    assert {k: e["held"] for k, e in Ledger(tmp_path, "gpu-0").entries().items()} == {
        "forced": 110, "small": 5, "big": 30}


def test_a_long_wait_is_logged_with_what_the_others_held(tmp_path, monkeypatch, caplog):
    """A wait for memory names what the other reservations held then: how much, how many, the largest,
    how many waited too (a ledger over its capacity, granted past the limit, shows as such)."""
    monkeypatch.setenv(MAX_WAIT_ENV, "1.5")
    monkeypatch.setattr(sharing, "WAIT_NOTE_S", 0.1)
    Ledger(tmp_path, "host", poll_s=0.01).reserve("big", 80 << 20, 100 << 20)
    Ledger(tmp_path, "host", poll_s=0.01).reserve("small", 15 << 20, 100 << 20)
    share = DeviceShare("cpu", capacity=100 << 20, folder=tmp_path)
    share.ledger.poll_s = 0.01
    share.reference_bytes = 10 << 20  # it needs the context and 3 x 10 MiB: more than the device, so it waits for all
    with caplog.at_level(logging.INFO, logger="rescore"):
        share.reserve()
    share.close()
    line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("waited"))
    assert "the others hold 95.00 MiB in 2 reservations, the largest 80.00 MiB; 0 waiting" in line, line
    assert Ledger(tmp_path, "host").others("small") == (80 << 20, 1, 80 << 20, 0)


def test_a_grant_at_its_limit_says_what_the_device_last_reported_free_and_the_growth(tmp_path, monkeypatch,
                                                                                      caplog):
    """A wait that ends at its limit names the device's last report of its free memory, how much
    more the request asked than its worker held, and what a grant on that report had to leave beside
    it (lent against it, kept for another's retry): whether the device had room all along, and why
    it was not granted on it (`tools/harness_faults.py` counts these)."""
    monkeypatch.setenv(MAX_WAIT_ENV, "0.5")
    monkeypatch.setattr(sharing, "WAIT_NOTE_S", 0.1)
    big = Ledger(tmp_path, "host", poll_s=0.01)
    big.reserve("big", 95 << 20, 100 << 20)
    big._edit(lambda state: state["entries"]["big"].update(room=20 << 20))  # as `await_room` keeps it
    share = DeviceShare("cpu", capacity=100 << 20, folder=tmp_path)
    share.ledger.poll_s = 0.01
    share.ledger.note_free(40 << 20)
    share.reference_bytes = 10 << 20  # the context and 3 x 10 MiB, past what the ledger has left
    with caplog.at_level(logging.INFO, logger="rescore"):
        share.reserve()
    share.close()
    line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("waited"))
    grown = size_text(CONTEXT_BYTES + 3 * (10 << 20))  # its worker held nothing before
    assert re.search(r"granted at its wait limit \(the device's last report: 40\.00 MiB free [\d.]+ s before, "
                     + re.escape(grown) + r" more asked; 0 bytes lent against it, 20\.00 MiB kept for a retry's "
                     r"room\)$", line), line


def test_a_fresh_report_of_free_memory_grants_what_the_reservations_would_hold(tmp_path):
    """On a ledger granted past its capacity, a small request (at most BACKFILL of the capacity) that
    the device's measured free memory has room for (beside FREE_MARGIN of the capacity) goes ahead at
    once; the next one counts what was so granted against the same report and waits its limit, and a
    larger one waits its limit whatever the report says."""
    Ledger(tmp_path, "gpu-0", poll_s=0.01).reserve("forced", 1760, 1600)
    ledger = Ledger(tmp_path, "gpu-0", poll_s=0.01, max_wait_s=0.5)
    unreported = ledger.reserve("unreported", 100, 1600)
    assert unreported.waited_s >= 0.05 and unreported.by == "limit"
    ledger.note_free(290)
    b = ledger.reserve("b", 100, 1600)
    assert b.waited_s < 0.2 and (b.by, b.free_bytes) == ("free", 290)
    c = ledger.reserve("c", 100, 1600)
    assert c.by == "limit"  # 290 - 100 - 100 < 100
    ledger.note_free(1500)
    d = ledger.reserve("d", 101, 1600)
    assert d.by == "limit"  # more than BACKFILL: the report is a moment, and the running requests grow
    assert {k: e["held"] for k, e in ledger.entries().items()} == {"forced": 1760, "unreported": 100, "b": 100,
                                                                  "c": 100, "d": 101}


def test_on_measured_memory_a_reservation_that_grows_counts_only_its_growth(tmp_path):
    """A worker already holds its reservation (its allocator keeps its last request's memory, which
    the device's report leaves out): when its next request asks a little more, only that growth must
    fit the measured free memory, and only the growth is lent against the next reports. A worker
    whose reservation was granted on the same report counted in full waits its limit."""
    capacity = 16000  # BACKFILL and FREE_MARGIN: 1000
    ledger = Ledger(tmp_path, "gpu-0", poll_s=0.01, max_wait_s=0.5)
    ledger.reserve("forced", 17000, capacity)  # the ledger over its capacity
    ledger.reserve("worker", 3000, capacity)  # granted at its limit: it holds 3000 now
    ledger.note_free(1500)
    grown = ledger.reserve("worker", 3400, capacity)
    assert grown.by == "free" and grown.waited_s < 0.2  # 1500 - 1000 >= 400
    assert ledger._edit(lambda state: state["lent"][-1][1]) == 400
    fresh = ledger.reserve("fresh", 400, capacity)  # a new holder's 400 is all growth: 1500 - 400 - 1000 < 400
    assert fresh.by == "limit"


def test_only_a_fresh_report_with_room_beside_the_margin_grants_a_small_request():
    from rescore.runtime.device_share import BACKFILL, FREE_MARGIN, FRESH_S, LENT_S, free_allows

    capacity = 16000  # BACKFILL and FREE_MARGIN: 1000 each
    state = {"free": {"bytes": 2050, "at": 100.0}, "lent": [[90.0, 400], [100.5, 100]]}
    room = 2050 - 100 - FREE_MARGIN * capacity  # the grant of 90.0 is older than LENT_S before the report
    assert free_allows(state, int(room), capacity, 100.0 + FRESH_S).by == "free"
    assert free_allows(state, int(room) + 1, capacity, 100.0) is None
    assert free_allows(state, 10, capacity, 100.0 + FRESH_S + 0.01) is None  # stale
    assert free_allows({}, 10, capacity, 100.0) is None
    assert free_allows(dict(state, lent=[[100.0 - LENT_S, 400]]), int(room), capacity, 100.0) is None
    plenty = {"free": {"bytes": capacity, "at": 100.0}}
    assert free_allows(plenty, int(BACKFILL * capacity), capacity, 100.0).by == "free"
    assert free_allows(plenty, int(BACKFILL * capacity) + 1, capacity, 100.0) is None  # not a small request


def test_a_wait_for_room_takes_only_a_report_made_since_with_room_and_lends_what_it_took(tmp_path):
    """A request still out of memory with the caches handed back waits for a report of the device's
    free memory made after it began to wait, with room for it beside FREE_MARGIN of the capacity and
    beside what was lent on such reports; what it takes is lent in turn, so a grant on the next
    report does not take it too. No report with room within the limit: None."""
    capacity = 16000  # FREE_MARGIN: 1000
    other = Ledger(tmp_path, "gpu-0", poll_s=0.01)
    other.reserve("other", 4000, capacity)  # a live holder whose requests run meanwhile
    other.note_free(9000)  # before the wait: a moment already gone
    reports = iter([2500, 2500, 3500])  # the others' requests end, one after another

    def sleep(seconds: float) -> None:
        time.sleep(seconds)
        other.note_free(next(reports, 3500))

    ledger = Ledger(tmp_path, "gpu-0", poll_s=0.01, sleep=sleep)
    grant = ledger.await_room("me", 2000, capacity, limit_s=5.0)
    assert grant is not None and (grant.by, grant.free_bytes) == ("room", 3500) and grant.waited_s < 1.0
    assert ledger._edit(lambda state: state["lent"][-1][1]) == 2000
    again = Ledger(tmp_path, "gpu-0", poll_s=0.01, sleep=sleep)
    assert again.await_room("next", 2000, capacity, limit_s=0.2) is None  # 3500 - 2000 lent - 1000 < 2000


def test_while_a_retry_waits_for_room_no_grant_on_free_memory_takes_it(tmp_path):
    """The room a retry waits for is kept from the small grants on measured free memory (which would
    otherwise take it as it appears, one request after another); given up, it is theirs again."""
    from rescore.runtime.device_share import free_allows

    capacity = 16000  # FREE_MARGIN and BACKFILL: 1000
    waiter = Ledger(tmp_path, "gpu-0", poll_s=0.01)
    waiter.reserve("other", 4000, capacity)
    waiter.note_free(3000)  # no room for 3000 beside the margin, but 1000 for a small grant
    room = waiter.await_room("retry", 3000, capacity, limit_s=0.2)
    assert room is None
    state = waiter._edit(lambda state: state)
    assert free_allows(state, 1000, capacity, state["free"]["at"]).by == "free"  # given up: no longer kept

    seen = []

    def sleep(seconds: float) -> None:  # while it waits: a small request asks on the same report
        seen.append(free_allows(waiter._edit(lambda state: state), 1000, capacity, time.time()))
        waiter.note_free(3000)

    Ledger(tmp_path, "gpu-0", poll_s=0.01, sleep=sleep).await_room("retry", 3000, capacity, limit_s=0.1)
    assert seen and all(grant is None for grant in seen)


def test_a_creeping_growth_is_granted_beside_a_retrys_wait_for_room_a_larger_one_is_not(tmp_path):
    """A growth no larger than CREEP of the capacity (a worker's peaks creeping up from case to case)
    is granted on a fresh report beside the room a retry waits for, leaving FREE_MARGIN, and is lent
    against that report; one past CREEP still leaves the retry its room."""
    from rescore.runtime.device_share import CREEP, FREE_MARGIN, free_allows

    capacity = 16000  # FREE_MARGIN and BACKFILL 1000, CREEP 250
    creep = int(CREEP * capacity)
    waiter = Ledger(tmp_path, "gpu-0", poll_s=0.01)
    waiter.reserve("other", 4000, capacity)
    seen = []

    def sleep(seconds: float) -> None:  # while the retry waits for 3000 on reports of 3000 free
        state = waiter._edit(lambda state: state)
        seen.append((free_allows(state, creep, capacity, time.time()),
                     free_allows(state, creep + 1, capacity, time.time())))
        waiter.note_free(3000)

    waiter.note_free(3000)
    Ledger(tmp_path, "gpu-0", poll_s=0.01, sleep=sleep).await_room("retry", 3000, capacity, limit_s=0.1)
    assert seen and all(small is not None and small.by == "free" and larger is None for small, larger in seen)
    assert 3000 - FREE_MARGIN * capacity >= creep  # what made the creeping one fit: the report less the margin


def test_a_wait_for_room_ends_at_once_when_no_other_holder_could_free_any(tmp_path):
    """Alone in the ledger, nothing running will free memory: the retry goes alone without waiting
    (on a device of its own that costs no one anything)."""
    ledger = Ledger(tmp_path, "gpu-0", poll_s=0.01)
    ledger.reserve("me", 4000, 16000)
    began = time.monotonic()
    assert ledger.await_room("me", 2000, 16000, limit_s=5.0) is None
    assert time.monotonic() - began < 1.0


def test_a_workers_report_of_free_memory_reaches_the_ledger_and_grants_with_a_log_line(tmp_path, caplog):
    """The parent writes the free memory a worker's answer reports into the ledger (at most every
    NOTE_FREE_S); a reservation granted on it says so in the shard's log."""
    Ledger(tmp_path, "host", poll_s=0.01).reserve("forced", 17 << 30, 16 << 30)  # the ledger over its capacity
    share = DeviceShare("cpu", capacity=16 << 30, folder=tmp_path)
    share.ledger.poll_s, share.ledger.max_wait_s = 0.01, 2.0
    share.observe({"free": 4 << 30})
    share.observe({"free": 1 << 20})  # within NOTE_FREE_S of the first: not written
    assert share.ledger._edit(lambda state: state["free"]["bytes"]) == 4 << 30
    share.reference_bytes = 64 << 20  # it needs the context and 3 x 64 MiB: 960 MiB, under 1/16 of 16 GiB
    with caplog.at_level(logging.INFO, logger="rescore"):
        assert share.reserve() < 0.5
    share.close()
    line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("granted"))
    assert line.startswith("granted 960.00 MiB of host's memory after 0.0 s on the device's measured free memory "
                           "(4.00 GiB free"), line


def test_a_request_larger_than_the_device_runs_when_nothing_else_is_held(tmp_path):
    ledger = Ledger(tmp_path, "gpu-0", poll_s=0.01)
    assert ledger.reserve("huge", 500, 100).waited_s < 0.5
    assert ledger.entries()["huge"]["held"] == 500


def test_the_reservation_follows_the_reference_peak_then_what_the_worker_held(tmp_path):
    share = DeviceShare("cuda", gpu="3", folder=tmp_path)
    assert share.key == "gpu-3" and share.capacity is None
    share.begin()
    share.observe({"estimate": 1 << 30, "total": 80 << 30})  # the load: the traced peak, the device's size
    assert share.capacity == int(USABLE * (80 << 30))
    assert share.needed() == CONTEXT_BYTES + FACTOR * (1 << 30)
    share.observe({"reference_peak": 2 << 30, "peak": 1 << 30})  # the fixed check measured more
    assert share.needed() == CONTEXT_BYTES + FACTOR * (2 << 30)
    share.observe({"estimate": 5 << 30, "peak": 9 << 30})  # a re-load's trace no longer counts
    assert share.needed() == CONTEXT_BYTES + (9 << 30)  # what its tensors took, when that is more
    share.reserve()
    assert Ledger(tmp_path, "gpu-3").entries()[share.owner]["held"] == share.needed()
    share.begin()
    share.observe({"estimate": 1 << 20})
    share.reserve()  # the next submission needs less: the reservation shrinks without waiting
    assert Ledger(tmp_path, "gpu-3").entries()[share.owner]["held"] == CONTEXT_BYTES + FACTOR * (1 << 20)
    share.close()
    assert share.owner not in Ledger(tmp_path, "gpu-3").entries()


def test_what_a_kernel_held_at_the_benchmarks_sizes_is_not_reserved_for_its_smaller_fuzz_cases(tmp_path):
    """The H200 run: a kernel held 86 GiB in the fixed check and kept 87 GiB reserved through fuzz
    cases 64 times smaller, every other shard waiting behind it. A request reserves what was seen at
    its own scale: the benchmark's sizes (the fixed check, timing, `benchmark_shape`, a trigger's
    inputs) or the fuzz oracle's drawn sizes; an explanation runs at its case's."""
    assert [scale_of(m) for m in (Load({}), Fixed("kernelbench-v0.1"), Time("float32", 1, 1, 1.0))] == [
        BENCHMARK] * 3
    drawn, at_benchmark = Case("default", 1, "float32"), Case("benchmark_shape", 2, "float32")
    assert scale_of(drawn) == FUZZ and scale_of(at_benchmark) == BENCHMARK
    assert scale_of(Case("default", 3, "float32", override={"sizes": {"N": 8}})) == BENCHMARK
    assert scale_of(Explain()) == ""
    share = DeviceShare("cuda", gpu="0", folder=tmp_path)
    share.begin()
    share.observe({"estimate": 1 << 30, "total": 80 << 30})
    share.at(scale_of(Fixed("kernelbench-v0.1")))
    share.observe({"reference_peak": 1 << 30, "peak": 40 << 30})  # the candidate held 40 GiB there
    for msg, need in [(drawn, FACTOR * (1 << 30)), (Explain(), FACTOR * (1 << 30)), (at_benchmark, 40 << 30),
                      (Explain(), 40 << 30), (drawn, FACTOR * (1 << 30))]:
        share.at(scale_of(msg))
        assert share.needed() == CONTEXT_BYTES + need, msg
    share.observe({"peak": 5 << 30})  # a drawn case that held more than the estimate raises its scale's
    assert share.needed(FUZZ) == CONTEXT_BYTES + (5 << 30) and share.needed(BENCHMARK) == CONTEXT_BYTES + (40 << 30)
    share.begin()  # the next submission starts from nothing at either scale
    assert share.needed(BENCHMARK) == share.needed(FUZZ) == CONTEXT_BYTES and share.scale == BENCHMARK
    share.close()


def test_a_fuzz_case_of_a_problem_past_the_budget_reserves_by_the_reference_at_the_budget(tmp_path):
    """On an H100 (1f56f3b) a 3-D convolution whose reference peaked at 8.5 GiB at the benchmark's
    sizes kept 26 GiB reserved through all its fuzz cases (inputs of at most 2^20 elements), while
    other workers' requests waited behind a ledger over its capacity. A fuzz case of a problem whose
    benchmark is past the budget reserves by the reference's trace at the budget (`fuzz_estimate`),
    raised as the fixed check's measure raised the benchmark's trace; what a case held still counts."""
    share = DeviceShare("cuda", gpu="0", folder=tmp_path)
    share.begin()
    share.observe({"estimate": 8 << 30, "fuzz_estimate": 1 << 30, "total": 80 << 30})
    assert share.needed(BENCHMARK) == CONTEXT_BYTES + FACTOR * (8 << 30)
    assert share.needed(FUZZ) == CONTEXT_BYTES + FACTOR * (1 << 30)
    share.observe({"reference_peak": 10 << 30, "peak": 20 << 30})  # the fixed check: 1.25x the trace
    assert share.needed(FUZZ) == CONTEXT_BYTES + FACTOR * (5 << 28)
    share.at(FUZZ)
    share.observe({"peak": 6 << 30})
    assert share.needed(FUZZ) == CONTEXT_BYTES + (6 << 30)
    share.begin()  # the next submission's benchmark is within the budget: no trace at the budget
    share.observe({"estimate": 1 << 30, "total": 80 << 30})
    assert share.needed(FUZZ) == share.needed(BENCHMARK) == CONTEXT_BYTES + FACTOR * (1 << 30)
    share.close()


def test_a_worker_tells_its_share_each_requests_scale_before_it_reserves(tmp_path, monkeypatch):
    from conftest import toy_submission

    from rescore.engine.runner import RunConfig, run_submission
    from rescore.engine.sandbox import Worker

    monkeypatch.setenv("RESCORE_DEVICE_SHARE", str(tmp_path))
    cfg = RunConfig(strategies={"default": 1, "benchmark_shape": 1}, dtypes=("float32",), timeout_s=30)
    sub = toy_submission("problem_scale.py", "torch_correct.py", dtypes=("float32",))
    worker = Worker("cpu", 1 << 15)
    scales: list[str] = []
    at = worker.share.at
    monkeypatch.setattr(worker.share, "at", lambda scale: (scales.append(scale), at(scale)))
    try:
        rows = run_submission(sub, cfg, worker)
    finally:
        worker.stop()
    by_strategy = {r["strategy"]: r for r in rows}
    assert set(by_strategy) == {"fixed", "default", "benchmark_shape"}
    assert scales[0] == BENCHMARK and sorted(s for s in scales[1:] if s) == [BENCHMARK, FUZZ]  # "": an explanation


def test_a_worker_idle_between_requests_hands_its_cache_back_before_a_retry_alone_starts(tmp_path, monkeypatch):
    """On an H100 workers waiting for their next request kept 24 and 31 GiB through other workers'
    retries alone, which ran out of memory "with the GPU to itself": an idle worker looks for a waiting
    retry while it waits, and the retry starts only after it had the time to hand its cache back."""
    import multiprocessing

    from rescore.runtime.device_share import WAITING_ENV
    from rescore.worker import footprint

    lock = DeviceLock(tmp_path, "gpu-0", settle_s=0.5)
    monkeypatch.setenv(WAITING_ENV, str(lock.paths["waiting"]))
    released: list[float] = []
    monkeypatch.setattr(footprint, "release", lambda device: released.append(time.monotonic()))
    reader, writer = multiprocessing.Pipe(duplex=False)
    began: list[tuple[float, int]] = []

    def retry_alone() -> None:
        time.sleep(0.3)  # the worker is waiting for a request by now
        with lock.exclusive():
            began.append((time.monotonic(), len(released)))
        writer.send("next request")

    retry = threading.Thread(target=retry_alone)
    retry.start()
    footprint.wait_for_request(reader, "cuda")  # returns once the request is there
    retry.join(5)
    assert reader.recv() == "next request"
    assert len(released) == 1 and began[0][1] == 1 and released[0] < began[0][0]  # handed back once, before it
    writer.send("another")
    footprint.wait_for_request(reader, "cuda")  # no retry waiting: the cache is kept
    footprint.wait_for_request(reader, "cpu")  # nothing cached on the CPU: no look at all
    assert len(released) == 1


def test_a_worker_hands_its_cache_back_when_its_requests_drop_to_the_fuzz_sizes(monkeypatch):
    """The parent's reservation drops from the benchmark's sizes to the drawn ones (`DeviceShare.at`),
    so the worker's cache from its fixed check must not stay behind it."""
    from rescore.worker import footprint

    released: list[str] = []
    monkeypatch.setattr(footprint, "release", released.append)
    drawn, at_benchmark = Case("default", 1, "float32"), Case("benchmark_shape", 1, "float32")
    scale = BENCHMARK
    seen = []
    for msg in (Fixed("kernelbench-v0.1"), drawn, drawn, Explain(), at_benchmark, Explain(), drawn):
        scale = footprint.at_scale("cuda", scale, scale_of(msg))
        seen.append((scale, len(released)))
    assert seen == [(BENCHMARK, 0), (FUZZ, 1), (FUZZ, 1), (FUZZ, 1), (BENCHMARK, 1), (BENCHMARK, 1), (FUZZ, 2)]


def test_the_measured_reference_peak_is_the_references_own_not_what_the_process_held(monkeypatch):
    """The fixed check's peak counts the reference's inputs, weights and what the allocator took
    during its call, never the candidate's model or outputs already held (the reservation multiplies it)."""
    from rescore.worker import footprint

    held = {"now": 10 << 30, "peak": 10 << 30}  # 10 GiB held before the call: the candidate's, not the reference's
    monkeypatch.setattr(footprint.torch.cuda, "memory_allocated", lambda: held["now"])
    monkeypatch.setattr(footprint.torch.cuda, "max_memory_allocated", lambda: held["peak"])
    monkeypatch.setattr(footprint.torch.cuda, "reset_peak_memory_stats", lambda: held.update(peak=held["now"]))
    monkeypatch.setattr(footprint, "_cuda_bytes", footprint.input_bytes)  # these CPU tensors stand for the device's
    model, x = footprint.torch.nn.Linear(256, 256), footprint.torch.ones(64, 256)
    own = footprint.input_bytes([x, *model.parameters()])
    peak = footprint.ReferencePeak("cuda")
    with peak.around(model, (x,)):
        held["peak"] += 3 << 20  # its intermediates and output
    assert peak.peak == own + (3 << 20)
    with peak.around(model, (x,)):
        held["peak"] += 1 << 20  # a smaller call keeps the larger peak
    assert peak.peak == own + (3 << 20)
    cpu = footprint.ReferencePeak("cpu")
    with cpu.around(model, (x,)):
        pass
    assert cpu.peak == 0


def test_a_result_that_still_ran_out_alone_is_skipped_with_the_bytes():
    row = {"outcome": Outcome.OOM, "reason": "out of memory in the candidate: OutOfMemoryError: ...",
           ALONE_KEY: {"by": "the candidate", "bytes": int(1.65 * 2**30), "reference_ran": True}}
    out = alone_result(dict(row), "cuda")
    assert out["outcome"] == Outcome.SKIPPED and ALONE_KEY not in out
    assert out["reason"].startswith("out of memory with the GPU to itself: the candidate asked for 1.65 GiB")
    assert out["findings"] == "oom_where_reference_fits"
    harness = alone_result({"outcome": Outcome.OOM, "reason": "cuBLAS", ALONE_KEY: {"by": "the harness"}}, "cuda")
    assert "an amount the message does not name" in harness["reason"] and not harness.get("findings")
    passed = alone_result({"outcome": Outcome.PASS, ALONE_KEY: {"by": "the candidate"}}, "cuda")
    assert passed == {"outcome": Outcome.PASS}


class AcceleratorError(RuntimeError):
    """Stands for torch's AcceleratorError (torch 2.11), which the H100 run raised."""


class OutOfMemoryError(RuntimeError):
    """Stands for torch.OutOfMemoryError by name, as a module without torch sees it."""


def _wrapped() -> BaseException:
    try:
        try:
            raise OutOfMemoryError("CUDA out of memory. Tried to allocate 256.00 MiB.")
        except OutOfMemoryError as inner:
            raise RuntimeError("the reference failed") from inner
    except RuntimeError as outer:
        return outer


@pytest.mark.parametrize("exc, asked", [
    (OutOfMemoryError("CUDA out of memory. Tried to allocate 1.65 GiB. GPU 0 has a total capacity of 79.18 GiB"),
     int(1.65 * 2**30)),
    (AcceleratorError("CUDA error: out of memory\nSearch for `cudaErrorMemoryAllocation'"), None),
    (AcceleratorError("CUDA error: CUDA-capable device(s) is/are busy or unavailable\nSearch for "
                      "`cudaErrorDevicesUnavailable'"), None),
    (RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"), None),
    (RuntimeError("CUDA error: CUBLAS_STATUS_NOT_INITIALIZED when calling `cublasCreate(handle)`"), None),
    (RuntimeError("cuDNN error: CUDNN_STATUS_NOT_INITIALIZED"), None),
    (RuntimeError("cuDNN error: CUDNN_STATUS_ALLOC_FAILED"), None),
    (MemoryError(), None),
    (RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 17592186044416 bytes."), 1 << 44),
    (ValueError("Unable to allocate 1.00 GiB for an array with shape (268435456,)"), 1 << 30),
    (_wrapped(), None),
])
def test_every_form_of_out_of_memory_is_recognised(exc, asked):
    assert is_oom(exc)
    assert requested_bytes(str(exc)) == asked


def test_the_room_a_retry_waits_for_is_what_torchs_message_says_it_held_and_asked(tmp_path):
    """torch's CUDA message says what the process held when the allocation failed and what it asked:
    the room a retry waits for is those beside the worker's context, not its reservation (a
    pessimistic estimate: 38.75 GiB for a request that asked 8 GiB on an H100); without them, the
    reservation's, and at least the allocation asked."""
    text = ("CUDA out of memory. Tried to allocate 8.00 GiB. GPU 0 has a total capacity of 79.18 GiB of which "
            "289.94 MiB is free. Including non-PyTorch memory, this process has 3.25 GiB memory in use. Of the "
            "allocated memory 2.10 GiB is allocated by PyTorch, and 100.00 MiB is reserved by PyTorch but unallocated.")
    assert (requested_bytes(text), in_use_bytes(text)) == (8 << 30, int(3.25 * 2**30))
    assert in_use_bytes("CUDA error: out of memory") is None
    share = DeviceShare("cpu", capacity=64 << 30, folder=tmp_path)
    share.reference_bytes = 12 << 30  # reserves 36.75 GiB
    assert share.room_needed(8 << 30, int(3.25 * 2**30)) == int(3.25 * 2**30) - CONTEXT_BYTES + (8 << 30)
    assert share.room_needed(8 << 30, None) == share.room_needed(None, None) == FACTOR * (12 << 30)
    share.reference_bytes = 1 << 30
    assert share.room_needed(8 << 30, None) == 8 << 30
    share.close()


@pytest.mark.parametrize("exc", [
    RuntimeError("CUDA error: an illegal memory access was encountered"),
    RuntimeError("out of resource: shared memory, Required: 262144, Hardware limit: 232448"),
    RuntimeError("cuDNN error: CUDNN_STATUS_BAD_PARAM"),
    ValueError("expected a tensor of 4 dimensions"),
])
def test_other_failures_are_not_out_of_memory(exc):
    assert not is_oom(exc)


def test_a_request_waiting_for_a_retry_alone_has_its_whole_time_after_the_wait(tmp_path, monkeypatch):
    """A request that waits for another worker's retry alone (the device lock) starts its per-case
    timeout and its call limits once it holds the lock: the wait is nobody's turn, and the phase
    table shows it as `device_wait`. (It is the submission's budget's: a 30 s budget here.)"""
    from conftest import toy_submission

    from rescore.engine.phase_log import DEVICE_WAIT, PhaseLog
    from rescore.engine.runner import RunConfig, run_submission
    from rescore.engine.sandbox import Worker

    monkeypatch.setenv("RESCORE_DEVICE_SHARE", str(tmp_path))
    cfg = RunConfig(strategies={"default": 3}, dtypes=("float32",), timeout_s=2, submission_budget_s=30)
    sub = toy_submission("problem_scale.py", "torch_correct.py", dtypes=("float32",))
    worker = Worker("cpu", 1 << 15)
    other = DeviceLock(tmp_path, worker.share.key)
    holding, release = threading.Event(), threading.Event()

    def retry_alone() -> None:
        with other.exclusive():
            holding.set()
            release.wait(10)

    try:
        run_submission(sub, cfg, worker)  # the worker is up: its next load is quick
        holder = threading.Thread(target=retry_alone)
        holder.start()
        holding.wait(5)
        threading.Timer(3.0, release.set).start()  # longer than the 2 s per-case timeout
        worker.phases = spent = PhaseLog()
        rows = run_submission(sub, cfg, worker)
        holder.join(10)
    finally:
        release.set()
        worker.stop()
    assert [r["outcome"] for r in rows] == [Outcome.PASS] * 4, [r.get("reason") for r in rows]
    assert spent.seconds[DEVICE_WAIT] >= 2.5
