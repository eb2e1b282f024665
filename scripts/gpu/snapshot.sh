# Sourced by measure_external.sh and gpu_lease.sh: the steps run from a copy of the checkout in
# WORK/repo, made by the first call and entered by every later one. Each call of the device tool sends
# the working tree again, and a file replaced under a running step breaks it (a check shard starting
# while the package was being copied failed to import it); the copy also keeps one run on one version
# of the code. Left out: what no step reads (git's store, a local environment, results, caches).
snapshot_checkout() {
  local snap=$WORK/repo
  [ "$PWD" = "$snap" ] && return 0
  if [ ! -d "$snap" ]; then
    mkdir -p "$snap.tmp" || return 1
    tar -C "$PWD" --exclude=./.git --exclude=./.venv --exclude=./results --exclude=./.snakemake \
      --exclude=./.rescore-cache --exclude=./logs --exclude=./docs -cf - . | tar -C "$snap.tmp" -xf - \
      && mv "$snap.tmp" "$snap" || return 1
  fi
  cd "$snap" || return 1
}
