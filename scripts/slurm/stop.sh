#!/usr/bin/env bash
# Stop the local SLURM cluster that scripts/slurm/start.sh started: cancel its jobs, then stop
# slurmd, slurmctld, slurmdbd, mariadbd and (if start.sh started it) munged, each by the pid in
# its pid file. Safe to call when nothing runs.
#
#   bash scripts/slurm/stop.sh           # stop; keep state (accounting database, job ids, logs)
#   bash scripts/slurm/stop.sh --purge   # stop, then delete the state directory and the
#                                        # /etc/slurm config files start.sh wrote
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$here/common.sh"

purge=0
case ${1:-} in
--purge) purge=1 ;;
"") ;;
*) die "usage: stop.sh [--purge]" ;;
esac
[[ $(id -u) == 0 ]] || die "run as root"
export PATH=$PATH:/usr/sbin:/sbin

if pid_alive "$RUN/slurmctld.pid" slurmctld && command -v squeue >/dev/null; then
    jobs=$(squeue -h -o %A 2>/dev/null | tr '\n' ' ' || true)
    if [[ -n ${jobs// /} ]]; then
        log "cancelling jobs: $jobs"
        # shellcheck disable=SC2086
        scancel $jobs 2>/dev/null || true
        no_jobs() { [[ -z $(squeue -h -o %A 2>/dev/null) ]]; }
        wait_for 30 jobs no_jobs || log "some jobs are still listed; stopping anyway"
    fi
fi
stop_pidfile "$RUN/slurmd.pid" slurmd
stop_pidfile "$RUN/slurmctld.pid" slurmctld
stop_pidfile "$RUN/slurmdbd.pid" slurmdbd
stop_pidfile "$RUN/mariadbd.pid" mariadbd
if [[ -e $RUN/munged.ours ]]; then
    stop_pidfile /run/munge/munged.pid munged
    rm -f "$RUN/munged.ours"
fi

if ((purge)); then
    for f in "$SLURM_CONF_FILE" "$DBD_CONF_FILE"; do
        if [[ -e $f ]] && ours "$f"; then rm -f "$f"; fi
    done
    case $STATE in
    / | /var | /var/lib | /tmp | "") die "refusing to delete STATE=$STATE" ;;
    esac
    rm -rf "$STATE"
    log "purged $STATE"
fi
log "stopped"
