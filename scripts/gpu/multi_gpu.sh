#!/usr/bin/env bash
# Several GPUs of one host (issue 23), on nvidia-h200-x2 or larger, from the repository root:
#
#   scripts/gpu/multi_gpu.sh WATCH_S        (each call: start or watch the steps, then pack; call again
#                                            until WORK/all.done, as scripts/gpu/gpu_lease.sh)
#
# The built-in corpus and CUDA-L1's levels 1 and 2 (CUDAL1_JSON, default the shared external dump)
# go through the check stage (MG_TARGET, default results/tables/cases.parquet) three times, with
# MG_SHARDS shards (48) on all the host's cores: `mgwarm` on every GPU fills the Triton and CUDA
# caches; `mg1` is the warm run on one GPU (CUDA_VISIBLE_DEVICES=MG_ONE_GPU, `gpus=1`) and `mgall` the
# warm run on every GPU (`gpus=N`), each with nvidia-smi sampled every SAMPLE_MS (500) into
# WORK/<step>/smi.csv; `mgreport` writes both wall times, the speedup and each GPU's busy time
# (sampled, and its shards' seconds from the check logs) to WORK/multi_gpu.{md,json}
# (scripts/gpu/multi_gpu.py), which are copied to $OUT.
set -u
WATCH=${1:?usage: scripts/gpu/multi_gpu.sh WATCH_SECONDS}
export WORK=${WORK:-/tmp/rescore-multi-gpu}
MG_GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ "$MG_GPUS" -lt 2 ]; then
  echo "scripts/gpu/multi_gpu.sh: this machine has $MG_GPUS GPU(s); it measures several GPUs: run it on nvidia-h200-x2 or larger" >&2
  exit 2
fi
CUDAL1=${CUDAL1_JSON:-}
for c in shared/external/cudal1-h100-l1l2.json ../shared/external/cudal1-h100-l1l2.json; do
  [ -z "$CUDAL1" ] && [ -f "$c" ] && CUDAL1=$(cd "$(dirname "$c")" && pwd)/$(basename "$c")
done
if [ -z "$CUDAL1" ] || [ ! -f "$CUDAL1" ]; then
  echo "scripts/gpu/multi_gpu.sh: no CUDA-L1 dump (cudal1-h100-l1l2.json) under shared/external or ../shared/external; set CUDAL1_JSON" >&2
  exit 2
fi
mkdir -p "$WORK"
export MG_GPUS MG_CONFIG=$WORK/mg.json CORES=${CORES:-$(nproc)}
export STEPS=${STEPS:-mgwarm mg1 mgall mgreport}
# An overlay on config/config.yaml (JSON is YAML): its corpus dump, and CUDA-L1 beside it, on CUDA.
printf '{"device": "cuda", "dumps": {"cudal1": {"format": "cudal1", "path": "%s", "levels": [1, 2]}}}\n' \
  "$CUDAL1" > "$MG_CONFIG"
bash scripts/gpu/gpu_lease.sh "$WATCH"
rc=$?
cp "$WORK/multi_gpu.md" "$WORK/multi_gpu.json" "$OUT/" 2>/dev/null && cat "$WORK/multi_gpu.md"
exit $rc
