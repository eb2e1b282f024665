#!/usr/bin/env bash
# with-gpu.sh CMD [ARGS...]: run CMD on one GPU of its own: CUDA_VISIBLE_DEVICES is set to a GPU
# that no other with-gpu.sh command holds, and the claim lasts as long as CMD runs.
#
# Why: Snakemake counts GPUs (`--resources gpu=N` with rules declaring `resources: gpu=1`) but
# never says WHICH GPU a local job should use, so N jobs on one machine would all land on GPU 0.
# Under SLURM this is not needed (Slurm sets CUDA_VISIBLE_DEVICES for a job that asked for
# --gpus), and this script then runs CMD unchanged.
#
#   RESCORE_GPUS=N            how many GPUs to share (default: count of `nvidia-smi -L`)
#   RESCORE_GPU_LOCK_DIR=DIR  where the per-GPU lock files live (default /tmp/rescore-gpu-locks)
#   RESCORE_GPU_WAIT_S=S      how long to wait for a free GPU before failing (default 3600)
set -euo pipefail
(($# > 0)) || { echo "usage: with-gpu.sh CMD [ARGS...]" >&2; exit 2; }

if [[ -n ${SLURM_JOB_ID:-} && -n ${CUDA_VISIBLE_DEVICES:-} ]]; then
    exec "$@" # Slurm already chose
fi

n=${RESCORE_GPUS:-}
if [[ -z $n ]]; then
    n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
fi
if ((n == 0)); then
    exec "$@" # no GPU: nothing to choose (the code runs on CPU or skips)
fi

dir=${RESCORE_GPU_LOCK_DIR:-/tmp/rescore-gpu-locks}
mkdir -p "$dir"
deadline=$((SECONDS + ${RESCORE_GPU_WAIT_S:-3600}))
while :; do
    for ((i = 0; i < n; i++)); do
        exec {fd}>>"$dir/gpu$i.lock"
        if flock -n "$fd"; then
            # The lock stays held through exec: CMD (and its children) inherit the descriptor.
            export CUDA_VISIBLE_DEVICES=$i
            exec "$@"
        fi
        exec {fd}>&-
    done
    ((SECONDS < deadline)) || { echo "with-gpu.sh: no free GPU among $n after waiting" >&2; exit 75; }
    sleep 1
done
