#!/usr/bin/env bash
# Issue 29's GPU measurement in one command: the loop check, the README's two external dumps cold,
# then warm, then every GPU fixture with compute-sanitizer (verified on an H100 and an H200 by now:
# last, so that the cold and warm runs, the figures still unmet, get the session first). Made for a device session of 30 minutes in calls of at
# most 10: run the same command in each call, back to back (a machine goes back 30 s after a call),
# from the repository root:
#
#   scripts/gpu/measure_external.sh GPUEMU_DATA CUDAL1_JSON [WATCH_S]
#
# GPUEMU_DATA: the gpuemu corpus's data/ folder; CUDAL1_JSON: CUDA-L1's h100_xsm.json; both inside
# the checkout in a folder the call carries (scripts/gpu/README.md). WATCH_S (default 540): seconds
# this call watches before it packs, under the call's 600.
#
# The first call writes WORK/external.yaml (scripts/gpu/external_config.py: config/config.yaml with
# these dumps, sanitizer.budget_s = SANITIZER_BUDGET, default 120) and starts the steps detached
# (scripts/gpu/gpu_lease.sh, STEPS "loop ext extphases extwarm fixtures", one after another):
#   loop      `rescore check` on tests/fixtures/hacks/infinite_loop.py (flagged in both oracles, its wall time);
#   ext       `snakemake all --config shards=48` on it in WORK/ext: the dumps' caches empty (cold);
#   extphases bench/case_phases.py --device cuda --profile 25 on four CUDA-L1 PyTorch kernels the ext step
#             ingested (PHASES_ENTRIES): a fuzz case's phases on the GPU, in one process (a minute);
#   extwarm   the same in WORK/extwarm: the Triton and CUDA caches warm, the checkout's .rescore-cache
#             from ext (its results cache too: README, "Warm runs"), an empty results folder (warm);
#   fixtures  scripts/gpu/wild_exploits.py --sanitize memcheck racecheck (at most FIXTURES_TIMEOUT,
#             default here 600 s).
# A later call finds them running and watches. Each step is packed as it ends; every call returns
# in $OUT status.tgz (driver.log: each step's start, end, exit code and wall seconds; watch.txt;
# MANIFEST.txt), the packs of the steps finished so far (ext.tgz, extwarm.tgz, fixtures.tgz) and a
# partial pack of the step running; under 60 MB, at most 8 files (scripts/gpu/pack_steps.py).
# WORK (default /tmp/rescore-measure), PYTHON, DRY=1 (every pipeline step `snakemake -n`: a dry
# run on any machine), FIXTURES_TIMEOUT and FIXTURE_TOOLS as in gpu_lease.sh.
set -u
GPUEMU=${1:?usage: scripts/gpu/measure_external.sh GPUEMU_DATA CUDAL1_JSON [WATCH_S]}
CUDAL1=${2:?usage: scripts/gpu/measure_external.sh GPUEMU_DATA CUDAL1_JSON [WATCH_S]}
WATCH=${3:-540}
export WORK=${WORK:-/tmp/rescore-measure} STEPS=${STEPS:-loop ext extphases extwarm fixtures} PYTHON=${PYTHON:-python3}
export FIXTURES_TIMEOUT=${FIXTURES_TIMEOUT:-600}
export EXT_CONFIG=$WORK/external.yaml
. scripts/gpu/snapshot.sh
snapshot_checkout || { echo "measure_external.sh: could not copy the checkout into $WORK/repo" >&2; exit 2; }
if [ ! -f "$EXT_CONFIG" ]; then
  "$PYTHON" scripts/gpu/external_config.py "$GPUEMU" "$CUDAL1" --out "$EXT_CONFIG" \
    --sanitizer-budget "${SANITIZER_BUDGET:-120}" || exit 2
fi
exec bash scripts/gpu/gpu_lease.sh "$WATCH"
