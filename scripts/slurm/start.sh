#!/usr/bin/env bash
# Start a real single-node SLURM cluster on this machine (Debian's slurm-wlm + munge, and
# slurmdbd on a private MariaDB for sacct), for testing the slurm profile. Needs root.
#
#   bash scripts/slurm/start.sh        # installs what is missing, starts what is not running,
#                                      # returns once `sinfo` shows this node idle
#   bash scripts/slurm/stop.sh [--purge]
#
# Safe to call twice: running daemons are left alone, missing ones are started. No systemd:
# the daemons are started directly. No cgroups: proctrack/linuxproc, task/none.
# Settings (environment): see scripts/slurm/common.sh (RESCORE_SLURM_STATE, _PARTITION,
# _ACCOUNT, _ACCOUNTING=slurmdbd|none, _DB_PORT, _WAIT_S, _FORCE=1, _CPUS, _MEM_MB).
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$here/common.sh"

[[ $(id -u) == 0 ]] || die "run as root (it installs packages and starts system daemons)"
t0=$SECONDS

# --- 1. packages ------------------------------------------------------------------------------
need=(slurmctld slurmd slurm-client munge)
cmds=(slurmctld slurmd munged sinfo sbatch sacct)
if [[ $ACCOUNTING == slurmdbd ]]; then
    need+=(slurmdbd mariadb-server)
    cmds+=(slurmdbd mariadbd mariadb-install-db)
elif [[ $ACCOUNTING != none ]]; then
    die "RESCORE_SLURM_ACCOUNTING must be slurmdbd or none, not '$ACCOUNTING'"
fi
missing=0
for c in "${cmds[@]}"; do
    PATH=$PATH:/usr/sbin:/sbin command -v "$c" >/dev/null || missing=1
done
if ((missing)); then
    log "installing ${need[*]} (apt-get)"
    # Keep dpkg from starting the packages' own services (no systemd here; and the system
    # MariaDB is not the one we run).
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod 755 /usr/sbin/policy-rc.d
        trap 'rm -f /usr/sbin/policy-rc.d' EXIT
    fi
    export DEBIAN_FRONTEND=noninteractive
    aptlog=${TMPDIR:-/tmp}/rescore-slurm-apt.log
    apt-get -o DPkg::Lock::Timeout=300 update -qq >"$aptlog" 2>&1 ||
        { cat "$aptlog" >&2; die "apt-get update failed"; }
    apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "${need[@]}" \
        >>"$aptlog" 2>&1 || { tail -30 "$aptlog" >&2; die "apt-get install failed"; }
    log "installed in $((SECONDS - t0)) s"
fi
export PATH=$PATH:/usr/sbin:/sbin

mkdir -p "$STATE" "$RUN" "$LOG" "$STATE/spool/slurmctld" "$STATE/spool/slurmd" "$CONF_DIR"
chmod 755 "$STATE" "$RUN" "$LOG"

# --- 2. munge ---------------------------------------------------------------------------------
if [[ ! -s /etc/munge/munge.key ]]; then
    log "creating /etc/munge/munge.key"
    install -d -o munge -g munge -m 700 /etc/munge
    runuser -u munge -- mungekey --create --keyfile=/etc/munge/munge.key
fi
install -d -o munge -g munge -m 755 /run/munge
install -d -o munge -g munge -m 700 /var/lib/munge /var/log/munge
if ! pid_alive /run/munge/munged.pid munged; then
    log "starting munged"
    rm -f /run/munge/munged.pid /run/munge/munge.socket.2
    runuser -u munge -- /usr/sbin/munged --pid-file=/run/munge/munged.pid
    touch "$RUN/munged.ours" # stop.sh stops munged only if this script started it
fi
munge_ok() { munge -n | unmunge; }
wait_for 30 munge munge_ok || die "munged does not answer (see /var/log/munge/munged.log)"

# --- 3. config files --------------------------------------------------------------------------
for f in "$SLURM_CONF_FILE" "$DBD_CONF_FILE"; do
    if ! ours "$f" && [[ ${RESCORE_SLURM_FORCE:-0} != 1 ]]; then
        die "$f exists and was not written by this script; refusing to overwrite it" \
            "(move it away, or set RESCORE_SLURM_FORCE=1)"
    fi
