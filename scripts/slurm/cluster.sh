#!/usr/bin/env bash
# Throwaway Slurm cluster on one host (munge + MariaDB + slurmdbd + slurmctld +
# two slurmd) for tests and CI.  See scripts/slurm/README.md.
#
#   cluster.sh install              # apt-get install the packages (idempotent)
#   cluster.sh start  [STATE_DIR]   # wipe STATE_DIR, start everything, wait idle
#   cluster.sh stop   [STATE_DIR]   # stop everything started from STATE_DIR
#   cluster.sh status [STATE_DIR]   # sinfo/squeue; exit 1 if not up
#
# Everything (configs, keys, sockets, databases, spool, logs, pid files) lives
# under STATE_DIR, default ${PROOFGRID_SLURM_DIR:-/tmp/proofgrid-slurm}.
set -euo pipefail

# ---------------------------------------------------------------- settings ---
# Advertised node size.  The node pretends to have this many CPUs / this much
# memory (SlurmdParameters=config_overrides), so several small jobs run side by
# side even on a 2-core CI box.  Nothing enforces the limits (no cgroups).
NODE_CPUS="${PROOFGRID_SLURM_CPUS:-16}"
NODE_MEM_MB="${PROOFGRID_SLURM_MEM_MB:-16000}"
DEF_MEM_PER_CPU="${PROOFGRID_SLURM_DEF_MEM_PER_CPU:-$((NODE_MEM_MB / NODE_CPUS))}"
PARTITION="${PROOFGRID_SLURM_PARTITION:-debug}"
CLUSTER_NAME="${PROOFGRID_SLURM_CLUSTER:-proofgrid}"
# A second node on the same host, alone in a partition of its own that is not
# the default: only tests that take a node down (NODE_FAIL) submit there, so
# downing it never touches a job of another test.
FAIL_NODE="${PROOFGRID_SLURM_FAIL_NODE:-nodefail1}"
FAIL_PARTITION="${PROOFGRID_SLURM_FAIL_PARTITION:-nodefail}"
# Private ports, away from the Slurm defaults (6817-6819) and MySQL's 3306 so
# that a system-wide Slurm/MariaDB on the same machine does not collide.
PORT_BASE="${PROOFGRID_SLURM_PORT_BASE:-16817}"
CTLD_PORT=$((PORT_BASE))
SLURMD_PORT=$((PORT_BASE + 1))
DBD_PORT=$((PORT_BASE + 2))
DB_PORT=$((PORT_BASE + 3))
FAIL_SLURMD_PORT=$((PORT_BASE + 4))   # the second node's slurmd
START_TIMEOUT="${PROOFGRID_SLURM_START_TIMEOUT:-120}"   # seconds, per wait
# Credential lifetime.  It is also the delay before a requeued job may start
# again (Slurm default 120 s; minimum 5).
CRED_EXPIRE="${PROOFGRID_SLURM_CRED_EXPIRE:-10}"

PACKAGES=(munge slurm-wlm slurm-client slurmd slurmctld slurmdbd mariadb-server mariadb-client)
MARKER_FILE=".proofgrid-slurm"   # marks a directory as ours (safe to wipe)

# ----------------------------------------------------------------- helpers ---
log() { printf '[cluster.sh] %s\n' "$*" >&2; }
die() { printf '[cluster.sh] error: %s\n' "$*" >&2; exit 1; }

