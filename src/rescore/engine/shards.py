"""Which check shard runs which submission: balanced by each submission's expected cost.

A run's wall time is that of its slowest shard. Under the Triton interpreter one submission can cost
50 times another (a rank-1 matmul that loops over K against a ReLU), so dealing submissions out by
hash left one shard running alone for minutes after the others were done. Shards are filled
longest-first (each submission, most expensive first, to the shard with the least work so far)
from the costs a previous run measured (`COSTS`, and `COSTS_CUDA` for a GPU run, written by
`tools/shard_costs.py`). A submission the
file does not list (a new dump, a new entry, a CUDA C submission, which a CPU run skips and so
cannot time) counts as the median cost; on the CPU CUDA C is free (`expected_costs`), on a GPU a CUDA
C source not in the build cache when the dump was read adds its build (a check shard builds its own:
`COLD_BUILD_S`). The language
alone predicts nothing better: weighted by the H100 run's median per language (CUDA C 85 s, PyTorch
22 s), CUDA-L1's slowest of 48 shards would have taken 756 s instead of 690 s with equal weights
(344 s with the measured costs). The assignment depends only on the manifest (which says what the
build cache held when the dump was read), that file and the device, so every shard of a run, and a
resumed run, gives every shard the same submissions. Which shard runs a
submission changes no result, only when it is done. A dump never gets more shards than it has
submissions to run (`shard_count`).

On a GPU a shard whose heaviest submission reserved at least a third of the device's memory in a
GPU run (`shard_memory.cuda.json`, written by `tools/shard_costs.py --memory`) is heavy
(`shard_is_heavy`), and Snakemake runs at most three heavy shards on a device at once (the resource
`gpu_heavy`, `workflow/rules/common.smk`). Their priority is their expected seconds, as any
shard's (the longest first). On an H100 the seven heaviest one-submission shards, started together,
asked for 137 GiB of 71 and spent minutes waiting for one another's memory while holding seven of the
sixteen cores.
Asking each shard for its heaviest submission's memory instead (9b1d577's first form) kept the heavy
shards waiting behind lighter ones that fit, until the end: they ran one after another, and the last
18 verdicts took from minute 14 to 21.1. Lighter shards ask for nothing; the device's ledger
(`sharing.py`) decides every reservation when it is made.

The heavy submissions are dealt first, so that few shards are heavy (`assign`): each in a shard of
its own where the other shards can still carry the rest (`fit_alone`), else packed into at most three
shards per GPU, which the rest then fills. In the H100 run at ee1a59a, dealt by cost alone, three of
the seven heavy shards also held light submissions, and the last of them ran 80 s of a light one's
cases after every other shard was done. Dealt again from that run's and the two before's submissions'
own seconds (`python bench/schedule_replay.py RESULTS --shards N`), the check stage ends, by cost
alone against heavy apart, at 8 shards a dump 44.9/27.2, 28.6/19.2 and 40.7/26.0 min; at 16
24.2/17.7, 16.8/13.4, 23.0/18.7; at 48 (alone) 15.8/15.1, 10.9/10.9, 14.9/15.3; at 24 and 32 from 4.5
min better to 1.5 min worse. Dealt by cost alone, the seven heavy submissions land in six or seven
shards, which then run three at a time. Measured on an H100 at 071391d (48 shards a dump, each heavy
submission alone): the check stage ended at 14.1 min (15.7 at ee1a59a; replayed 13.3), all 16 cores
busy to its minute 13.
"""

from __future__ import annotations

import functools
import json
import statistics
from pathlib import Path

from rescore.engine.gpus import slot_shards
from rescore.engine.sharing import USABLE
from rescore.model.paths import SHARD_COSTS, SHARD_COSTS_CUDA, cuda_cache_root, shard_memory_file
from rescore.model.records import content_hash, cuda_only, read_manifests
from rescore.runtime.device import gpu_memory_mib, machine_cores

# Seconds a cold CUDA C build takes on the H100 host (69 builds, 12 at a time: 5.5 min), counted on a
# GPU for a CUDA C source not in the build cache.
COLD_BUILD_S = 60.0

