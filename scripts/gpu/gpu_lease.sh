#!/usr/bin/env bash
# GPU measurements that outlast one call of a GPU lease, from the repository root:
#
#   scripts/gpu/gpu_lease.sh WATCH_S                 (one call: start or watch the steps, then pack)
#
# The steps run detached (setsid) in WORK (default /tmp/rescore-lease), one after another, each
# leaving WORK/<step>.done so that a driver started again skips what is finished:
#   cold    `snakemake --cores 16 all --config shards=48` in WORK/cold, an empty folder (the Triton
#           cache is whatever ~/.triton holds: empty on a fresh machine);
#   big     `all` with the larger study setting (config/config.gpu.yaml: 32 seeds) in WORK/big; its
#           cases include every case of the default config (same seeds, more of them);
#   warm    the default `all` in WORK/warm, after cold or big: the Triton and CUDA caches are warm, and
#           the folder starts with the step before's .rescore-cache (as a second run in the same
#           checkout after `rm -rf results`);
#   warm2   the same again in WORK/warm2 (a warm run after big can still compile a few kernels);
#   corpus  scripts/gpu/gpu_corpus.py: every trigger, CUDA C and GPU-only classes included (the 2^31
#           ones first), cut at CORPUS_TIMEOUT seconds (default 900);
#   phases  bench/case_phases.py on the GPU for five Triton entries (milliseconds per case by phase,
#           in one process), into WORK/phases.txt (phases2: the same into WORK/phases2.txt);
#   ext     `all` with EXT_CONFIG (a config file of the user's own dumps, e.g. the external dumps
#           carried in the checkout) as config.yaml, in WORK/ext; extwarm, extwarm2: the same again,
#           warm (caches as for warm); extg the same with its own file (EXT_CONFIG_DIR/<step>.yaml
#           when EXT_CONFIG_DIR is set, for every ext step);
#   fixtures scripts/gpu/wild_exploits.py: every GPU fixture with its expected outcome and cause, then
#           under compute-sanitizer (FIXTURE_TOOLS, default "memcheck racecheck"; FIXTURE_ONLY: some
#           fixtures by name, e.g. "unset_accumulator slack_write shared_race" with FIXTURE_TOOLS
#           "memcheck racecheck initcheck"), into WORK/fixtures/wild_exploits.md, cut at
#           FIXTURES_TIMEOUT seconds (default 900);
#   wait    waits for the steps started beside (so that the steps after it are timed alone).
#   mgwarm, mg1, mgall, mgreport   several GPUs (scripts/gpu/multi_gpu.sh, which sets them up): a
#           warm-up on every GPU, the check stage on one GPU and on all of them, the figures.
# STEPS (default "corpus& cold wait warm warm2") picks and orders them; a step written NAME& runs
# beside the steps after it (the corpus triggers beside the cold run: only the warm runs are timed).
# Each step's tables and logs are packed as it ends (scripts/gpu/pack_steps.py: WORK/packs/STEP.tgz),
# and each call copies the finished packs into $OUT while it watches (until WATCH_S seconds have
# passed or the steps are done), then adds a partial pack of a step still running (its shard files:
# `tools/partial_tables.py WORK/big/results`) and status.tgz (driver.log, watch.txt, machine.txt,
# MANIFEST.txt), within one call's limits: at most 8 files of 15 MiB, 60 MB in all. So a lease that
# ends mid-step still returns what exists, and a call cut short returns the steps finished before.
# PYTHON (default python3) runs everything; DRY=1 makes every pipeline step a dry run (snakemake -n).
# Where .whl/ holds wheels and PYTHON has no snakemake (the GPU image has none) they are installed first; where
# RESCORE_CUDA_CACHE_TGZ names a tarball of a CUDA build cache it is unpacked into /tmp.
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
WATCH=${1:?usage: scripts/gpu/gpu_lease.sh WATCH_SECONDS}
export WORK=${WORK:-/tmp/rescore-lease} STEPS=${STEPS:-corpus\& cold wait warm warm2}
. scripts/gpu/snapshot.sh
snapshot_checkout || { echo "gpu_lease.sh: could not copy the checkout into $WORK/repo" >&2; exit 2; }
export REPO=$PWD
export RESCORE_CUDA_CACHE=${RESCORE_CUDA_CACHE:-/tmp/rescore-cuda} PYTHONUNBUFFERED=1 PYTHON=${PYTHON:-python3}
if ls .whl/*.whl >/dev/null 2>&1 && [ ! -d /tmp/site/snakemake ] && ! "$PYTHON" -c "import snakemake" 2>/dev/null; then
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
fi
[ -d /tmp/site ] && export PYTHONPATH=/tmp/site:$REPO/src || export PYTHONPATH=$REPO/src
if [ -n "${RESCORE_CUDA_CACHE_TGZ:-}" ] && [ ! -d "$RESCORE_CUDA_CACHE" ]; then
  cat $RESCORE_CUDA_CACHE_TGZ | tar -xz -C /tmp
fi
mkdir -p "$WORK"
# the host's CPU model too: the harness's time is mostly the CPU's, and hosts of one GPU kind differ
{ date -u; nvidia-smi -L; nproc; grep -m1 "model name" /proc/cpuinfo; "$PYTHON" -c "import sys, torch, triton; print(sys.version.split()[0], torch.__version__, triton.__version__)"; compute-sanitizer --version | tail -1; } > "$WORK/machine.txt" 2>&1

if ! { [ -f "$WORK/driver.pid" ] && kill -0 "$(cat "$WORK/driver.pid")" 2>/dev/null; } && [ ! -f "$WORK/all.done" ]; then
  setsid nohup bash scripts/gpu/gpu_lease_steps.sh > "$WORK/driver.out" 2>&1 < /dev/null &
  echo $! > "$WORK/driver.pid"; echo "$(date -u +%T) steps (re)started: $STEPS" >> "$WORK/driver.log"
fi
until [ "$(el)" -ge "$WATCH" ] || ! kill -0 "$(cat "$WORK/driver.pid")" 2>/dev/null; do
  line="$(date -u +%T)"
  for s in cold big warm warm2 ext extg extwarm extwarm2 mgwarm mg1 mgall; do line="$line $s $(find "$WORK/$s/results/cases" -name '*.parquet' 2>/dev/null | wc -l)"; done
  # the device's busy share and memory at the sample: whether the GPU or the host's CPU is the bound
  gpu=$(nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader,nounits 2>/dev/null | head -1 | tr -d ' ')
  # submissions with cases skipped as harness faults (rescore's own bug: any at all voids the run's verdicts)
  faults=$(cat "$WORK"/*/results/logs/check/*/shard-*.log 2>/dev/null | grep -c "skipped as harness faults")
  echo "$line shards; triton $(ls ~/.triton/cache 2>/dev/null | wc -l); load $(cut -d' ' -f1 /proc/loadavg); gpu ${gpu:-none} (util %,MiB); harness faults $faults" >> "$WORK/watch.txt"
  "$PYTHON" scripts/gpu/pack_steps.py finished "$WORK" "$OUT" 2>> "$WORK/driver.log"
  # a sample every 15 s, but the call returns within a second of the steps' end (device time counts)
  for _ in $(seq 15); do kill -0 "$(cat "$WORK/driver.pid")" 2>/dev/null && [ "$(el)" -lt "$WATCH" ] || break; sleep 1; done
done
for s in cold big warm warm2 ext extg extwarm extwarm2 mgwarm mg1 mgall; do [ -d "$WORK/$s" ] && tail -30 "$WORK/$s/snakemake.out" > "$WORK/$s.snakemake.tail"; done
"$PYTHON" scripts/gpu/pack_steps.py out "$WORK" "$OUT"
cat "$WORK/driver.log"; tail -3 "$WORK/watch.txt"