done

# This node's hardware as slurmd sees it (CPUs, sockets, cores, threads, RealMemory).
hw=$(slurmd -C | head -1 | sed -e 's/^NodeName=[^ ]* //')
[[ -n ${RESCORE_SLURM_CPUS:-} ]] && hw="CPUs=$RESCORE_SLURM_CPUS RealMemory=${hw##*RealMemory=}"
[[ -n ${RESCORE_SLURM_MEM_MB:-} ]] && hw="${hw% RealMemory=*} RealMemory=$RESCORE_SLURM_MEM_MB"

if [[ $ACCOUNTING == slurmdbd ]]; then
    acct_lines="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=6819
# sacct shows the job comment (the plugin puts the rule or group name there)
AccountingStoreFlags=job_comment
JobCompType=jobcomp/none"
else
    acct_lines="AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$LOG/jobcomp.txt"
fi

new_conf=$(
    cat <<EOF
$MARKER (do not edit: rewritten on start)
ClusterName=$CLUSTER
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CryptoType=crypto/munge
MpiDefault=none
# No cgroups (they are not usable in every container): track job processes by parent pid.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=10
$acct_lines
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1000
ReturnToService=2
# Keep finished jobs visible to squeue for 10 minutes (the plugin's squeue status mode wants
# at least 120 s).
MinJobAge=600
MaxArraySize=1001
KillWait=10
InactiveLimit=0
SlurmctldTimeout=120
SlurmdTimeout=300
MailProg=/bin/true
StateSaveLocation=$STATE/spool/slurmctld
SlurmdSpoolDir=$STATE/spool/slurmd
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
NodeName=$NODE NodeAddr=127.0.0.1 $hw State=UNKNOWN
PartitionName=$PARTITION Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
)
conf_changed=0
if [[ ! -f $SLURM_CONF_FILE ]] || [[ $(cat "$SLURM_CONF_FILE") != "$new_conf" ]]; then
    printf '%s\n' "$new_conf" >"$SLURM_CONF_FILE"
    chmod 644 "$SLURM_CONF_FILE"
    conf_changed=1
    log "wrote $SLURM_CONF_FILE ($NODE: $hw)"
fi

