#!/usr/bin/env bash
# The GPU measurements behind the README, on one CUDA machine, from the repository root:
#
#   scripts/gpu/h200.sh OUTDIR [throughput] [pipeline] [corpus]     (no step named: all three)
#
# throughput: fuzz cases per second for relu_triton at sizes up to 1M elements (float64 reference
#             included), 8 and 16 workers;
# pipeline:   `snakemake --cores $PIPE_CORES all` (default 16) from a clean results folder, with
#             PIPE_PROFILE (e.g. gpu: the larger study setting) and PIPE_ARGS (more snakemake options)
#             when set; its tables, figures, logs and shard files are packed into OUTDIR/results.tar.gz
#             (also when PIPE_TIMEOUT cuts it short: then `tools/partial_tables.py` makes the tables);
# corpus:     every buggy variant (Triton and CUDA C) on its trigger, its control on the same input.
#
# Each step writes its JSON and log to OUTDIR and a failed step does not stop the next.
# PIPE_TIMEOUT (seconds, default 540) bounds the pipeline step, TP_TIMEOUT (default 180) each
# throughput run, TP_WORKERS (default "8 16") picks the worker counts, CORPUS_TIMEOUT (default 400)
# bounds the corpus step.
set -u
OUT=${1:?usage: scripts/gpu/h200.sh OUTDIR [throughput] [pipeline] [corpus]}
shift
STEPS=${*:-throughput pipeline corpus}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export RESCORE_CUDA_CACHE=${RESCORE_CUDA_CACHE:-/tmp/rescore-cuda}  # shared by every step: one build each
{ date -u; nvidia-smi -L; python3 -c "import sys, torch, triton; print(sys.version.split()[0], torch.__version__, triton.__version__)"; } >>"$OUT/machine.txt" 2>&1

for step in $STEPS; do
  echo "== $step $(date -u +%T)" >>"$OUT/steps.txt"
  case $step in
    throughput)
      for w in ${TP_WORKERS:-8 16}; do
        timeout "${TP_TIMEOUT:-180}" python3 bench/pipeline_bench.py throughput --device cuda --workers $w --cases $((w * 500)) \
          --entry relu_triton --out "$OUT/throughput-$w.json" >>"$OUT/steps.txt" 2>&1
      done ;;
    pipeline)
      before=$(ls -d /tmp/rescore-bench-* 2>/dev/null)
      timeout "${PIPE_TIMEOUT:-540}" python3 bench/pipeline_bench.py pipeline --cores "${PIPE_CORES:-16}" \
        ${PIPE_PROFILE:+--profile "$PIPE_PROFILE"} --snakemake-args "${PIPE_ARGS:-}" \
        --out "$OUT/pipeline.json" >"$OUT/pipeline.log" 2>&1
      echo "pipeline exit $?" >>"$OUT/steps.txt"
      work=$(comm -13 <(echo "$before") <(ls -d /tmp/rescore-bench-* 2>/dev/null) | tail -1)
      # the shard files and the manifest too: a run cut short still gives its tables through
      # `tools/partial_tables.py results` here
      [ -n "$work" ] && tar -czf "$OUT/results.tar.gz" -C "$work" --exclude='*.workers' --ignore-failed-read \
        results/tables results/papers results/figures results/logs results/corpus.md results/cases \
        results/ingest 2>>"$OUT/steps.txt" ;;
    corpus)
      timeout "${CORPUS_TIMEOUT:-400}" python3 scripts/gpu/gpu_corpus.py --workers 8 --out "$OUT/gpu_corpus.json" >"$OUT/gpu_corpus.log" 2>&1
      echo "corpus exit $?" >>"$OUT/steps.txt" ;;
  esac
done
echo "== done $(date -u +%T)" >>"$OUT/steps.txt"
