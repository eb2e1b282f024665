"""(In the worker.) What a submission is expected to need of its device's memory, and what the worker
holds there: the reports the parent reserves memory by (`engine/sharing.py`), and handing cached
memory back when a retry waits to have the device to itself.

- at load, the reference's peak at the benchmark's sizes, traced on the meta device (no memory
  used; the tensors each op creates, minus those already dropped), or its inputs' and weights'
  bytes where the trace fails (a reference that leaves torch, or branches on values);
- in the fixed check, the peak the allocator measured around the reference's calls
  (`ReferencePeak`), which replaces the trace;
- after every request, the bytes the caching allocator holds and the device's size.
"""

from __future__ import annotations

import gc
import os
import types
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from rescore.runtime.device_share import retry_waiting
from rescore.worker.problem_sizes import inputs_at
from rescore.worker.protocol import MEASURE_ENV, MEMORY_KEY
from rescore.worker.timing import input_bytes


def wanted(device: str) -> bool:
    """Whether this worker reports memory: on a GPU always, on the CPU where the parent asks."""
    return device == "cuda" or os.environ.get(MEASURE_ENV) == "1"


class _Live(TorchDispatchMode):
    """Counts the bytes of the tensors ops create and that are still referenced; keeps the peak.
    An op whose output aliases an input (a view, an in-place op) creates nothing."""

    def __init__(self, base: int):
        super().__init__()
        self.live = self.peak = base

    def _drop(self, n: int) -> None:
        self.live -= n

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if any(r.alias_info is not None for r in func._schema.returns):
            return out
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor):
                n = t.numel() * t.element_size()
                self.live += n
                weakref.finalize(t, self._drop, n)
        self.peak = max(self.peak, self.live)
        return out


def estimate_reference(problem: types.ModuleType) -> int | None:
    """The reference's peak memory at the benchmark's sizes (bytes of its inputs, weights and the
    tensors its forward holds at once), traced on the meta device; its inputs' and weights' bytes
    where the trace fails; None when not even those can be made."""
    try:
        torch.manual_seed(0)
        init, inputs = problem.get_init_inputs(), inputs_at(problem, {})
        with torch.device("meta"):
            model = problem.Model(*init)
    except Exception:  # noqa: BLE001 - no estimate: the measured peak will come from the fixed check
        return None
    weights = (input_bytes(list(model.parameters())) + input_bytes(list(model.buffers()))
               if isinstance(model, torch.nn.Module) else 0)
    base = input_bytes(inputs) + weights
    try:
        meta = [x.to("meta") if isinstance(x, torch.Tensor) else x for x in inputs]
        with torch.no_grad(), _Live(base) as live:
            model(*meta)
        return int(live.peak)
    except Exception:  # noqa: BLE001 - the reference needs real values
        return base or None


class ReferencePeak:
    """Around each of the reference's calls in the fixed check: the most the allocator held during
    any of them (its inputs, weights and intermediates, and what the process already held)."""

    def __init__(self, device: str):
        self.on = device == "cuda"
        self.peak = 0

    def __enter__(self) -> ReferencePeak:
        if self.on:
            torch.cuda.reset_peak_memory_stats()
        return self

    def __exit__(self, *exc) -> None:
        if self.on:
            self.peak = max(self.peak, int(torch.cuda.max_memory_allocated()))


def report(device: str, result: dict) -> dict:
    """`result` with the worker's memory report added (on a shared GPU, or where asked)."""
    if not wanted(device):
        return result
    memory = dict(result.get(MEMORY_KEY) or {})
    if device == "cuda":
        try:
            # the most its tensors took since the last report, not the allocator's cache of freed
            # blocks (which it keeps, and which made one worker's reservation 55 GB on an H100)
            memory["peak"] = int(torch.cuda.max_memory_allocated())
            torch.cuda.reset_peak_memory_stats()
            memory["total"] = int(torch.cuda.get_device_properties(0).total_memory)
        except Exception:  # noqa: BLE001 - a context lost to this request: the worker restarts anyway
            pass
    return dict(result, **{MEMORY_KEY: memory})


def release(device: str) -> None:
    """Return the allocator's cached blocks to the device (a new submission's load starts with none)."""
    if device == "cuda":
        gc.collect()
        try:
            torch.cuda.empty_cache()
        except Exception:  # noqa: BLE001 - a context lost to the last request: the worker restarts anyway
            pass


def hand_back(device: str, ran_out: bool) -> bool:
    """After a request: release the cache when this request ran out of memory (its retry alone needs
    it) or another worker's retry waits for the device; returns whether it did. Otherwise the cache is
    kept: allocating again would cost every case time."""
    if device != "cuda" or not (ran_out or retry_waiting()):
        return False
    release(device)
    return True
