#!/usr/bin/env bash
# The detached half of scripts/gpu/gpu_lease.sh: runs $STEPS in $WORK one after another (see there).
set -u
PY=${PYTHON:-python3}
log() { echo "$(date -u +%T) $*" >> "$WORK/driver.log"; }
pipe() {  # step name, then snakemake targets and options
  local name=$1; shift
  local d=$WORK/$name t rc
  mkdir -p "$d"; [ -d "$d/config" ] || cp -r "$REPO/config" "$d/config"
  # ext steps: the user's own config (EXT_CONFIG) replaces config.yaml, as a user pointing rescore at
  # downloaded dumps would
  # (EXT_CONFIG_DIR: each ext step's own file, EXT_CONFIG_DIR/<step>.yaml)
  case $name in ext*) cp "${EXT_CONFIG_DIR:+$EXT_CONFIG_DIR/$name.yaml}${EXT_CONFIG_DIR:-$EXT_CONFIG}" "$d/config/config.yaml" ;; esac
  case $name in mg*) cp "$MG_CONFIG" "$d/config/mg.yaml" ;; esac  # scripts/gpu/multi_gpu.sh's overlay
  # The checkout's own caches (static PTX, generated modules) come from the step before, as for a
  # second run in the same checkout after `rm -rf results`; ~/.triton and the CUDA builds are shared.
  local prev; prev=$(ls -td "$WORK"/*/.rescore-cache 2>/dev/null | head -1)
  [ -n "$prev" ] && [ ! -d "$d/.rescore-cache" ] && cp -r "$prev" "$d/.rescore-cache"
  log "$name start"; t=$(date +%s)
  (cd "$d" && "$PY" -m snakemake -s "$REPO/Snakefile" -d "$d" --cores "${CORES:-16}" --keep-going --rerun-incomplete \
     ${DRY:+-n} "$@" \
     > "$d/snakemake.out" 2>&1)
  rc=$?
  log "$name end rc=$rc wall=$(( $(date +%s) - t )) s triton_cache=$(ls ~/.triton/cache 2>/dev/null | wc -l)"
}
step() {  # one step, then its .done mark
  case $1 in
    cold|warm|warm2) pipe "$1" all --config shards=48 ;;
    ext|extwarm|extwarm2|extg) pipe "$1" all --config shards=48 ;;
    corpus)
      log "corpus start"; local t=$(date +%s)
      timeout "${CORPUS_TIMEOUT:-900}" "$PY" "$REPO/scripts/gpu/gpu_corpus.py" --workers 8 --race-repeats 3 \
        --out "$WORK/gpu_corpus.json" > "$WORK/gpu_corpus.log" 2>&1
      log "corpus end rc=$? wall=$(( $(date +%s) - t )) s" ;;
    # scripts/gpu/multi_gpu.sh: a warm-up on every GPU, then the same check stage (MG_TARGET) on one
    # GPU and on all of them, nvidia-smi sampled beside each, then the figures (multi_gpu.py)
    mgwarm) pipe mgwarm "${MG_TARGET:-results/tables/cases.parquet}" --configfile config/config.yaml config/mg.yaml --config shards="${MG_SHARDS:-48}" gpus="$MG_GPUS" ;;
    mg1|mgall)
      mkdir -p "$WORK/$1"
      nvidia-smi --query-gpu=timestamp,index,name,utilization.gpu,memory.used --format=csv,noheader \
        -lms "${SAMPLE_MS:-500}" > "$WORK/$1/smi.csv" 2>&1 &
      local smi=$!
      if [ "$1" = mg1 ]; then
        CUDA_VISIBLE_DEVICES=${MG_ONE_GPU:-0} pipe mg1 "${MG_TARGET:-results/tables/cases.parquet}" \
          --configfile config/config.yaml config/mg.yaml --config shards="${MG_SHARDS:-48}" gpus=1
      else
        pipe mgall "${MG_TARGET:-results/tables/cases.parquet}" --configfile config/config.yaml config/mg.yaml --config shards="${MG_SHARDS:-48}" gpus="$MG_GPUS"
      fi
      kill "$smi" 2>/dev/null ;;
    mgreport) "$PY" "$REPO/scripts/gpu/multi_gpu.py" "$WORK" > "$WORK/mgreport.out" 2>&1; log "mgreport rc=$?" ;;
    big) pipe big all --configfile config/config.yaml config/config.gpu.yaml --config shards=48 ;;
    phases|phases2)  # where a case's time goes, in one process (phases2: again, after the runs compiled)
      log "$1 start"
      "$PY" "$REPO/bench/case_phases.py" --device cuda --cases 32 relu_triton layernorm_triton \
        embedding_triton matmul_triton attention_triton > "$WORK/$1.txt" 2>&1
      log "$1 end rc=$?" ;;
    extphases)  # where a fuzz case's time goes on the GPU, in one process, for CUDA-L1 kernels the ext step ingested
      mkdir -p "$WORK/extphases"; log "extphases start"; local t=$(date +%s) rc=2
      local manifest=$WORK/ext/results/ingest/cudal1/manifest.json
      if [ -f "$manifest" ]; then
        timeout "${PHASES_TIMEOUT:-240}" "$PY" "$REPO/bench/case_phases.py" --device cuda --cases 32 --profile 25 \
          --manifest "$manifest" ${PHASES_ENTRIES:-level2/task59 level2/task82 level1/task57 level1/task43} \
          > "$WORK/extphases/case_phases.txt" 2>&1
        rc=$?
      else
        echo "no $manifest: the ext step ran first? (a dry run ingests nothing)" > "$WORK/extphases/case_phases.txt"
      fi
      log "extphases end rc=$rc wall=$(( $(date +%s) - t )) s" ;;
    fixtures)  # every GPU fixture, expected outcome and cause, then each under the sanitizer's tools
      mkdir -p "$WORK/fixtures"; log "fixtures start"; local t=$(date +%s)
      timeout "${FIXTURES_TIMEOUT:-900}" "$PY" "$REPO/scripts/gpu/wild_exploits.py" --sanitize ${FIXTURE_TOOLS:-memcheck racecheck} \
        ${FIXTURE_ONLY:+--only $FIXTURE_ONLY} \
        --log-dir "$WORK/fixtures/logs" > "$WORK/fixtures/wild_exploits.md" 2> "$WORK/fixtures/wild_exploits.err"
      log "fixtures end rc=$? wall=$(( $(date +%s) - t )) s" ;;
    loop)  # `rescore check` on a kernel that never returns: flagged in both oracles, and how long it took
      mkdir -p "$WORK/loop"; log "loop start"; local t=$(date +%s)
      timeout 300 "$PY" -m rescore.cli check "$REPO/tests/fixtures/toy/problem_scale.py" \
        "$REPO/tests/fixtures/hacks/infinite_loop.py" --device cuda --json "$WORK/loop/check.json" \
        > "$WORK/loop/check.out" 2>&1
      log "loop end rc=$? wall=$(( $(date +%s) - t )) s" ;;
    wait) log "waiting for the steps beside"; wait; log "waited" ;;
    *) log "unknown step $1" ;;
  esac
  touch "$WORK/$1.done"
  # its tables and logs packed now (scripts/gpu/pack_steps.py), so a lease that ends later still returns them
  [ -d "$WORK/$1" ] && "$PY" "$REPO/scripts/gpu/pack_steps.py" step "$WORK" "$1" >> "$WORK/driver.log" 2>&1
}
for s in $STEPS; do  # a step written NAME& runs beside the ones after it
  name=${s%&}
  [ -f "$WORK/$name.done" ] && [ "$name" != wait ] && continue
  if [ "$name" != "$s" ]; then step "$name" & else step "$name"; fi
done
wait
touch "$WORK/all.done"; log "steps done"
