# compute-sanitizer as a diagnosis stage (results/tables/sanitizer.parquet, results/sanitizer.md):
# each flagged CUDA or Triton submission's first failing case (with `sanitizer.passing`, a passing
# one's first case too) rerun in the sandbox's worker under memcheck, racecheck, initcheck and
# synccheck, `jobs` runs at a time. config `sanitizer: {tools, timeout_s, budget_s, exit_wait_s,
# max_submissions, passing, executable, print_limit, jobs}`. Without a CUDA GPU or the executable every
# selected submission gets `not_run` rows saying why (cheap: no worker starts).
# It runs last: its input is every other output of `all`, so it starts once they are all built, and
# no rule reads what it writes; `budget_s` bounds its wall time (runs past it are `not_run`).
from rescore.engine.gpus import shard_slot, slot_resources
from rescore.engine.sanitizer import settings as sanitizer_settings
from rescore.engine.timing_stage import shares_a_gpu

SANITIZER_ON_GPU = shares_a_gpu(config["device"])
SANITIZER_OUTPUTS = ["results/tables/sanitizer.parquet", "results/sanitizer.md"]


rule sanitizer:
    input:
        cases="results/tables/cases.parquet",
        submissions="results/tables/submissions.parquet",
        manifests=expand("results/ingest/{dump}/manifest.json", dump=DUMPS),
        builds=expand(CUDA_BUILDS, dump=DUMPS),
        after=ALL_OUTPUTS + PAPER_OUTPUTS,
    output:
        table=SANITIZER_OUTPUTS[0],
        text=SANITIZER_OUTPUTS[1],
    params:
        config={k: config[k] for k in ("device", "budget", "sanitizer") if k in config},
        gpu_slot=shard_slot(GPUS - 1, GPUS),  # the last GPU: not the one timing runs on
        result_cache=RESULT_CACHE,  # runs an identical one finished are read (rescore.engine.result_cache)
    threads: sanitizer_settings(config, CORES)["jobs"]  # `jobs: auto`: every core the run was given
    resources:
        gpu=1 if SANITIZER_ON_GPU else 0,
        **slot_resources(GPUS, lambda wildcards: shard_slot(GPUS - 1, GPUS)),
    log:
        "results/logs/sanitizer.log",
    conda:
        CPU_ENV
    script:
        "../scripts/sanitizer.py"
