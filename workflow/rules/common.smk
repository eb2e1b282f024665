# Config loading and validation, and the names every stage shares.
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from rescore.engine.gpus import heavy_limits, host_gpus, run_device
from rescore.model.paths import result_cache_root
from rescore.engine.shards import HEAVY_SHARE, shard_count, shard_is_heavy, shard_priority, shard_threads, usable_memory_mib


configfile: "config/config.yaml"


validate(config, "../../config/config.schema.yaml")

DUMPS = list(config["dumps"])


wildcard_constraints:
    dump="[A-Za-z0-9_-]+",  # a dump's name (config.schema.yaml), never a path
    shard="[0-9]+",


def dump_shards(dump):
    """The check shards of a dump: `shards`, or fewer when the dump has fewer submissions to run
    (never an empty shard). Known once the dump is read (`checkpoint ingest`)."""
    return shard_count(checkpoints.ingest.get(dump=dump).output.manifest, int(config["shards"]))


def check_shard_priority(wildcards, input):
    """A check shard's Snakemake priority: the longest shards first (their expected seconds), where
    more shards than cores wait (`shards.shard_priority`), by the costs of the device the shards run on."""
    return shard_priority(input.manifest, int(wildcards.shard), int(config["shards"]), RUN_DEVICE, GPUS,
                          GPU_MEMORY_MIB)


def check_shard_heavy(wildcards, input):
    """1 for a check shard whose heaviest submission needs a large share of the GPU (`shards.shard_is_heavy`)."""
    return shard_is_heavy(input.manifest, int(wildcards.shard), int(config["shards"]), GPUS, GPU_MEMORY_MIB)


def shard_files(pattern, own_dump=False):
    """An input function: `pattern` for every check shard of every dump (`own_dump`: of the job's dump)."""

    def files(wildcards):
        dumps = [wildcards.dump] if own_dump else DUMPS
        return [f for dump in dumps for f in expand(pattern, dump=dump, shard=range(dump_shards(dump)))]

    return files

# One core per check shard, even when --cores is more than the machine has (rescore.engine.shards);
# profiles may set-threads.
try:
    CORES = workflow.cores
    SHARD_THREADS = shard_threads(CORES)
except WorkflowError:  # no --cores given (a dry run, --report, --lint): no job runs
    CORES, SHARD_THREADS = None, 1
# The device the check shards run on (`auto` resolved as they resolve it), whose costs order them.
RUN_DEVICE = run_device(config["device"])
# The GPUs the check shards and the GPU stages spread over, one slot each (rescore.engine.gpus): the
# config's `gpus` (`--config gpus=4`), else those torch sees on a CUDA run; 0 or 1 changes nothing.
GPUS = host_gpus(config.get("gpus", "auto"), RUN_DEVICE)
# At most HEAVY_SHARE heavy check shards on a GPU at once (rescore.engine.shards), unless --resources
# gpu_heavy=N (gpu_heavy_<g> with several GPUs) says otherwise; the GPU's usable memory tells which are heavy,
# and the heavy submissions are dealt apart (every shard job computes it alike: on a cluster whose
# GPUs differ in memory, give `gpu_memory_gib` a number).
GPU_MEMORY_MIB = usable_memory_mib(config.get("gpu_memory_gib", "auto"), GPUS) if RUN_DEVICE == "cuda" else 0
for _name, _limit in heavy_limits(GPUS if GPU_MEMORY_MIB else 0, HEAVY_SHARE).items():
    if _name not in workflow.global_resources:
        workflow.register_resource(_name, _limit)
# Where the check shards and the sanitizer read and store what identical runs measured
# (rescore.engine.result_cache); None with `result_cache: false`.
RESULT_CACHE = str(result_cache_root()) if config.get("result_cache", True) else None
CPU_ENV = "../../envs/cpu.yaml"
# Whether robustness findings (special values, extreme magnitudes, cancellation, one toolchain's
# compiler: rescore.model.evidence) count toward the headline verdicts; the analysis stages get it.
ROBUSTNESS_IN_HEADLINE = bool(config.get("verdicts", {}).get("robustness_in_headline", False))

ALL_OUTPUTS = [
    "results/tables/submissions.parquet",
    "results/tables/cases.parquet",
    "results/tables/illusion.parquet",
    "results/tables/causes.parquet",
    "results/failures/failures.parquet",
    "results/failures/shrunk.parquet",
    "results/figures/verdicts.png",
    "results/figures/verdicts.pdf",
    "results/tables/corpus.parquet",
    "results/tables/strategies.parquet",
    "results/tables/tolerances.parquet",
    "results/uncertainty.md",
    "results/tables/static.parquet",
    "results/figures/static_delta_vs_recall.png",
    "results/tables/rescored.parquet",
    "results/tables/degenerate.parquet",
    "results/cuda_builds.parquet",
    "results/tables/phases.parquet",
]
