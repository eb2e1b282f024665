"""The output as the caller's stream sees it.

A user of a kernel reads its output on the stream they called it from, with no device-wide
synchronize in between. A kernel that writes its output on a side stream the caller's stream never
waits for (an exit race) is then read before it is written. The harness synchronizes the whole
device after each call (for timing, and before reading on the host), which lets such work finish
first and hides the missing wait; so the output is judged through a copy made on the caller's stream
right after the call returns, before that synchronize.

Under the Triton interpreter there is one stream and everything runs in order: no copy is made.
The fixed-shape check does not use this: it reproduces the benchmark's own check, which
synchronizes the device before comparing.
"""

from __future__ import annotations

import torch

from rescore.oracle.reference import flatten


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
