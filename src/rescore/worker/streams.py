"""The output as the caller's stream sees it.

A user of a kernel reads its output on the stream they called it from, with no device-wide
synchronize in between. A kernel that writes its output on a side stream the caller's stream never
waits for (an exit race) is then read before it is written. The harness synchronizes the whole
device after each call (for timing, and before reading on the host), which lets such work finish
first and hides the missing wait; so the output is judged through a copy made on the caller's stream
the moment the call returns (`call_seen`): before that synchronize, and before the guard's own
checks of the call, whose host time (a millisecond or more on a loaded machine) is time enough for
a side stream to finish writing.

Under the Triton interpreter there is one stream and everything runs in order: no copy is made.
The fixed-shape check does not use this: it reproduces the benchmark's own check, which
synchronizes the device before comparing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from rescore.oracle.reference import flatten

if TYPE_CHECKING:
    from rescore.worker.guard import Guard
    from rescore.worker.usage import OpRecorder


def caller_stream(device: str):
    """The stream the harness calls candidate code from (None off a GPU: nothing to order)."""
    return torch.cuda.current_stream() if device == "cuda" else None


def as_seen_from(stream, out):
    """`out` as a reader on `stream` sees it now: a copy of each output tensor enqueued on that stream
    (so work of another stream that `stream` does not wait for is not in it). `out` itself when
    `stream` is None, or when `out` is not plain tensors (the judge rejects its form as it is)."""
    if stream is None:
        return out
    outs = flatten(out)
    if outs is None:
        return out
    with torch.no_grad(), torch.cuda.stream(stream):
        copies = [t.clone() for t in outs]
    return copies[0] if type(out) is torch.Tensor else copies


def call_seen(guard: Guard, fn: Callable[..., Any], *args: Any, device: str,
              record: OpRecorder | None = None) -> tuple[Any, Any]:
    """`guard.call(fn, *args)` (recording the candidate's ops in `record`), and its output as the
    caller's stream saw it the moment `fn` returned, copied before the guard's checks ran."""
    stream = caller_stream(device)
    seen: list = []

    def observed(*call_args):
        with record if record is not None else contextlib.nullcontext():
            out = fn(*call_args)
        seen.append(as_seen_from(stream, out))
        return out

    out = guard.call(observed, *args)
    return out, seen[0]