# --- 4. accounting: MariaDB + slurmdbd --------------------------------------------------------
if [[ $ACCOUNTING == slurmdbd ]]; then
    if [[ ! -d $DB_DATA/mysql ]]; then
        log "initialising MariaDB in $DB_DATA"
        rm -rf "$DB_DATA"
        install -d -o mysql -g mysql -m 750 "$DB_DATA"
        mariadb-install-db --no-defaults --user=mysql --datadir="$DB_DATA" \
            --auth-root-authentication-method=socket --skip-test-db \
            >"$LOG/mariadb-install.log" 2>&1 ||
            { cat "$LOG/mariadb-install.log" >&2; die "mariadb-install-db failed"; }
    fi
    chown mysql:mysql "$RUN" 2>/dev/null || true
    chmod 755 "$RUN"
    if ! pid_alive "$RUN/mariadbd.pid" mariadbd; then
        log "starting mariadbd on 127.0.0.1:$DB_PORT"
        rm -f "$DB_SOCK" "$RUN/mariadbd.pid"
        setsid /usr/sbin/mariadbd --no-defaults --user=mysql --datadir="$DB_DATA" \
            --socket="$DB_SOCK" --pid-file="$RUN/mariadbd.pid" --log-error="$LOG/mariadb.log" \
            --bind-address=127.0.0.1 --port="$DB_PORT" --skip-name-resolve \
            --innodb-buffer-pool-size=64M --innodb-log-file-size=48M \
            --innodb-lock-wait-timeout=900 --max-allowed-packet=16M \
            </dev/null >/dev/null 2>&1 &
    fi
    db_ok() { mariadb-admin --no-defaults --socket="$DB_SOCK" -uroot ping; }
    wait_for "$WAIT_S" mariadb db_ok || { tail -30 "$LOG/mariadb.log" >&2; die "mariadbd did not start"; }

    if [[ ! -s $STATE/dbpass ]]; then
        (umask 077 && head -c 18 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' >"$STATE/dbpass")
    fi
    pass=$(cat "$STATE/dbpass")
    mariadb --no-defaults --socket="$DB_SOCK" -uroot <<EOF
CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$pass';
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$pass';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
EOF

    new_dbd=$(
        cat <<EOF
$MARKER (do not edit: rewritten on start)
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=6819
SlurmUser=root
DebugLevel=info
LogFile=$LOG/slurmdbd.log
PidFile=$RUN/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=$pass
StorageLoc=slurm_acct_db
EOF
    )
    if [[ ! -f $DBD_CONF_FILE ]] || [[ $(cat "$DBD_CONF_FILE") != "$new_dbd" ]]; then
        (umask 077 && printf '%s\n' "$new_dbd" >"$DBD_CONF_FILE")
        chmod 600 "$DBD_CONF_FILE"
        stop_pidfile "$RUN/slurmdbd.pid" slurmdbd
    fi
    if ! pid_alive "$RUN/slurmdbd.pid" slurmdbd; then
        log "starting slurmdbd"
        slurmdbd
    fi
    dbd_ok() { sacctmgr -n -P show cluster format=cluster; }
    wait_for "$WAIT_S" slurmdbd dbd_ok || { tail -30 "$LOG/slurmdbd.log" >&2; die "slurmdbd did not start"; }
    # The cluster, an account and root's association, so that `slurm_account=$ACCOUNT` (or no
    # account at all) is accepted and the plugin's account checks (sacctmgr) answer.
    if [[ -z $(sacctmgr -n -P show cluster "$CLUSTER" format=cluster) ]]; then
        sacctmgr -i add cluster "$CLUSTER" >/dev/null
    fi
    if [[ -z $(sacctmgr -n -P show account "$ACCOUNT" format=account) ]]; then
        sacctmgr -i add account "$ACCOUNT" Cluster="$CLUSTER" Description="rescore tests" \
            Organization=rescore >/dev/null
    fi
    for u in root ${SUDO_USER:-}; do
        if [[ -z $(sacctmgr -n -P show assoc where user="$u" account="$ACCOUNT" format=user) ]]; then
            sacctmgr -i add user "$u" Account="$ACCOUNT" DefaultAccount="$ACCOUNT" >/dev/null
        fi
    done
else
    stop_pidfile "$RUN/slurmdbd.pid" slurmdbd
fi

# --- 5. slurmctld and slurmd ------------------------------------------------------------------
if ((conf_changed)); then
    stop_pidfile "$RUN/slurmd.pid" slurmd
    stop_pidfile "$RUN/slurmctld.pid" slurmctld
fi
if ! pid_alive "$RUN/slurmctld.pid" slurmctld; then
    log "starting slurmctld"
    slurmctld
fi
ctld_ok() { scontrol ping | grep -q 'is UP'; }
wait_for "$WAIT_S" slurmctld ctld_ok || { tail -30 "$LOG/slurmctld.log" >&2; die "slurmctld did not start"; }

if ! pid_alive "$RUN/slurmd.pid" slurmd; then
    log "starting slurmd"
    slurmd
fi

node_state() { sinfo -h -N -n "$NODE" -o %T 2>/dev/null | head -1; }
node_idle() {
    local s
    s=$(node_state)
    case $s in
    idle | mixed | allocated | completing) return 0 ;;
    down* | drain* | fail*) scontrol update NodeName="$NODE" State=RESUME >/dev/null 2>&1 || true ;;
    esac
    return 1
}
wait_for "$WAIT_S" node node_idle || {
    tail -20 "$LOG/slurmd.log" >&2
    sinfo -N -l >&2 || true
    die "node $NODE is not up (state: $(node_state))"
}
log "cluster '$CLUSTER' up in $((SECONDS - t0)) s: partition '$PARTITION', node $NODE ($(node_state))"
sinfo
