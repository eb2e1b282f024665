"""The worker's request loop: receive requests over the harness's pipe (`protocol.py`), run each on
the executor, answer each with a plain row; and the NaN fill of fresh memory set up before any of it.
"""

from __future__ import annotations

import os
import sys
import time

import torch

from rescore.model.outcomes import Outcome
from rescore.worker import confine, footprint, loading, protocol
from rescore.worker.exceptions import NeedsRestart, harness_failure
from rescore.worker.executor import Executor
from rescore.worker.phases import PhaseTimer


def start_line(began: float, marks: dict[str, float], armed: float) -> str:
    """The worker log's line of where its start went: each step's seconds (`marks`: when each ended,
    in order), then the harness's snapshots (`armed`)."""
    steps, last = [], began
    for name, at in [*marks.items(), ("the harness's snapshots", armed)]:
        steps.append(f"{name} {at - last:.2f} s")
        last = at
    return f"rescore worker {os.getpid()}: ready in {armed - began:.2f} s ({', '.join(steps)})"


def start_runtimes(device: str, marks: dict[str, float]) -> None:
    """Import Triton and, on a GPU, start CUDA's runtime, each a step of the start line in `marks`:
    the executor does both anyway (its versions, its launch watch), and the line then says what each
    cost (a worker under compute-sanitizer spent 5 to 13 s in the steps after torch's import)."""
    try:
        import triton  # noqa: F401

        marks["triton"] = time.perf_counter()
    except ImportError:  # pragma: no cover - triton missing
        pass
    if device == "cuda":
        torch.cuda.init()
        marks["the CUDA runtime"] = time.perf_counter()


def poison_fresh_memory() -> None:
    """Make every fresh allocation NaN (integers: their max), so that output a kernel never wrote is
    caught, and caught the same way on every run (garbage would make replays disagree). Not under
    initcheck (`protocol.UNFILLED_MEMORY_ENV`): the fill writes every allocation, which would leave
    the tool no read of unwritten memory to see."""
    import warnings

    from torch.utils import deterministic

    torch.use_deterministic_algorithms(True, warn_only=True)
    deterministic.fill_uninitialized_memory = os.environ.get(protocol.UNFILLED_MEMORY_ENV) != "1"
    warnings.filterwarnings("ignore", message=".*deterministic.*")


def main_loop(conn, device: str, budget: int, audit: confine.Audit | None = None,
              explain: bool = True, started: tuple[float, dict[str, float]] | None = None) -> None:  # pragma: no cover
    """The worker: receive jobs and cases over `conn`, answer each with a row.

    Requests arrive as (token, message); each answer carries its request's token, so a message that
    the candidate writes into the result channel itself is recognised by the parent as forged.
    `started`: when the worker's main began and when each step of its start ended (its log's line)."""
    os.environ["RESCORE_WORKER"] = "1"
    poison_fresh_memory()
    if started is not None:  # the start line's steps that the executor would otherwise take unseen
        start_runtimes(device, started[1])
    timer = PhaseTimer()  # where each request's time goes: sent with its answer (the phase table)
    executor = Executor(device, budget, phases=timer, explain=explain)
    executor.arm(audit)
    if started is not None:
        print(start_line(*started, time.perf_counter()), file=sys.stderr, flush=True)
    scale = protocol.BENCHMARK  # the sizes the last request ran at (`protocol.scale_of`)
    while True:
        try:
            footprint.wait_for_request(conn, device)
            packet = conn.recv()
        except EOFError:
            return
        token, wire = packet if len(packet) == 2 and isinstance(packet[0], bytes) else (None, packet)
        if wire[0] == protocol.Kind.STOP:
            return
        confine.refresh_cpu_limit()
        status = protocol.Status.OK
        executor.guard.turns.begin(_noting(conn, token))
        try:
            with timer(str(wire[0])):
                msg = protocol.decode(wire)
                scale = footprint.at_scale(device, scale, protocol.scale_of(msg))
                match msg:
                    case protocol.Load(job):
                        footprint.release(device)  # the previous submission's cache is not this one's need
                        result = loading.settle_load(executor.loaded, executor.load(job))
                        if footprint.wanted(device) and executor.loaded.problem is not None:
                            result[protocol.MEMORY_KEY] = footprint.load_estimates(
                                executor.loaded.problem, executor.loaded.schema, executor.budget)
                    case protocol.Fixed(profile, dtype):
                        result = executor.run_fixed(profile, dtype)
                    case protocol.Case(strategy, seed, dtype, override, defer_explain):
                        result = executor.run_case(strategy, seed, dtype, override, defer_explain=defer_explain)
                    case protocol.Explain():
                        result = executor.run_explain()
                    case protocol.Time(dtype, warmup, repeats, budget_s, host_clock, flush_bytes):
                        result = executor.run_timing(dtype, warmup, repeats, budget_s, host_clock, flush_bytes)
        except protocol.UnknownMessage as exc:
            result = {"outcome": Outcome.CRASH, "reason": str(exc)}
        except NeedsRestart as exc:
            status, result = protocol.Status.RESTART, {"outcome": Outcome.CRASH, "reason": str(exc)}
        except BaseException as exc:  # noqa: BLE001 - everything is reported, the loop goes on
            result = harness_failure(exc, executor.candidate_file)
        with timer("police"):  # whatever ran last, the answer is sent by an intact harness
            executor.guard.police(None, after_call=False)
        executor.guard.turns.end()
        if executor.guard.restart:
            status = protocol.Status.RESTART
        result = footprint.report(device, protocol.plain(result))
        footprint.hand_back(device, result.get("outcome") == Outcome.OOM)
        result[protocol.RSS_KEY] = _rss()
        result[protocol.PHASES_KEY] = timer.take()
        conn.send((token, status.value, result) if token is not None else (status.value, result))
        sys.stdout.flush()
        if status == protocol.Status.RESTART:
            return


def _noting(conn, token: bytes | None):
    """What sends a note of whose turn it is (`turns.py`) to the parent, tagged as the request's answer."""
    if token is None:
        return None
    note = protocol.Status.NOTE.value
    return lambda body: conn.send((token, note, body))


def _rss() -> int:
    """Resident memory of this process now, in bytes."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0
