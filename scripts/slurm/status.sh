#!/usr/bin/env bash
# Show the state of the local SLURM cluster of scripts/slurm/start.sh: its daemons, sinfo, and
# where the logs are. Exit 0 if the node answers, 1 otherwise.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$here/common.sh"
export PATH=$PATH:/usr/sbin:/sbin

show() {
    if pid_alive "$2" "$1"; then
        printf '%-10s running (pid %s)\n' "$1" "$(read_pid "$2")"
    else
        printf '%-10s not running\n' "$1"
    fi
}
show munged /run/munge/munged.pid
show mariadbd "$RUN/mariadbd.pid"
show slurmdbd "$RUN/slurmdbd.pid"
show slurmctld "$RUN/slurmctld.pid"
show slurmd "$RUN/slurmd.pid"
echo "logs:      $LOG"
command -v sinfo >/dev/null || { echo "sinfo: not installed"; exit 1; }
sinfo -N -o '%N %P %T %c %m' || exit 1
