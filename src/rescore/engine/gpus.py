"""Which GPU of the host a job runs on: one slot per device, fixed by the job's own index.

A multi-GPU host runs the check shards side by side; without a device of its own every worker
would open its context on the first GPU and the others would idle. Shard k goes to slot
k % gpus (`shard_slot`), and `shards.assign` deals submissions so that each slot's shards hold the
same expected work. The slot is fixed by the job's index, not taken from a pool: a worker restarted
after a crash or a lost context starts on the same GPU, the other slots' shards never wait for it,
and a resumed run puts every shard where it was. Snakemake sees the slot as a per-device resource
(`gpu_<slot>=1`, `slot_resources`), which a profile may cap (`resources: {gpu_0: 8, ...}`).

The slot becomes CUDA_VISIBLE_DEVICES in the worker's scrubbed environment (`visible_device`):
an index into the devices the job itself was given (under SLURM, the one GPU of the job), so a
slot never names a device the job cannot see. With one GPU, or none, there is no slot and nothing
is set: a run is what it was without this module.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from rescore.runtime.device import gpu_count, resolve_device


def host_gpus(setting: int | str | None, device: str) -> int:
    """The number of GPUs a run spreads its jobs over: the config's `gpus` when it is a number (a
    profile's override, and the tests' fake counts), else the devices torch sees where the run is on
    CUDA; 0 on the CPU, without importing torch (`auto` asks only where an NVIDIA driver is: `run_device`)."""
    if setting not in (None, "auto"):
        return max(0, int(setting))
    return gpu_count() if run_device(device) == "cuda" else 0


def run_device(device: str) -> str:
    """The device a run's jobs resolve `device` to (`runtime.device.resolve_device`, as the check shards
    do), without importing torch where no NVIDIA driver is: `auto` is the CPU there."""
    if device == "auto" and not os.path.exists("/dev/nvidiactl"):
        return "cpu"
    return resolve_device(device)


def shard_slot(index: int, gpus: int) -> int | None:
    """The GPU slot of the job numbered `index` (a check shard, a dump's job), or None with fewer
    than two GPUs: one GPU needs no choosing, and nothing in the run changes."""
    return index % gpus if gpus > 1 else None


def slot_shards(shards: int, gpus: int) -> list[list[int]]:
    """The shards of each slot in use, in slot order (a slot with no shard is left out); one group
    of every shard with fewer than two GPUs."""
    if gpus <= 1:
        return [list(range(shards))]
    groups = [[k for k in range(shards) if k % gpus == g] for g in range(gpus)]
    return [g for g in groups if g]


def slot_resources(gpus: int, slot_of: Callable[[Any], int | None]) -> dict[str, Callable[[Any], int]]:
    """Snakemake resources of a rule whose job runs on `slot_of(wildcards)`: `gpu_<g>` is 1 for the
    job's own device and 0 for the others (a profile's `resources: gpu_<g>=N` caps the jobs that
    share device g, and a dry run shows each job's); none with fewer than two GPUs."""
    if gpus <= 1:
        return {}
    return {f"gpu_{g}": (lambda wildcards, g=g: int(slot_of(wildcards) == g)) for g in range(gpus)}


HEAVY = "gpu_heavy"  # a check shard whose heaviest submission needs a large share of its device (`shards.HEAVY_SHARE`)


def heavy_resources(gpus: int, slot_of: Callable[[Any], int | None],
                    heavy_of: Callable[[Any, Any], int]) -> dict[str, Callable[[Any, Any], int]]:
    """Snakemake resources of a rule whose job is heavy on its device when `heavy_of(wildcards, input)` is 1:
    `gpu_heavy` with one GPU, `gpu_heavy_<g>` of its own slot g with several (0 of the others)."""
    if gpus <= 1:
        return {HEAVY: heavy_of}
    return {f"{HEAVY}_{g}": (lambda wildcards, input, g=g: heavy_of(wildcards, input) if slot_of(wildcards) == g else 0)
            for g in range(gpus)}


def heavy_limits(gpus: int, at_once: int) -> dict[str, int]:
    """The limits of `heavy_resources`: `at_once` heavy jobs per device; none without a GPU."""
    if gpus < 1:
        return {}
    return {HEAVY: at_once} if gpus == 1 else {f"{HEAVY}_{g}": at_once for g in range(gpus)}


def visible_device(slot: int, inherited: str | None = None) -> str:
    """CUDA_VISIBLE_DEVICES for a worker on `slot`: the slot-th of the devices this process was
    given (its own CUDA_VISIBLE_DEVICES: a SLURM job's GPU, a user's choice), wrapping round when
    it was given fewer; the slot's number when it was given none."""
    given = os.environ.get("CUDA_VISIBLE_DEVICES") if inherited is None else inherited
    entries = [e.strip() for e in (given or "").split(",") if e.strip()]
    return entries[slot % len(entries)] if entries else str(slot)


def worker_gpu(slot: int | None) -> str | None:
    """What a worker on `slot` sets CUDA_VISIBLE_DEVICES to: None (leave it as inherited) without a slot."""
    return None if slot is None else visible_device(slot)


def gpu_label(gpu: str | None, versions: str | None) -> str | None:
    """The `gpu` column of a case row: the device the host numbers it by and its model, read from
    the worker's `versions` record (`{"device": "NVIDIA H200", ...}`); None for a row no GPU ran."""
    try:
        model = json.loads(versions or "{}").get("device")
    except (TypeError, ValueError):
        return None
    if not model or str(model).startswith("cpu"):
        return None
    index = gpu if gpu is not None else visible_device(0)
    return f"{index}: {model}"


def with_gpu(rows: list[dict], gpu: str | None) -> list[dict]:
    """`rows` with the `gpu` column filled from each row's own `versions` (a worker that restarted
    on the same slot reports the same device)."""
    return [dict(r, gpu=gpu_label(gpu, r.get("versions"))) for r in rows]


def pin_process(slot: int | None) -> str | None:
    """Put this stage process, and every worker or build it starts, on `slot`'s GPU (a stage of one
    job: timing, the sanitizer); nothing without a slot. Returns the device."""
    gpu = worker_gpu(slot)
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    return gpu
