"""Where a case's tensors are: its float64 truth computed on the host or the device, its tensors
judged on host copies or where they are, and the copies between the host and a GPU.

On a GPU that several worker processes share (without MPS they take turns), each wait for the
device costs a turn: a plain `.cpu()` per tensor waits once per tensor, and a plain upload from
ordinary memory waits too. Small tensors go through pinned memory here: uploads do not wait at all,
and copies back wait once for the lot. Large ones (a 2^31-element trigger) are copied as usual, so
that no pinned block of gigabytes stays cached in the worker.
"""
from __future__ import annotations

import torch

# Past this many bytes a tensor is copied the plain way, not through the pinned cache.
PINNED_COPY_BYTES = 1 << 24
# On a GPU a case whose tensors all hold at most this many elements is judged on the host: the
# comparison is a hundred small ops, and on a GPU shared by many worker processes every op waits for
# its process's turn (a context switch), so host copies made once cost less than the ops.
HOST_JUDGE_ELEMENTS = 1 << 17
# For the same reason a GPU case computes its float64 truth on the host when its inputs are that
# small and its estimated work (largest input x reduction length) is at most this: float64 on one
# core then takes milliseconds, against a dozen turns on the GPU (the uploads, the runs, the copies
# back). The truth is float64 either way; the two devices differ in its last bits, far below any bound.
HOST_TRUTH_WORK = 1 << 22
# The estimate does not see work that outgrows the inputs: a KernelBench level 2 convolution reads
# 12,288 elements and does 3 million multiply-adds (34 ms in float64 on one core). So the truth's
# host run is timed: one slower than this moves the rest of its case to the device, and lowers in
# proportion the estimate the problem's later cases may bring to the host (`TruthPlacement.measured`).
HOST_TRUTH_SECONDS = 0.01


def _small(x: torch.Tensor) -> bool:
    return x.numel() * x.element_size() <= PINNED_COPY_BYTES


def to_host(tensors: list) -> list:
    """`tensors` with every CUDA tensor replaced by a host copy (anything else as it is)."""
    out = list(tensors)
    pending = False
    for i, x in enumerate(out):
        if isinstance(x, torch.Tensor) and x.device.type == "cuda":
            x = x.detach()
            if _small(x):
                out[i] = x.to("cpu", non_blocking=True)
                pending = True
            else:
                out[i] = x.cpu()
    if pending:
        torch.cuda.synchronize()
    return out


def to_device(x: torch.Tensor, device: str) -> torch.Tensor:
    """A host tensor on `device`; to a GPU without waiting when it is small (pinned memory keeps
    its block until the copy is done)."""
    if device != "cuda" or x.device.type != "cpu" or not _small(x):
        return x.to(device)
    return x.pin_memory().to(device, non_blocking=True)


def truth_work(sizes: list[int], reduction_len: int) -> int:
    """A case's estimated float64 work: its largest input's elements x its reduction length."""
    return max(sizes) * max(reduction_len, 1)


class TruthPlacement:
    """Where a case's float64 truth is computed (`truth_device`), and what the host has been measured
    to manage for the loaded problem (`host_truth_work`, kept per problem in `learned_truth_work`
    for the other submissions of the problem this worker loads)."""

    def __init__(self, device: str):
        self.device = device
        self.truth_device = device
        self.host_truth_work = HOST_TRUTH_WORK  # lowered by a slow host truth of the loaded problem
        self.learned_truth_work: dict[str, int] = {}  # problem_id -> its lowered host_truth_work
        self.problem_id: str | None = None

    def for_problem(self, problem_id: str | None) -> None:
        """A new job: start from what was measured for its problem, if anything."""
        self.problem_id = problem_id
        self.host_truth_work = self.learned_truth_work.get(problem_id, HOST_TRUTH_WORK)

    def _host_sizes(self, inputs64: list) -> list[int] | None:
        """The case's tensor sizes where its truth may run on the host (a GPU case small enough), else None."""
        sizes = [x.numel() for x in inputs64 if isinstance(x, torch.Tensor)]
        if self.device != "cuda" or not sizes or max(sizes) > HOST_JUDGE_ELEMENTS:
            return None
        return sizes

    def choose(self, inputs64: list, reduction_len: int) -> str:
        """Where the case's float64 truth is computed: the host for a small GPU case whose
        estimated work the host has not been measured too slow for (HOST_TRUTH_WORK), else the device."""
        sizes = self._host_sizes(inputs64)
        if sizes is None:
            return self.device
        return "cpu" if truth_work(sizes, reduction_len) <= self.host_truth_work else self.device

    def alternative(self, inputs64: list) -> str | None:
        """The other device a case's truth could have been placed on, where `choose` picks by what it
        has measured (wall-clock times, which vary from run to run): on a GPU, for a case small enough
        for the host, the device when the truth is on the host and the host when it is on the device;
        None where the placement is the same in every run (the CPU, a large case)."""
        if self._host_sizes(inputs64) is None:
            return None
        return self.device if self.truth_device == "cpu" else "cpu"

    def measured(self, inputs64: list, reduction_len: int, seconds: float) -> None:
        """After a case's first float64 run (`seconds` long): one on the host that took longer than
        HOST_TRUTH_SECONDS moves the rest of the case (its truth) to the device, and from then on
        the problem's cases come to the host only with the work that fits in that time at the rate
        just measured (kept for the other submissions of the problem this worker loads)."""
        if self.truth_device != "cpu" or self.device == "cpu" or seconds <= HOST_TRUTH_SECONDS:
            return
        work = truth_work([x.numel() for x in inputs64 if isinstance(x, torch.Tensor)], reduction_len)
        self.host_truth_work = min(self.host_truth_work, int(work * HOST_TRUTH_SECONDS / seconds))
        self.learned_truth_work[self.problem_id] = self.host_truth_work
        self.truth_device = self.device


def judged_where(device: str, *groups: list | None) -> tuple:
    """The tensors of a case where they are judged: host copies on a GPU when the case is small
    (HOST_JUDGE_ELEMENTS; copied with one wait), else on the device (a truth computed on the
    host is moved there)."""
    tensors = [x for g in groups for x in g or [] if isinstance(x, torch.Tensor)]
    if device == "cpu":
        return groups
    if any(x.numel() > HOST_JUDGE_ELEMENTS for x in tensors):
        return tuple(None if g is None else [x.to(device) if isinstance(x, torch.Tensor) else x for x in g]
                     for g in groups)
    flat = iter(to_host([x for g in groups for x in g or []]))
    return tuple(None if g is None else [next(flat) for _ in g] for g in groups)


def lowp(inputs64: list, tdtype: torch.dtype, device: str) -> list:
    """A case's inputs on the device at the test dtype (floating tensors rounded, others as they
    are). A small one is rounded on the host and uploaded without waiting (`to_device`)."""
    def one(x):
        if not isinstance(x, torch.Tensor):
            return x
        if not x.is_floating_point():
            return to_device(x, device)
        if x.numel() <= HOST_JUDGE_ELEMENTS:
            return to_device(x.to(tdtype), device)
        return x.to(device).to(tdtype)

    return [one(x) for x in inputs64]
