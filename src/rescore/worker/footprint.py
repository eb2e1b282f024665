"""(In the worker.) What a submission is expected to need of its device's memory, and what the worker
holds there: the reports the parent reserves memory by (`engine/sharing.py`), and handing the
allocator's cache back where keeping it would make those reservations untrue: when a retry waits
to have the device to itself (after a request, or while the worker waits for its next one), and
when a submission's requests drop from the benchmark's sizes to the fuzz oracle's drawn ones.

- at load, the reference's peak at the benchmark's sizes, traced on the meta device (no memory
  used; the tensors each op creates, minus those already dropped), or its inputs' and weights'
  bytes where the trace fails (a reference that leaves torch, or branches on values);
- in the fixed check, the reference's own peak measured around its calls (`ReferencePeak`: its
  inputs, weights and what the allocator took during the call), which replaces the trace;
- after every request, the bytes the caching allocator holds and the device's size.
"""

from __future__ import annotations

import contextlib
import gc
import os
import types
import weakref
from collections.abc import Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from rescore.runtime.device_share import IDLE_POLL_S, retry_waiting
from rescore.worker import case_inputs
from rescore.worker.problem_sizes import bound_sizes, inputs_at
from rescore.worker.protocol import BENCHMARK, FUZZ, MEASURE_ENV, MEMORY_KEY
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


def estimate_reference(problem: types.ModuleType, sizes: dict[str, int] | None = None) -> int | None:
    """The reference's peak memory at the benchmark's sizes (`sizes`: at those instead; bytes of its
    inputs, weights and the tensors its forward holds at once), traced on the meta device; its inputs'
    and weights' bytes where the trace fails; None when not even those can be made."""
    try:
        with bound_sizes(problem, sizes or {}):
            torch.manual_seed(0)
            init, inputs = problem.get_init_inputs(), inputs_at(problem, sizes or {})
            with torch.device("meta"):
                model = problem.Model(*init)
    except Exception:  # noqa: BLE001 - no estimate: the measured peak will come from the fixed check
        return None
    base = input_bytes(inputs + _weights(model))
    try:
        meta = [x.to("meta") if isinstance(x, torch.Tensor) else x for x in inputs]
        with torch.no_grad(), _Live(base) as live:
            model(*meta)
        return int(live.peak)
    except Exception:  # noqa: BLE001 - the reference needs real values
        return base or None


def load_estimates(problem: types.ModuleType, schema, budget: int) -> dict[str, int | None]:
    """What a load tells the parent to reserve by (`engine/sharing.py`): the reference's traced peak at
    the benchmark's sizes (`estimate`) and, where the benchmark's largest input is past the fuzz
    budget, at the benchmark's sizes fitted to the budget (`fuzz_estimate`): no drawn case's inputs
    are larger (its proportions and weights may differ: what a case held is reserved from then on). A
    reservation at the benchmark's peak for every fuzz case of such a problem (on an H100, 26 GiB for
    a 3-D convolution's cases of at most 2^20 elements) holds every other worker's request back."""
    estimates: dict[str, int | None] = {"estimate": estimate_reference(problem)}
    if schema is not None:
        fitted = case_inputs.fitted_to_budget(problem, schema, budget)
        if fitted is not None:
            estimates["fuzz_estimate"] = estimate_reference(problem, fitted)
    return estimates


def _weights(model) -> list:
    """A module's parameters and buffers (none for a callable that is not a module)."""
    return list(model.parameters()) + list(model.buffers()) if isinstance(model, torch.nn.Module) else []


class ReferencePeak:
    """Around each of the reference's calls in the fixed check: the most the reference itself held
    during any of them, its inputs and weights on the device plus what the allocator took beyond
    what it held when the call began. What else the process held then (the candidate's model and
    outputs, the check's other trials) is not the reference's, and the reservation multiplies this
    peak by `sharing.FACTOR`: counted in, it made reservations of tens of GiB for a reference of a
    few, and every other worker waited for them."""

    def __init__(self, device: str):
        self.on = device == "cuda"
        self.peak = 0

    @contextlib.contextmanager
    def around(self, model, args: tuple) -> Iterator[None]:
        """Measure one call of `model` on `args`."""
        if not self.on:
            yield
            return
        held = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        try:
            yield
        finally:
            grown = max(0, int(torch.cuda.max_memory_allocated()) - held)
            own = _cuda_bytes(list(args) + _weights(model))
            self.peak = max(self.peak, own + grown)


def _cuda_bytes(values) -> int:
    return input_bytes([x for x in values if isinstance(x, torch.Tensor) and x.is_cuda])


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
            memory["free"] = int(torch.cuda.mem_get_info()[0])  # the whole device's, every process's use counted
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


def wait_for_request(conn, device: str) -> None:
    """(Between requests.) Return when the parent's next request is there to read from `conn`; on a
    GPU, meanwhile, hand the cache back once if another worker's retry waits for the device alone.
    Only a worker that ends a request while a retry waits hands back after it (`hand_back`): on an
    H100 workers idle between requests kept 24 and 31 GiB through such retries, which then ran out
    of memory "with the GPU to itself" (their cases `skipped`)."""
    if device != "cuda":
        return
    handed = False
    while not conn.poll(IDLE_POLL_S):
        handed = handed or hand_back(device, ran_out=False)


def at_scale(device: str, last: str, scale: str) -> str:
    """The scale the next request runs at (`protocol.scale_of`; "" keeps `last`); from the benchmark's
    sizes down to the fuzz oracle's drawn ones the cache is handed back first. The parent's reservation
    drops with the scale (`engine/sharing.py`): a cache kept from the fixed check (24 GiB on an H100)
    beside a fuzz case's reservation of 1 GiB made the device run out where the ledger saw room."""
    scale = scale or last
    if last == BENCHMARK and scale == FUZZ:
        release(device)
    return scale