COSTS = SHARD_COSTS
# On a GPU the costs differ in kind (Triton's JIT, not the interpreter, dominates a new size), so a
# GPU run balances by the seconds a GPU run measured, where that file exists.
COSTS_CUDA = SHARD_COSTS_CUDA


def shard_threads(requested_cores: int | None) -> int:
    """The cores one check shard claims out of Snakemake's `--cores`.

    A shard keeps one core busy. Given more --cores than the machine has (`--cores 8` on a 2-core
    machine), shards would share cores and slow each other down (16 submissions took 31.6 s as 8
    processes and 17.3 s as 2 on 2 cores), so each shard then claims its share of --cores and no
    more shards run at once than there are cores."""
    return max(1, (requested_cores or 1) // machine_cores())


def load_costs(path: Path = COSTS) -> dict[str, float]:
    """submission_id -> seconds, or {} when there is no such file."""
    try:
        return {str(k): float(v) for k, v in json.loads(path.read_text()).items()}
    except (OSError, ValueError):
        return {}


def expected_costs(subs: list, device: str, path: Path | None = None) -> dict[str, float]:
    """submission_id -> expected seconds on `device`: the recorded costs (a GPU's own where
    `COSTS_CUDA` exists), and 0 on the CPU for a CUDA C or CUDA-only submission, which is skipped there."""
    if path is None:
        path = COSTS_CUDA if device == "cuda" and COSTS_CUDA.is_file() else COSTS
    costs = load_costs(path)
    if device == "cpu":
        costs.update({s.submission_id: 0.0 for s in subs if s.language == "cuda" or cuda_only(s.source)})
    return costs


# In a manifest's `extra` of a CUDA C submission: whether the build cache held its source when the
# dump was read. Every shard of a run weighs builds by it, not by the cache as it finds it: the shards
# that start first build into the cache, and a later one would otherwise deal the submissions out
# differently (some run twice, some never).
CACHED_AT_INGEST = "cuda_build_cached"


def _cached(sub) -> bool:
    return (cuda_cache_root() / content_hash(sub.source)).is_dir()


def note_cached_builds(subs: list) -> None:
    """Record in each CUDA C submission's `extra` whether the build cache holds it now (at ingest)."""
    for s in subs:
        if s.language == "cuda":
            s.extra[CACHED_AT_INGEST] = _cached(s)


def build_costs(subs: list, device: str) -> dict[str, float]:
    """submission_id -> seconds its shard spends building it first: COLD_BUILD_S for a CUDA C source
    on a GPU that the build cache did not hold when the dump was read (else as it holds now), else
    nothing."""
    if device != "cuda":
        return {}
    return {s.submission_id: COLD_BUILD_S for s in subs
            if s.language == "cuda" and not (s.extra[CACHED_AT_INGEST] if CACHED_AT_INGEST in s.extra else _cached(s))}


def shard_assignment(subs: list, shards: int, device: str, gpus: int = 1,
                     usable_mib: int = 0) -> tuple[dict[str, int], dict[str, float]]:
    """(submission_id -> shard, submission_id -> expected seconds) of a dump's submissions: the one
    assignment every check shard of the dump computes alike. On a GPU whose usable memory is
    `usable_mib`, the heavy submissions (`heavy_submissions`) are dealt apart (`assign`)."""
    ids = [s.submission_id for s in subs]
    weight = weights(ids, expected_costs(subs, device))
    for sid, seconds in build_costs(subs, device).items():
        weight[sid] += seconds
    heavy = heavy_submissions(ids, usable_mib) if device == "cuda" else set()
    return assign(ids, shards, weight, gpus, heavy), weight


@functools.lru_cache(maxsize=16)
def _plan(manifest: str, modified_ns: int, cap: int, device: str, gpus: int, usable_mib: int,
          memory: tuple[str, int]) -> tuple[dict[str, int], dict[str, float], int]:
    """(submission_id -> shard, submission_id -> expected seconds, shards) of the runnable submissions
    (`memory`: the memory file's path and version, which say which submissions are heavy)."""
    subs = read_manifests([manifest])
    shards = _count(subs, cap)
    assignment, weight = shard_assignment(subs, shards, device, gpus, usable_mib)
    ids = {s.submission_id for s in runnable(subs)}
    return {k: v for k, v in assignment.items() if k in ids}, weight, shards


def _manifest_plan(manifest: Path, cap: int, device: str, gpus: int,
                   usable_mib: int) -> tuple[dict[str, int], dict[str, float], int]:
    """`_plan` of a manifest that exists, read once per version of it and of the memory file."""
    memory = shard_memory_file()
    return _plan(str(manifest), manifest.stat().st_mtime_ns, cap, device, gpus, usable_mib,
                 (str(memory), memory.stat().st_mtime_ns if memory.is_file() else 0))


def shard_priority(manifest: str | Path, shard: int, shards: int, device: str, gpus: int = 1,
                   usable_mib: int = 0) -> int:
    """Snakemake's priority of check shard `shard` of the dump's (`shards` as configured: `shard_count`
    gives how many it gets): its expected seconds (`shard_assignment`), so that where more shards than
    cores wait the longest start first and the shortest fill the end (on an H100, shards of five
    minutes that started at minute 15 of 20 kept the run going four minutes after most cores were
    idle, while one-submission shards had started first). The manifest is read once per run."""
    path = Path(manifest)
    if not path.is_file():  # not read yet (a dry run): no order to give
        return 0
    assignment, weight, _ = _manifest_plan(path, shards, device, gpus, usable_mib)
    return round(sum(weight[sid] for sid, k in assignment.items() if k == shard))


def load_memory(path: Path | None = None) -> dict[str, float]:
    """submission_id -> GiB of device memory its requests reserved at most in a GPU run, or {}: read
    once per version of the file (every check shard of a DAG asks)."""
    path = path or shard_memory_file()
    return _memory(str(path), path.stat().st_mtime_ns if path.is_file() else 0)


@functools.lru_cache(maxsize=4)
def _memory(path: str, modified_ns: int) -> dict[str, float]:
    return load_costs(Path(path))


def is_heavy(gib: float, usable_mib: int) -> bool:
    """Whether a submission that reserved `gib` needs at least 1/HEAVY_SHARE of a device's `usable_mib`."""
    return usable_mib > 0 and gib * 1024 * HEAVY_SHARE >= usable_mib


# A shard is heavy when its heaviest submission reserved at least 1/HEAVY_SHARE of the device's usable
# memory; HEAVY_SHARE of them may run on one device at once (`heavy_limits`): on an H100, the seven
# heaviest of CUDA-L1's shards, three at a time. `python bench/schedule_replay.py RESULTS` replays a
# finished H100 run's check stage (each shard's own seconds there, its priority as the workflow gave
# it, Snakemake's choice of jobs, 16 cores): the run at ee1a59a, under this rule, ends at 16.0 min in
# the replay, 15.7 measured (none held back: 16.4). The replay cannot show what sharing the device
# costs; a GPU run measures that.
HEAVY_SHARE = 3
# How far past the balanced load (a dump's expected seconds over its shards) the other shards may be
# filled for the heavy submissions to get shards of their own (`fit_alone`).
ALONE_SLACK = 0.05


def usable_memory_mib(setting: float | str | None, gpus: int) -> int:
    """The device memory, in MiB, the device's ledger lends (`sharing.USABLE`) of the config's
    `gpu_memory_gib` where it is a number, else of the smallest GPU's memory (`nvidia-smi`); 0 with no
    GPU, where nvidia-smi is missing (a SLURM login node) or where the config says 0."""
    if gpus < 1 or setting == 0:
        return 0
    total = float(setting) * 1024 if setting not in (None, "auto") else gpu_memory_mib()
    return int(USABLE * total) if total else 0


def shard_is_heavy(manifest: str | Path, shard: int, shards: int, gpus: int, usable_mib: int) -> int:
    """1 when check shard `shard`'s heaviest submission reserved at least 1/HEAVY_SHARE of `usable_mib`
    in a GPU run (`load_memory`, `is_heavy`), else 0: also where none of its submissions was measured,
    where the device's memory is unknown, or before the dump is read (a dry run)."""
    path = Path(manifest)
    if usable_mib <= 0 or not path.is_file():
        return 0
    assignment, _, _ = _manifest_plan(path, shards, "cuda", gpus, usable_mib)
    return int(bool(heavy_submissions([sid for sid, k in assignment.items() if k == shard], usable_mib)))


def heavy_submissions(submission_ids: list[str], usable_mib: int, memory: dict[str, float] | None = None) -> set[str]:
    """The submissions that reserved at least 1/HEAVY_SHARE of a device's `usable_mib` in a GPU run
    (`memory`: submission_id -> GiB, by default `load_memory`; `is_heavy`): none where the device's
    memory is unknown (0)."""
    if usable_mib <= 0:
        return set()
    gib = load_memory() if memory is None else memory
    return {sid for sid in submission_ids if is_heavy(gib.get(sid, 0.0), usable_mib)}


def shard_count(manifest: str | Path, shards: int) -> int:
    """How many check shards a dump gets: `shards`, or one per submission to run when it has fewer
    (at least one, which writes empty tables)."""
    return _count(read_manifests([str(manifest)]), shards)


def _count(subs: list, shards: int) -> int:
    return max(1, min(shards, len(runnable(subs))))


def runnable(subs: list) -> list:
    """The submissions a check shard runs: not those recorded as unreadable at ingest."""
    return [s for s in subs if not (s.extra or {}).get("ingest_error")]


def weights(submission_ids: list[str], costs: dict[str, float]) -> dict[str, float]:
    """submission_id -> expected seconds: its recorded cost, or the median of the recorded ones."""
    known = [costs[s] for s in submission_ids if s in costs]
    default = statistics.median(known) if known else 1.0
    return {s: costs.get(s, default) for s in submission_ids}


def assign(submission_ids: list[str], shards: int, costs: dict[str, float] | None = None,
           gpus: int = 1, heavy: set[str] | frozenset[str] = frozenset()) -> dict[str, int]:
    """submission_id -> shard index in [0, shards).

    With several GPUs (shard k on GPU k % gpus, `gpus.shard_slot`) each submission goes first to the
    GPU with the least expected work per shard, then to that GPU's least loaded shard, so that the GPUs
    finish together as well as the shards; with one GPU or none that is the plain longest-first fill.

    The `heavy` submissions (`heavy_submissions`) are dealt first, so that few shards are heavy, since a
    device runs at most HEAVY_SHARE heavy shards at once (`shard_is_heavy`): each in a shard of its own
    that takes no other where the other shards can still carry the rest (`fit_alone`), else packed
    into at most HEAVY_SHARE shards per GPU, which the rest then fills as any other."""
    weight = weights(submission_ids, load_costs() if costs is None else costs)
    groups = slot_shards(shards, gpus)
    load = [0.0] * shards
    group_load = [0.0] * len(groups)
    alone = fit_alone(heavy, weight, shards, gpus)
    closed: set[int] = set()
    holding: list[set[int]] = [set() for _ in groups]  # each GPU's shards that hold a heavy submission
    out: dict[str, int] = {}
    for sid in sorted(set(submission_ids), key=lambda s: (s not in heavy, -weight[s], s)):
        group = min(range(len(groups)), key=lambda g: (group_load[g] / len(groups[g]), g))  # per shard: a
        # GPU given fewer shards (shards not a multiple of gpus) runs fewer workers, and gets less
        candidates = [i for i in groups[group] if i not in closed] or groups[group]
        if sid in heavy and not alone and len(holding[group]) >= HEAVY_SHARE:
            candidates = sorted(holding[group])
        shard = min(candidates, key=lambda i: (load[i], i))
        if sid in heavy:
            holding[group].add(shard)
            if alone:
                closed.add(shard)
        out[sid] = shard
        load[shard] += weight[sid]
        group_load[group] += weight[sid]
    return out


def fit_alone(heavy: set[str] | frozenset[str], weight: dict[str, float], shards: int, gpus: int = 1) -> bool:
    """Whether every heavy submission can have a shard of its own: the shards left, at least one per
    GPU, carry the rest within ALONE_SLACK of the balanced load (the expected seconds over the shards).
    With CUDA-L1's seven heavy submissions, in 48 shards they can, in 16 or 8 they cannot (closing
    seven of eight would leave the eighth nearly all the work)."""
    listed = [s for s in heavy if s in weight]
    left = shards - len(listed)
    total = sum(weight.values())
    rest = total - sum(weight[s] for s in listed)
    return bool(listed) and left >= gpus and rest <= left * (total / shards) * (1 + ALONE_SLACK)