# Set the per-state-dir path variables.
set_paths() {
    STATE_DIR="${1:-${PROOFGRID_SLURM_DIR:-/tmp/proofgrid-slurm}}"
    [[ "$STATE_DIR" == /* ]] || STATE_DIR="$PWD/$STATE_DIR"
    STATE_DIR="${STATE_DIR%/}"
    [[ -n "$STATE_DIR" && "$STATE_DIR" != "/" ]] || die "refusing to use '/' as state dir"
    ETC="$STATE_DIR/etc"
    LOG="$STATE_DIR/log"
    RUN="$STATE_DIR/run"
    SLURM_CONF_PATH="$ETC/slurm.conf"
    DBD_CONF_PATH="$ETC/slurmdbd.conf"   # slurmdbd looks for it beside $SLURM_CONF
    MUNGE_DIR="$STATE_DIR/munge"
    MUNGE_SOCKET="$MUNGE_DIR/munge.socket"
    MUNGE_KEY="$MUNGE_DIR/munge.key"
    DB_DIR="$STATE_DIR/mysql"
    DB_SOCKET="$RUN/mysqld.sock"
    # Every daemon we launch carries this variable in its environment.  `stop`
    # uses it to find stragglers (e.g. slurmstepd) whose pid files are gone.
    OWNER_TAG="PROOFGRID_SLURM_OWNER=$STATE_DIR"
}

host_short() { hostname -s 2>/dev/null || uname -n | cut -d. -f1; }

need_cmd() {
    local c
    for c in "$@"; do
        command -v "$c" >/dev/null 2>&1 || die "'$c' not found; run: $0 install"
    done
}

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# wait_for DESCRIPTION COMMAND... : retry COMMAND until it succeeds or timeout.
wait_for() {
    local what="$1" deadline=$((SECONDS + START_TIMEOUT))
    shift
    until "$@" >/dev/null 2>&1; do
        ((SECONDS < deadline)) || die "timed out after ${START_TIMEOUT}s waiting for $what (logs: $LOG)"
        sleep 0.5
    done
}

# True if PID exists and is not a zombie (orphans are reaped lazily by some
# container init processes).
pid_alive() {
    [[ -n "${1:-}" ]] && kill -0 "$1" 2>/dev/null &&
        ! grep -qs '^State:[[:space:]]*Z' "/proc/$1/status"
}
pidfile_pid() { if [[ -s "$1" ]]; then tr -dc '0-9' <"$1"; fi; }

# Pids of processes whose environment carries our OWNER_TAG (our daemons and
# the slurmstepd they spawned), plus all their descendants (job processes).
tagged_pids() {
    local envf pid tagged=()
    for envf in /proc/[0-9]*/environ; do
        pid="${envf#/proc/}"; pid="${pid%/environ}"
        [[ "$pid" == "$$" ]] && continue
        grep -qzxF "$OWNER_TAG" "$envf" 2>/dev/null && tagged+=("$pid")
    done
    ((${#tagged[@]})) || return 0
    ps -e -o pid=,ppid= | awk -v roots="${tagged[*]}" '
        BEGIN { n = split(roots, r, " "); for (i = 1; i <= n; i++) keep[r[i]] = 1 }
        { parent[$1] = $2 }
        END {
            do { changed = 0
                 for (p in parent) if (!(p in keep) && (parent[p] in keep)) { keep[p] = 1; changed = 1 }
            } while (changed)
            for (p in keep) print p
        }'
}

# stop_pids GRACE NAME:PID... : SIGTERM them all, wait up to GRACE seconds,
# SIGKILL the rest, then give init a moment to reap them (so that pgrep right
# after `stop` finds nothing).
stop_pids() {
    local grace="$1" item name pid i left
    shift
    for item in "$@"; do
        name="${item%%:*}"; pid="${item#*:}"
        pid_alive "$pid" || continue
        log "stopping $name (pid $pid)"
        kill -TERM "$pid" 2>/dev/null || true
    done
    for ((i = 0; i < grace * 10; i++)); do
        left=""
        for item in "$@"; do pid_alive "${item#*:}" && left+=" $item"; done
        [[ -z "$left" ]] && break
        sleep 0.1
    done
    for item in $left; do
        log "${item%%:*} (pid ${item#*:}) ignored SIGTERM; sending SIGKILL"
        kill -KILL "${item#*:}" 2>/dev/null || true
    done
    for ((i = 0; i < 50; i++)); do
        left=""
        for item in "$@"; do kill -0 "${item#*:}" 2>/dev/null && left+=" $item"; done
        [[ -z "$left" ]] && break
        sleep 0.1
    done
}

# stop_daemons NAME... : stop the daemons named by $RUN/NAME.pid together.
stop_daemons() {
    local name items=()
    for name in "$@"; do
        items+=("$name:$(pidfile_pid "$RUN/$name.pid")")
    done
    stop_pids 20 "${items[@]}"
    for name in "$@"; do rm -f "$RUN/$name.pid"; done
}

# ----------------------------------------------------------------- install ---
cmd_install() {
    local missing=() p
    for p in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing+=("$p")
    done
    if ((${#missing[@]} == 0)); then
        log "all packages already installed"
        return 0
    fi
    [[ $EUID -eq 0 ]] || die "install must run as root"
    log "installing: ${missing[*]}"
    # The maintainer scripts would start munge/mariadb/slurm* system services.
    # A policy-rc.d that exits 101 forbids that.  If one already exists (Docker
    # images ship one) it is backed up and restored afterwards; ours is
    # removed on exit so later package operations behave normally.
    local policy=/usr/sbin/policy-rc.d backup=""
    if [[ -e "$policy" ]]; then
        backup="$(mktemp /tmp/policy-rc.d.XXXXXX)"
        cp -p "$policy" "$backup"
    fi
    # shellcheck disable=SC2064
    trap "restore_policy '$policy' '$backup'" EXIT
    printf '#!/bin/sh\n# written by proofgrid scripts/slurm/cluster.sh install\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -q --no-install-recommends "${missing[@]}" >/tmp/proofgrid-slurm-install.log 2>&1; then
        log "apt-get install failed; retrying after apt-get update"
        apt-get update -q >>/tmp/proofgrid-slurm-install.log 2>&1 || true
        apt-get install -y -q --no-install-recommends "${missing[@]}" >>/tmp/proofgrid-slurm-install.log 2>&1 ||
            die "apt-get install failed, see /tmp/proofgrid-slurm-install.log"
    fi
    log "installed (log: /tmp/proofgrid-slurm-install.log)"
}

restore_policy() {
    local policy="$1" backup="$2"
    if [[ -n "$backup" ]]; then
        cp -p "$backup" "$policy" && rm -f "$backup"
    else
        rm -f "$policy"
    fi
}

# ------------------------------------------------------------ config files ---
write_configs() {
    local host
    host="$(host_short)"
    cat >"$SLURM_CONF_PATH" <<EOF
# Generated by proofgrid scripts/slurm/cluster.sh -- throwaway test cluster.
ClusterName=$CLUSTER_NAME
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET,cred_expire=$CRED_EXPIRE
CredType=cred/munge
StateSaveLocation=$STATE_DIR/ctld
# Two slurmd on one host: each needs its own spool dir, pid and log file
# (%n = the node name the slurmd was started for with -N).
SlurmdSpoolDir=$STATE_DIR/slurmd/%n
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd-%n.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
# No cgroups needed (containers, CI runners).
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
MpiDefault=none
ReturnToService=2
# Scheduling: start jobs at once (batch_sched_delay/sched_min_interval), run
# the full scheduler every second so jobs that merely become eligible (e.g.
# requeued ones, after cred_expire) start without waiting up to 60 s; reject
# impossible requests at submit time instead of leaving them pending forever.
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,sched_interval=1,bf_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
EnforcePartLimits=ALL
DefMemPerCPU=$DEF_MEM_PER_CPU
JobRequeue=1
InactiveLimit=0
KillWait=5
MinJobAge=300
# Accounting (sacct) is required: without it submitit cannot tell that a
# cancelled/killed job is finished and job.result() waits forever.
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$DBD_PORT
AccountingStoragePass=$MUNGE_SOCKET
JobCompType=jobcomp/none
# The node advertises NODE_CPUS/NODE_MEM_MB whatever the hardware has.
SlurmdParameters=config_overrides
NodeName=$host NodeAddr=127.0.0.1 CPUs=$NODE_CPUS Boards=1 SocketsPerBoard=1 CoresPerSocket=$NODE_CPUS ThreadsPerCore=1 RealMemory=$NODE_MEM_MB State=UNKNOWN
# The node tests take down: same host, its own slurmd port.
NodeName=$FAIL_NODE NodeHostname=$host NodeAddr=127.0.0.1 Port=$FAIL_SLURMD_PORT CPUs=$NODE_CPUS Boards=1 SocketsPerBoard=1 CoresPerSocket=$NODE_CPUS ThreadsPerCore=1 RealMemory=$NODE_MEM_MB State=UNKNOWN
PartitionName=$PARTITION Nodes=$host Default=YES MaxTime=INFINITE State=UP
PartitionName=$FAIL_PARTITION Nodes=$FAIL_NODE Default=NO MaxTime=INFINITE State=UP
EOF
    cat >"$DBD_CONF_PATH" <<EOF
# Generated by proofgrid scripts/slurm/cluster.sh -- throwaway test cluster.
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
DbdHost=localhost
DbdPort=$DBD_PORT
SlurmUser=root
PidFile=$RUN/slurmdbd.pid
LogFile=$LOG/slurmdbd.log
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=slurm
StorageLoc=slurm_acct_db
EOF
    chmod 600 "$DBD_CONF_PATH"   # slurmdbd insists: mode 600, owned by SlurmUser
    chmod 644 "$SLURM_CONF_PATH"
}

# ----------------------------------------------------------------- daemons ---
start_munge() {
    mkdir -p "$MUNGE_DIR"
    chmod 755 "$MUNGE_DIR"   # non-root clients must reach the socket
    if command -v mungekey >/dev/null 2>&1; then
        mungekey --create --keyfile="$MUNGE_KEY" >/dev/null
    else
        dd if=/dev/urandom of="$MUNGE_KEY" bs=1024 count=1 status=none
    fi
    chmod 400 "$MUNGE_KEY"
    log "starting munged"
    env "$OWNER_TAG" munged \
        --socket="$MUNGE_SOCKET" --key-file="$MUNGE_KEY" \
        --pid-file="$RUN/munged.pid" --log-file="$LOG/munged.log" \
        --seed-file="$MUNGE_DIR/munged.seed" --force `# tolerate odd parent-dir perms` \
        || die "munged failed to start (see $LOG/munged.log)"
    wait_for "munge" sh -c "munge -n -S '$MUNGE_SOCKET' | unmunge -S '$MUNGE_SOCKET'"
}

# shellcheck disable=SC2120  # args come via wait_for
db_client() { mariadb --no-defaults --protocol=socket --socket="$DB_SOCKET" -uroot "$@"; }

start_mariadb() {
    mkdir -p "$DB_DIR"
    log "initialising MariaDB datadir"
    mariadb-install-db --no-defaults --user=root --datadir="$DB_DIR" \
        --auth-root-authentication-method=socket --skip-test-db \
        >"$LOG/mariadb-install-db.log" 2>&1 ||
        die "mariadb-install-db failed (see $LOG/mariadb-install-db.log)"
    log "starting mariadbd on 127.0.0.1:$DB_PORT"
    # Private instance: own datadir, socket, pid file and port; loopback only.
    env "$OWNER_TAG" mariadbd --no-defaults --user=root \
        --datadir="$DB_DIR" --socket="$DB_SOCKET" --pid-file="$RUN/mariadbd.pid" \
        --port="$DB_PORT" --bind-address=127.0.0.1 --skip-name-resolve \
        --log-error="$LOG/mariadbd.log" \
        --innodb-log-file-size=64M \
        --innodb-lock-wait-timeout=900 --max-allowed-packet=16M \
        </dev/null >/dev/null 2>&1 &
    disown
    wait_for "mariadbd" db_client -e 'SELECT 1'
    db_client <<'SQL'
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm';
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurm';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
FLUSH PRIVILEGES;
SQL
}

start_slurmdbd() {
    log "starting slurmdbd"
    env "$OWNER_TAG" SLURM_CONF="$SLURM_CONF_PATH" slurmdbd \
        >"$LOG/slurmdbd.stdout" 2>&1 || die "slurmdbd failed to start (see $LOG/slurmdbd.log)"
    wait_for "slurmdbd" sacctmgr -n list cluster
    sacctmgr -i add cluster "$CLUSTER_NAME" >/dev/null ||
        die "sacctmgr add cluster failed (see $LOG/slurmdbd.log)"
}

start_slurmctld() {
    log "starting slurmctld"
    env "$OWNER_TAG" SLURM_CONF="$SLURM_CONF_PATH" slurmctld -f "$SLURM_CONF_PATH" \
        >"$LOG/slurmctld.stdout" 2>&1 || die "slurmctld failed to start (see $LOG/slurmctld.log)"
    wait_for "slurmctld" scontrol ping
}

# start_slurmd NODE : the slurmd of NODE (-N: two slurmd share this host).
start_slurmd() {
    local node="$1"
    mkdir -p "$STATE_DIR/slurmd/$node"
    log "starting slurmd for node $node"
    env "$OWNER_TAG" SLURM_CONF="$SLURM_CONF_PATH" slurmd -f "$SLURM_CONF_PATH" -N "$node" \
        >"$LOG/slurmd-$node.stdout" 2>&1 || die "slurmd for $node failed to start (see $LOG/slurmd-$node.log)"
}

# Node names in slurm.conf, one a line.
conf_nodes() { sed -n 's/^NodeName=\([^ ]*\).*/\1/p' "$SLURM_CONF_PATH"; }

# Pid-file names (under $RUN, without .pid) of the slurmd daemons that
# slurm.conf defines: one per node with %n in SlurmdPidFile, else one.
slurmd_pid_names() {
    local pidfile="" node
    [[ -f "$SLURM_CONF_PATH" ]] && pidfile="$(sed -n 's/^SlurmdPidFile=//p' "$SLURM_CONF_PATH")"
    if [[ "$pidfile" == *%n* ]]; then
        for node in $(conf_nodes); do
            pidfile_name "${pidfile//%n/$node}"
        done
    else
        pidfile_name "${pidfile:-$RUN/slurmd.pid}"
    fi
}
pidfile_name() { local base="${1##*/}"; echo "${base%.pid}"; }

# Run one trivial batch job end to end (munge -> slurmctld -> slurmd ->
# slurmstepd -> slurmdbd -> sacct).  Also gets past slurmctld's first
# scheduling pass, which otherwise delays the first user job by ~2 s.
smoke_job() {
    local id
    id="$(sbatch --parsable --job-name=proofgrid-smoke --output=/dev/null --chdir=/ --wrap true)" ||
        die "smoke job submission failed (logs: $LOG)"
    wait_for "smoke job $id to show COMPLETED in sacct" \
        sh -c "sacct -n -X -P -j '$id' -o State | grep -qx COMPLETED"
}

# Every node idle (both lines of sinfo, no other state).
node_idle() {
    local states
    states="$(sinfo -h -N -o '%N %T' 2>/dev/null)" || return 1
    [[ "$(grep -c ' idle$' <<<"$states")" == "$(conf_nodes | wc -l)" ]]
}

write_env() {
    cat >"$STATE_DIR/env.sh" <<EOF
export SLURM_CONF=$SLURM_CONF_PATH
export PROOFGRID_SLURM_DIR=$STATE_DIR
export PROOFGRID_SLURM_PARTITION=$PARTITION
export PROOFGRID_SLURM_CPUS=$NODE_CPUS
export PROOFGRID_SLURM_MEM_MB=$NODE_MEM_MB
export PROOFGRID_SLURM_FAIL_PARTITION=$FAIL_PARTITION
export PROOFGRID_SLURM_FAIL_NODE=$FAIL_NODE
EOF
}

# ---------------------------------------------------------------- commands ---
cmd_start() {
    set_paths "${1:-}"
    need_cmd munged munge unmunge mariadbd mariadb mariadb-install-db \
        slurmdbd slurmctld slurmd sacctmgr sacct sbatch sinfo squeue scontrol
    [[ $EUID -eq 0 ]] || die "start must run as root (daemons run as root)"
    local t0=$SECONDS p
    if [[ -e "$STATE_DIR" ]]; then
        if [[ -n "$(ls -A "$STATE_DIR")" && ! -e "$STATE_DIR/$MARKER_FILE" ]]; then
            die "$STATE_DIR exists, is not empty and was not created by this script; refusing to wipe it"
        fi
        cmd_stop "$STATE_DIR" >/dev/null
        rm -rf "$STATE_DIR"
    fi
    for p in "$CTLD_PORT" "$SLURMD_PORT" "$DBD_PORT" "$DB_PORT" "$FAIL_SLURMD_PORT"; do
        port_in_use "$p" && die "port $p is in use (set PROOFGRID_SLURM_PORT_BASE to move ports $PORT_BASE..$((PORT_BASE + 4)))"
    done
    mkdir -p "$ETC" "$LOG" "$RUN" "$STATE_DIR/ctld" "$STATE_DIR/slurmd"
    touch "$STATE_DIR/$MARKER_FILE"
    export SLURM_CONF="$SLURM_CONF_PATH"
    write_configs
    start_munge
    start_mariadb
    start_slurmdbd
    start_slurmctld
    start_slurmd "$(host_short)"
    start_slurmd "$FAIL_NODE"
    wait_for "nodes $(host_short) and $FAIL_NODE to become idle" node_idle
    smoke_job
    write_env
    log "cluster up in $((SECONDS - t0))s: partition=$PARTITION cpus=$NODE_CPUS mem=${NODE_MEM_MB}MB (+ $FAIL_PARTITION: $FAIL_NODE)"
    cat "$STATE_DIR/env.sh"
}

cmd_stop() {
    set_paths "${1:-}"
    if [[ ! -d "$STATE_DIR" ]]; then
        log "nothing to stop: $STATE_DIR does not exist"
        return 0
    fi
    export SLURM_CONF="$SLURM_CONF_PATH"
    # Cancel jobs first so slurmstepd and job processes go away cleanly.
    if pid_alive "$(pidfile_pid "$RUN/slurmctld.pid")"; then
        local ids i
        ids="$(squeue -h -o %A 2>/dev/null || true)"
        if [[ -n "$ids" ]]; then
            log "cancelling jobs: ${ids//$'\n'/ }"
            # shellcheck disable=SC2086
            scancel $ids 2>/dev/null || true
            for ((i = 0; i < 40; i++)); do
                [[ -z "$(squeue -h -o %A 2>/dev/null)" ]] && break
                sleep 0.25
            done
        fi
    fi
    # Slurm daemons first (slurmctld flushes job records to slurmdbd), then
    # slurmdbd, then what it depends on.
    # shellcheck disable=SC2046  # one word per daemon
    stop_daemons $(slurmd_pid_names) slurmctld
    stop_daemons slurmdbd
    stop_daemons mariadbd munged
    # Anything else we launched (slurmstepd, a daemon whose pid file was lost).
    local pid items=()
    for pid in $(tagged_pids); do
        items+=("$(cat "/proc/$pid/comm" 2>/dev/null || echo process):$pid")
    done
    ((${#items[@]} == 0)) || stop_pids 3 "${items[@]}"
    log "stopped ($STATE_DIR kept for inspection; 'start' wipes it)"
}

cmd_status() {
    set_paths "${1:-}"
    [[ -f "$SLURM_CONF_PATH" ]] || die "no cluster at $STATE_DIR"
    export SLURM_CONF="$SLURM_CONF_PATH"
    local name pid up=0
    # shellcheck disable=SC2046  # one word per daemon
    for name in munged mariadbd slurmdbd slurmctld $(slurmd_pid_names); do
        pid="$(pidfile_pid "$RUN/$name.pid")"
        if pid_alive "$pid"; then
            printf '%-10s running (pid %s)\n' "$name" "$pid"
        else
            printf '%-10s NOT running\n' "$name"
            up=1
        fi
    done
    # Client commands block for a while when slurmctld is gone; skip them then.
    pid_alive "$(pidfile_pid "$RUN/slurmctld.pid")" || return 1
    sinfo -N -o '%N %P %T %c %m' || up=1
    squeue || up=1
    # Only the default partition's node decides: the second node is down
    # while a NODE_FAIL test runs, and the cluster is up all the same.
    sinfo -h -N -p "$(default_partition)" -o %T | grep -qE '^(idle|mixed|allocated|completing)$' || up=1
    return "$up"
}

default_partition() { sed -n 's/^PartitionName=\([^ ]*\) .*Default=YES.*/\1/p' "$SLURM_CONF_PATH"; }

usage() {
    sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
    exit "${1:-0}"
}

main() {
    local cmd="${1:-}"
    shift || true
    case "$cmd" in
        install) cmd_install "$@" ;;
        start) cmd_start "$@" ;;
        stop) cmd_stop "$@" ;;
        status) cmd_status "$@" ;;
        -h | --help | help) usage 0 ;;
        *) usage 2 >&2 ;;
    esac
}

main "$@"
