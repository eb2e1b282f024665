"""Whose turn it is inside a request: the harness's (references, inputs, judging), the candidate's
(its calls), or a compiler's (Triton's JIT, torch.compile). The worker tells its parent each change
with a note on the result channel, before the answer: `(token, "note", {"by": ..., "reference_s": ...})`.

The parent (`engine/sandbox.py`) limits a candidate's turn to what the reference's own time at those
sizes allows (`engine/pacing.py`: `call_limit`), so that a hang costs seconds, not the whole
per-case timeout; the harness's and a compiler's turns have only the per-case timeout. Past it, a
candidate's turn is the candidate's `timeout`; the harness's is a limit of this machine, never the
kernel's. A note can only shorten a request's time (the per-case timeout stays the ceiling), so a
candidate that forges one gains nothing.
"""

from __future__ import annotations

from collections.abc import Callable

from rescore.worker.protocol import CANDIDATE, COMPILER, HARNESS


class Turns:
    """The current request's turns, and the reference time the candidate's turn is limited by."""

    def __init__(self) -> None:
        self.send: Callable[[dict], None] | None = None
        self.reference_s: float | None = None  # the float64 reference's own time at the case's sizes
        self.compiles = 0  # compiles in progress (an autotuner's benchmark holds the kernels' compiles)
        self._sent: tuple[str, float | None] = (HARNESS, None)

    def begin(self, send: Callable[[dict], None] | None) -> None:
        """A new request: the harness's turn, no reference time yet (`send` delivers a note)."""
        self.send, self.reference_s, self.compiles = send, None, 0
        self._sent = (HARNESS, None)

    def end(self) -> None:
        self.send = None

    def candidate(self) -> None:
        """The candidate's code runs from now on."""
        self._turn(CANDIDATE)

    def harness(self) -> None:
        """The harness's own work runs from now on (a reference run: its time is not the candidate's)."""
        self._turn(HARNESS)

    def measured(self, seconds: float) -> None:
        """The reference's own time at the sizes the candidate is called at next."""
        self.reference_s = seconds

    def compiling(self) -> None:
        self.compiles += 1
        self._turn(COMPILER)

    def compiled(self) -> None:
        """Back to the candidate once no compile is in progress (a compile happens inside its call),
        its time counted afresh."""
        self.compiles = max(0, self.compiles - 1)
        if not self.compiles:
            self._turn(CANDIDATE)

    def _turn(self, by: str) -> None:
        note = (by, self.reference_s if by == CANDIDATE else None)
        if note == self._sent or self.send is None:
            return
        self._sent = note
        self.send({"by": by, "reference_s": note[1]})


def watch_triton(turns: Turns) -> None:
    """Note Triton's JIT compiles and its autotuner's benchmarks (on a GPU: the interpreter compiles
    nothing) as the compiler's turn, through its hooks around a compile, chained to any hook already
    set, and around `Autotuner._bench`. Installed before the harness's snapshot."""
    try:
        from triton import knobs
        from triton.runtime import autotuner
    except Exception:  # noqa: BLE001 - no Triton, or one without knobs: compiles count as the candidate's
        return
    bench = getattr(autotuner.Autotuner, "_bench", None)
    if bench is not None:

        def benchmarking(self, *args, **kwargs):
            turns.compiling()
            try:
                return bench(self, *args, **kwargs)
            finally:
                turns.compiled()

        autotuner.Autotuner._bench = benchmarking
    runtime = knobs.runtime
    before, after = runtime.jit_cache_hook, runtime.jit_post_compile_hook

    def compiling(*args, **kwargs):
        turns.compiling()
        return before(*args, **kwargs) if before is not None else None

    def compiled(*args, **kwargs):
        turns.compiled()
        return after(*args, **kwargs) if after is not None else None

    runtime.jit_cache_hook, runtime.jit_post_compile_hook = compiling, compiled


def watch_dynamo(turns: Turns) -> bool:
    """Note torch.compile's compiles as the compiler's turn, once torch._dynamo has been imported (by
    a candidate: importing it costs seconds, so the worker never does). True once registered."""
    import sys

    callback = getattr(sys.modules.get("torch._dynamo.callback"), "callback_handler", None)
    if callback is None:
        return False
    callback.register_start_callback(lambda args: turns.compiling())
    callback.register_end_callback(lambda args: turns.compiled())
    return True
