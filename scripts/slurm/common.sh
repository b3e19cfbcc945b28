# shellcheck shell=bash
# What cluster.sh and multinode.sh share: the state-dir layout, the package install, the daemons that run
# in the machine's own network namespace (munged, MariaDB, slurmdbd, slurmctld) and how everything is
# stopped.  Sourced, not run.  See scripts/slurm/README.md.
#
# The sourcing script sets LOG_TAG (its name, for messages), START_TIMEOUT, CLUSTER_NAME, DBD_PORT and
# DB_PORT, and calls set_state_paths before anything that needs a path.

log() { printf '[%s] %s\n' "$LOG_TAG" "$*" >&2; }
die() { printf '[%s] error: %s\n' "$LOG_TAG" "$*" >&2; exit 1; }

# set_state_paths DIR : the per-state-dir path variables.
set_state_paths() {
    STATE_DIR="$1"
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

# stop_stragglers : anything else we launched (slurmstepd, job processes, a
# daemon whose pid file was lost).
stop_stragglers() {
    local pid items=()
    for pid in $(tagged_pids); do
        items+=("$(cat "/proc/$pid/comm" 2>/dev/null || echo process):$pid")
    done
    ((${#items[@]} == 0)) || stop_pids 3 "${items[@]}"
}

# cancel_jobs : scancel every job of the cluster (SLURM_CONF set) and wait up
# to 10 s for the queue to drain, so slurmstepd and job processes go away
# cleanly before the daemons stop.
cancel_jobs() {
    pid_alive "$(pidfile_pid "$RUN/slurmctld.pid")" || return 0
    local ids i
    ids="$(squeue -h -o %A 2>/dev/null || true)"
    [[ -n "$ids" ]] || return 0
    log "cancelling jobs: ${ids//$'\n'/ }"
    # shellcheck disable=SC2086
    scancel $ids 2>/dev/null || true
    for ((i = 0; i < 40; i++)); do
        [[ -z "$(squeue -h -o %A 2>/dev/null)" ]] && break
        sleep 0.25
    done
}

# reset_state_dir MARKER STOP_FUNCTION : stop what a previous start left in
# STATE_DIR and wipe it, but only if MARKER says this script made it; then
# make the empty layout and mark it.
reset_state_dir() {
    local marker="$1" stop_fn="$2"
    if [[ -e "$STATE_DIR" ]]; then
        if [[ -n "$(ls -A "$STATE_DIR")" && ! -e "$STATE_DIR/$marker" ]]; then
            die "$STATE_DIR exists, is not empty and was not created by this script; refusing to wipe it"
        fi
        ("$stop_fn" "$STATE_DIR") >/dev/null   # a subshell: what it reads back from the dir stays there
        rm -rf "$STATE_DIR"
    fi
    mkdir -p "$ETC" "$LOG" "$RUN" "$STATE_DIR/ctld" "$STATE_DIR/slurmd"
    touch "$STATE_DIR/$marker"
}

# ----------------------------------------------------------------- install ---
# install_packages LOGFILE PACKAGE... : apt-get install what is missing.
install_packages() {
    local logfile="$1" missing=() p
    shift
    for p in "$@"; do
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
    printf '#!/bin/sh\n# written by proofgrid scripts/slurm/%s install\nexit 101\n' "$LOG_TAG" >"$policy"
    chmod 755 "$policy"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -q --no-install-recommends "${missing[@]}" >"$logfile" 2>&1; then
        log "apt-get install failed; retrying after apt-get update"
        apt-get update -q >>"$logfile" 2>&1 || true
        apt-get install -y -q --no-install-recommends "${missing[@]}" >>"$logfile" 2>&1 ||
            die "apt-get install failed, see $logfile"
    fi
    log "installed (log: $logfile)"
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
write_slurmdbd_conf() {
    cat >"$DBD_CONF_PATH" <<EOF
# Generated by proofgrid scripts/slurm/$LOG_TAG -- throwaway test cluster.
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
    # Private instance: own datadir, socket, pid file and port; loopback only.  A throwaway database
    # need not survive a crash: the log is flushed once a second, not at every commit (a 1,000-task
    # array of tiny jobs: sacct has every task COMPLETED 4 s after squeue is empty, not 8-13 s).
    env "$OWNER_TAG" mariadbd --no-defaults --user=root \
        --datadir="$DB_DIR" --socket="$DB_SOCKET" --pid-file="$RUN/mariadbd.pid" \
        --port="$DB_PORT" --bind-address=127.0.0.1 --skip-name-resolve \
        --log-error="$LOG/mariadbd.log" \
        --innodb-log-file-size=64M --innodb-flush-log-at-trx-commit=0 \
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
