#!/usr/bin/env bash
# Throwaway MULTI-NODE Slurm cluster on one host: every compute node is a Linux network namespace with
# its own address, hostname and slurmd, joined by a private bridge that reaches nothing outside the
# machine; munged, MariaDB, slurmdbd and slurmctld run in the machine's own namespace.  For tests and CI
# of jobs that span nodes (srun, torch.distributed).  See scripts/slurm/README.md.
#
#   multinode.sh install                     # apt-get install the packages (idempotent)
#   multinode.sh start  [STATE_DIR]          # wipe STATE_DIR, build the nodes, start everything, wait idle
#   multinode.sh stop   [STATE_DIR]          # stop everything, delete the namespaces, veths and bridge
#   multinode.sh status [STATE_DIR]          # daemons, nodes, sinfo/squeue; exit 1 if not all up
#   multinode.sh kill-node NODE [STATE_DIR]  # crash NODE: link down, every process on it killed
#   multinode.sh restart-node NODE [STATE_DIR]  # link up, its slurmd again, wait until it is idle
#   multinode.sh block-ports NODE FIRST-LAST [STATE_DIR]  # drop TCP to those ports arriving from the other nodes
#   multinode.sh unblock-ports NODE [STATE_DIR]  # lift block-ports
#
# Everything (configs, keys, sockets, databases, spool, logs, pid files, the record of the network it
# made) lives under STATE_DIR, default ${PROOFGRID_MULTINODE_DIR:-/tmp/proofgrid-multinode}.
set -euo pipefail

# ---------------------------------------------------------------- settings ---
NODE_COUNT="${PROOFGRID_MULTINODE_NODE_COUNT:-3}"   # a 2-node job plus a spare for node-failure tests
# Advertised per node (SlurmdParameters=config_overrides): several small jobs fit side by side on each
# node of a 2-core machine.  Nothing enforces the limits (no cgroups).
NODE_CPUS="${PROOFGRID_MULTINODE_CPUS:-8}"
NODE_MEM_MB="${PROOFGRID_MULTINODE_MEM_MB:-8000}"
DEF_MEM_PER_CPU="${PROOFGRID_MULTINODE_DEF_MEM_PER_CPU:-$((NODE_MEM_MB / NODE_CPUS))}"
PARTITION="${PROOFGRID_MULTINODE_PARTITION:-mn}"
CLUSTER_NAME="${PROOFGRID_MULTINODE_CLUSTER:-proofgrid-mn}"
NODE_PREFIX="${PROOFGRID_MULTINODE_NODE_PREFIX:-mn}"   # node i is <prefix><i>: its NodeName and hostname
# Private ports, clear of cluster.sh's defaults (16817..16821) and of Slurm's and MySQL's own.  The
# slurmd port is bound inside each node's namespace, the other three in the machine's.
PORT_BASE="${PROOFGRID_MULTINODE_PORT_BASE:-16917}"
CTLD_PORT=$((PORT_BASE))
SLURMD_PORT=$((PORT_BASE + 1))
DBD_PORT=$((PORT_BASE + 2))
DB_PORT=$((PORT_BASE + 3))
# The private /24 (its first three octets): the bridge (the controller's side) is .1, node i is .(10+i).
SUBNET="${PROOFGRID_MULTINODE_SUBNET:-10.217.17}"
# Names of the network devices and namespaces: bridge <net>br, node namespace <net>-<node>, the node's
# veth end on the bridge <net>-<node>h (Linux device names: 15 characters at most).
NET_NAME="${PROOFGRID_MULTINODE_NET_NAME:-pgmn}"
START_TIMEOUT="${PROOFGRID_MULTINODE_START_TIMEOUT:-120}"   # seconds, per wait
# Credential lifetime: also the delay before a requeued job may start again (Slurm default 120 s).
CRED_EXPIRE="${PROOFGRID_MULTINODE_CRED_EXPIRE:-10}"
# A node that does not answer slurmctld's pings for this long is DOWN and its jobs end NODE_FAIL
# (Slurm default 300 s).  slurmctld pings every SlurmdTimeout/3 s.
SLURMD_TIMEOUT="${PROOFGRID_MULTINODE_SLURMD_TIMEOUT:-10}"
# How long an RPC waits for an answer (Slurm default 10 s).  slurmctld's ping of a dead node waits this
# long (refused connections are retried as long) before the node counts as not responding: a crashed
# node's job ends NODE_FAIL about 18 s after the crash with 10/5, 27 s with 10/10 (measured).
MESSAGE_TIMEOUT="${PROOFGRID_MULTINODE_MESSAGE_TIMEOUT:-5}"

PACKAGES=(munge slurm-wlm slurm-client slurmd slurmctld slurmdbd mariadb-server mariadb-client iproute2 util-linux nftables)
MARKER_FILE=".proofgrid-multinode"   # marks a directory as ours (safe to wipe); not cluster.sh's marker
NETWORK_FILE="network.env"           # what `start` built, read back by `stop` and the node commands

# ----------------------------------------------------------------- helpers ---
LOG_TAG="multinode.sh"
# shellcheck source=scripts/slurm/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

set_paths() {
    set_state_paths "${1:-${PROOFGRID_MULTINODE_DIR:-/tmp/proofgrid-multinode}}"
    HOSTS_PATH="$ETC/hosts"   # bind-mounted on /etc/hosts inside the node namespaces only
}

cmd_install() { install_packages /tmp/proofgrid-multinode-install.log "${PACKAGES[@]}"; }

# The network this script would build now, from the settings.
plan_network() {
    local i
    [[ "$NODE_COUNT" =~ ^[0-9]+$ ]] && ((NODE_COUNT >= 2)) || die "PROOFGRID_MULTINODE_NODE_COUNT must be 2 or more, not '$NODE_COUNT'"
    [[ "$SUBNET" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "PROOFGRID_MULTINODE_SUBNET is the first three octets of a /24 (10.217.17), not '$SUBNET'"
    BRIDGE="${NET_NAME}br"
    CTL_ADDR="$SUBNET.1"
    NODE_NAMES=()
    for ((i = 1; i <= NODE_COUNT; i++)); do NODE_NAMES+=("$NODE_PREFIX$i"); done
    ((${#NET_NAME} + 1 + ${#NODE_NAMES[-1]} + 1 <= 15)) || die "PROOFGRID_MULTINODE_NET_NAME '$NET_NAME' is too long for a device name"
}

# The network a start from STATE_DIR built (false if it built none).
load_network() {
    [[ -f "$STATE_DIR/$NETWORK_FILE" ]] || return 1
    # shellcheck source=/dev/null
    source "$STATE_DIR/$NETWORK_FILE"
    read -r -a NODE_NAMES <<<"$NODE_NAMES_LIST"
}

save_network() {
    cat >"$STATE_DIR/$NETWORK_FILE" <<EOF
NET_NAME=$NET_NAME
BRIDGE=$BRIDGE
SUBNET=$SUBNET
CTL_ADDR=$CTL_ADDR
NODE_NAMES_LIST="${NODE_NAMES[*]}"
EOF
}

node_netns() { echo "$NET_NAME-$1"; }
node_veth() { echo "$NET_NAME-$1h"; }   # the node's end on the bridge; eth0 inside the node
node_addr() {
    local i
    for ((i = 0; i < ${#NODE_NAMES[@]}; i++)); do
        [[ "${NODE_NAMES[i]}" == "$1" ]] && { echo "$SUBNET.$((11 + i))"; return 0; }
    done
    return 1
}
known_node() { node_addr "$1" >/dev/null || die "no node '$1' in this cluster (nodes: ${NODE_NAMES[*]})"; }

# ----------------------------------------------------------------- network ---
# Refuse a /24, bridge or namespace that is already in use here: nothing is ever added to what this
# script did not make.
check_network_free() {
    local node routes
    routes="$({ ip -4 route show match "$SUBNET.0/24"; ip -4 route show root "$SUBNET.0/24"; } | grep -v '^default ' | sort -u | paste -sd ';' || true)"
    [[ -z "$routes" ]] || die "$SUBNET.0/24 is in use on this machine ($routes); set PROOFGRID_MULTINODE_SUBNET"
    ! ip link show "$BRIDGE" >/dev/null 2>&1 || die "device $BRIDGE exists and is not this cluster's; set PROOFGRID_MULTINODE_NET_NAME"
    for node in "${NODE_NAMES[@]}"; do
        [[ ! -e "/run/netns/$(node_netns "$node")" ]] ||
            die "network namespace $(node_netns "$node") exists and is not this cluster's; set PROOFGRID_MULTINODE_NET_NAME"
    done
}

# A bridge with the controller's address and no route beyond the /24, one namespace per node with its
# veth on the bridge.  Nothing forwards: ip_forward is left as it is and the namespaces have no default
# route, so a job can reach the other nodes and the controller, nothing else.
net_up() {
    local node ns
    ip link add "$BRIDGE" type bridge
    sysctl -qw "net.ipv6.conf.$BRIDGE.disable_ipv6=1" 2>/dev/null || true   # IPv4 only, no chatter
    ip addr add "$CTL_ADDR/24" dev "$BRIDGE"
    ip link set "$BRIDGE" up
    for node in "${NODE_NAMES[@]}"; do
        ns="$(node_netns "$node")"
        ip netns add "$ns" || die "ip netns add $ns failed (needs CAP_SYS_ADMIN and CAP_NET_ADMIN)"
        ip link add "$(node_veth "$node")" type veth peer name eth0 netns "$ns"
        ip link set "$(node_veth "$node")" master "$BRIDGE" up
        ip -n "$ns" link set lo up
        ip -n "$ns" addr add "$(node_addr "$node")/24" dev eth0
        ip -n "$ns" link set eth0 up
    done
    log "network up: $BRIDGE=$CTL_ADDR/24, nodes ${NODE_NAMES[*]} at $SUBNET.11.."
}

# kill_in_netns NS : SIGKILL every process in the node's namespace (slurmd, slurmstepd, job tasks: all
# started there by our slurmd) and wait until they are gone.
kill_in_netns() {
    local ns="$1" pids i
    for ((i = 0; i < 50; i++)); do
        pids="$(ip netns pids "$ns" 2>/dev/null || true)"
        [[ -z "$pids" ]] && return 0
        # shellcheck disable=SC2086
        kill -KILL $pids 2>/dev/null || true
        sleep 0.1
    done
    die "processes $pids in $ns survived SIGKILL"
}

net_down() {
    local node ns
    for node in "${NODE_NAMES[@]}"; do
        ns="$(node_netns "$node")"
        if [[ -e "/run/netns/$ns" ]]; then
            kill_in_netns "$ns"
            ip netns del "$ns"
            log "deleted namespace $ns"
        fi
        ip link del "$(node_veth "$node")" 2>/dev/null || true   # gone with the namespace, normally
    done
    if ip link show "$BRIDGE" >/dev/null 2>&1; then
        ip link del "$BRIDGE"
        log "deleted bridge $BRIDGE"
    fi
    # `ip netns add` made /run/netns a mount point; undo that once no namespace is left in it.
    if mountpoint -q /run/netns && [[ -z "$(ls -A /run/netns)" ]]; then
        umount /run/netns && rmdir /run/netns
    fi
}

# ------------------------------------------------------------ config files ---
write_configs() {
    local host node
    host="$(host_short)"
    cat >"$SLURM_CONF_PATH" <<EOF
# Generated by proofgrid scripts/slurm/multinode.sh -- throwaway multi-node test cluster.
ClusterName=$CLUSTER_NAME
# The controller runs in the machine's namespace; the nodes reach it at the bridge's address.
SlurmctldHost=$host($CTL_ADDR)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET,cred_expire=$CRED_EXPIRE
CredType=cred/munge
StateSaveLocation=$STATE_DIR/ctld
# The slurmd share one filesystem: spool dir, pid and log file per node (%n = its name).
SlurmdSpoolDir=$STATE_DIR/slurmd/%n
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd-%n.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
# No cgroups: the nodes share the machine's cgroup tree.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
# No usage sampling in each slurmstepd: a fifth less CPU per tiny task (29 ms against 35.5 ms, measured);
# proofgrid reads no usage field from sacct (JobID, State, ExitCode, ElapsedRaw, NodeList).
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
# srun listens for its steps' I/O on ports of this range only, clear of the port blocks jobs claim
# (PROOFGRID_PORT_BASE and up), so a test that firewalls a job's ports (block-ports) blocks nothing of srun's.
SrunPortRange=60001-63000
# A node that registers again (restart-node) is back in service, whatever downed it.
ReturnToService=2
SlurmdTimeout=$SLURMD_TIMEOUT
MessageTimeout=$MESSAGE_TIMEOUT
# Scheduling: start jobs at once and run the full scheduler every second (a requeued job starts within
# about 1 s of cred_expire); reject impossible requests at submission.
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
# A 1,000-task array of tiny jobs (issue 24), and room for a synthetic 10,000.
MaxArraySize=10001
MaxJobCount=20000
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=$CTL_ADDR
AccountingStoragePort=$DBD_PORT
AccountingStoragePass=$MUNGE_SOCKET
JobCompType=jobcomp/none
SlurmdParameters=config_overrides
NodeName=DEFAULT CPUs=$NODE_CPUS Boards=1 SocketsPerBoard=1 CoresPerSocket=$NODE_CPUS ThreadsPerCore=1 RealMemory=$NODE_MEM_MB State=UNKNOWN
EOF
    for node in "${NODE_NAMES[@]}"; do
        echo "NodeName=$node NodeHostname=$node NodeAddr=$(node_addr "$node")"
    done >>"$SLURM_CONF_PATH"
    echo "PartitionName=$PARTITION Nodes=$(IFS=,; echo "${NODE_NAMES[*]}") Default=YES MaxTime=INFINITE State=UP" >>"$SLURM_CONF_PATH"
    chmod 644 "$SLURM_CONF_PATH"
    # Name resolution inside the nodes: each node's hostname is its address (gloo and srun resolve it),
    # and the controller's name is the bridge's address.
    {
        echo "127.0.0.1 localhost"
        echo "$CTL_ADDR $host"
        for node in "${NODE_NAMES[@]}"; do echo "$(node_addr "$node") $node"; done
    } >"$HOSTS_PATH"
    write_slurmdbd_conf
}

# ----------------------------------------------------------------- daemons ---
# start_slurmd NODE : NODE's slurmd inside its network namespace, in a UTS namespace of its own
# (hostname NODE) and a mount namespace with our hosts file on /etc/hosts; its jobs inherit all three.
# nsenter joins the network namespace only (`ip netns exec` would remount /sys too).
start_slurmd() {
    local node="$1"
    mkdir -p "$STATE_DIR/slurmd/$node"
    log "starting slurmd for node $node ($(node_addr "$node"))"
    env "$OWNER_TAG" SLURM_CONF="$SLURM_CONF_PATH" \
        nsenter --net="/run/netns/$(node_netns "$node")" -- unshare --uts --mount --propagation slave -- \
        sh -c 'hostname "$1" && mount --bind "$2" /etc/hosts && exec slurmd -f "$3" -N "$1"' \
        sh "$node" "$HOSTS_PATH" "$SLURM_CONF_PATH" \
        >>"$LOG/slurmd-$node.stdout" 2>&1 || die "slurmd for $node failed to start (see $LOG/slurmd-$node.log)"
}

in_service() { [[ "$1" =~ ^(idle|mixed|allocated|completing)$ ]]; }

# node_state NODE : its state as sinfo gives it (idle, down*, ...).
node_state() { sinfo -h -n "$1" -o %T 2>/dev/null | head -n 1; }

all_in_service() {
    local node
    for node in "${NODE_NAMES[@]}"; do in_service "$(node_state "$node")" || return 1; done
}

# One batch job over every node whose srun tasks report their hostnames: sbatch, srun inside the
# allocation, each node's slurmd, and accounting, end to end.
smoke_job() {
    local id out="$LOG/smoke-job.out"
    id="$(sbatch --parsable --job-name=proofgrid-smoke --nodes="$NODE_COUNT" --ntasks-per-node=1 \
        --output="$out" --chdir=/ --wrap 'srun hostname')" || die "smoke job submission failed (logs: $LOG)"
    wait_for "smoke job $id to show COMPLETED in sacct" \
        sh -c "sacct -n -X -P -j '$id' -o State | grep -qx COMPLETED"
    [[ "$(sort "$out" | tr '\n' ' ')" == "$(printf '%s\n' "${NODE_NAMES[@]}" | sort | tr '\n' ' ')" ]] ||
        die "smoke job $id: srun tasks reported hostnames '$(tr '\n' ' ' <"$out")', not the nodes ${NODE_NAMES[*]}"
}

write_env() {
    local node addrs=()
    for node in "${NODE_NAMES[@]}"; do addrs+=("$(node_addr "$node")"); done
    cat >"$STATE_DIR/env.sh" <<EOF
export SLURM_CONF=$SLURM_CONF_PATH
export PROOFGRID_MULTINODE_DIR=$STATE_DIR
export PROOFGRID_MULTINODE_PARTITION=$PARTITION
export PROOFGRID_MULTINODE_NODES=$(IFS=,; echo "${NODE_NAMES[*]}")
export PROOFGRID_MULTINODE_ADDRS=$(IFS=,; echo "${addrs[*]}")
export PROOFGRID_MULTINODE_CPUS=$NODE_CPUS
export PROOFGRID_MULTINODE_MEM_MB=$NODE_MEM_MB
EOF
}

# ---------------------------------------------------------------- commands ---
cmd_start() {
    set_paths "${1:-}"
    need_cmd munged munge unmunge mariadbd mariadb mariadb-install-db \
        slurmdbd slurmctld slurmd sacctmgr sacct sbatch srun sinfo squeue scontrol ip nsenter unshare mountpoint
    [[ $EUID -eq 0 ]] || die "start must run as root (namespaces; the daemons run as root)"
    local t0=$SECONDS p node
    reset_state_dir "$MARKER_FILE" cmd_stop
    for p in "$CTLD_PORT" "$DBD_PORT" "$DB_PORT"; do
        port_in_use "$p" && die "port $p is in use (set PROOFGRID_MULTINODE_PORT_BASE to move ports $PORT_BASE..$((PORT_BASE + 3)))"
    done
    plan_network
    check_network_free
    save_network   # before anything is built: `stop` undoes a half-built network too
    net_up
    export SLURM_CONF="$SLURM_CONF_PATH"
    write_configs
    start_munge
    start_mariadb
    start_slurmdbd
    start_slurmctld
    for node in "${NODE_NAMES[@]}"; do start_slurmd "$node"; done
    wait_for "nodes ${NODE_NAMES[*]} to become idle" all_in_service
    smoke_job
    write_env
    log "cluster up in $((SECONDS - t0))s: partition=$PARTITION nodes=${NODE_NAMES[*]} cpus=$NODE_CPUS mem=${NODE_MEM_MB}MB per node"
    cat "$STATE_DIR/env.sh"
}

cmd_stop() {
    set_paths "${1:-}"
    if [[ ! -d "$STATE_DIR" ]]; then
        log "nothing to stop: $STATE_DIR does not exist"
        return 0
    fi
    export SLURM_CONF="$SLURM_CONF_PATH"
    cancel_jobs
    local node names=()
    if load_network; then
        for node in "${NODE_NAMES[@]}"; do names+=("slurmd-$node"); done
    fi
    # Slurm daemons first (slurmctld flushes job records to slurmdbd), then slurmdbd, then what it
    # depends on, then whatever is left on the nodes, then the network.
    stop_daemons "${names[@]}" slurmctld
    stop_daemons slurmdbd
    stop_daemons mariadbd munged
    stop_stragglers
    if load_network; then net_down; fi
    log "stopped ($STATE_DIR kept for inspection; 'start' wipes it)"
}

cmd_status() {
    set_paths "${1:-}"
    [[ -f "$SLURM_CONF_PATH" ]] && load_network || die "no multi-node cluster at $STATE_DIR"
    export SLURM_CONF="$SLURM_CONF_PATH"
    local name pid up=0 node state
    for name in munged mariadbd slurmdbd slurmctld; do
        pid="$(pidfile_pid "$RUN/$name.pid")"
        if pid_alive "$pid"; then
            printf '%-12s running (pid %s)\n' "$name" "$pid"
        else
            printf '%-12s NOT running\n' "$name"
            up=1
        fi
    done
    # Client commands block for a while when slurmctld is gone; skip them then.
    pid_alive "$(pidfile_pid "$RUN/slurmctld.pid")" || return 1
    for node in "${NODE_NAMES[@]}"; do
        pid="$(pidfile_pid "$RUN/slurmd-$node.pid")"
        state="$(node_state "$node")"
        pid_alive "$pid" && pid="slurmd pid $pid" || pid="slurmd NOT running"
        printf '%-12s %-14s %s, namespace %s, %s\n' "$node" "$(node_addr "$node")" "$state" "$(node_netns "$node")" "$pid"
        in_service "$state" || { up=1; log "node $node is $state: bash $0 restart-node $node $STATE_DIR"; }
    done
    squeue || up=1
    return "$up"
}

# What every node command starts with: STATE_DIR's paths and the network its start built, NODE one of it.
open_node() {
    set_paths "$2"
    load_network || die "no multi-node cluster at $STATE_DIR"
    known_node "$1"
}

# The node crashes: its link goes down first (its peers see silence, not a closed connection, as when
# a machine dies), then every process on it is killed.  slurmctld's pings time out, it marks the node
# DOWN and ends its jobs NODE_FAIL (requeued when they may be): about 18 s later with the defaults.
cmd_kill_node() {
    local node="${1:-}"
    [[ -n "$node" ]] || die "usage: $0 kill-node NODE [STATE_DIR]"
    open_node "$node" "${2:-}"
    ip link set "$(node_veth "$node")" down
    kill_in_netns "$(node_netns "$node")"
    rm -f "$RUN/slurmd-$node.pid"
    log "node $node crashed (link down, all its processes killed); slurmctld marks it DOWN when its pings" \
        "have timed out ($(grep -E '^(SlurmdTimeout|MessageTimeout)=' "$SLURM_CONF_PATH" | paste -sd ' '))"
}

cmd_restart_node() {
    local node="${1:-}"
    [[ -n "$node" ]] || die "usage: $0 restart-node NODE [STATE_DIR]"
    open_node "$node" "${2:-}"
    export SLURM_CONF="$SLURM_CONF_PATH"
    ip link set "$(node_veth "$node")" up
    pid_alive "$(pidfile_pid "$RUN/slurmd-$node.pid")" || start_slurmd "$node"
    # ReturnToService=2: a node that registers is back in service, whatever downed it.
    if ! in_service "$(node_state "$node")"; then
        scontrol update nodename="$node" state=resume 2>/dev/null || true
    fi
    wait_for "node $node to be back in service" sh -c "sinfo -h -n '$node' -o %T | grep -qE '^(idle|mixed|allocated|completing)$'"
    log "node $node is back: $(node_state "$node")"
}

# A firewall between the nodes, for a job whose ranks cannot meet: TCP to ports FIRST-LAST that arrives
# on NODE's link (from the other nodes; NODE's own traffic to itself stays on lo) is dropped, silently,
# as a site's firewall does, in an nftables table of NODE's namespace only (BLOCK_TABLE).
BLOCK_TABLE="proofgrid_block"
cmd_block_ports() {
    local node="${1:-}" range="${2:-}"
    [[ -n "$node" && "$range" =~ ^[0-9]+-[0-9]+$ ]] || die "usage: $0 block-ports NODE FIRST-LAST [STATE_DIR]"
    open_node "$node" "${3:-}"
    command -v nft >/dev/null || die "nft is not installed: run '$0 install'"
    local ns
    ns="$(node_netns "$node")"
    ip netns exec "$ns" nft delete table inet "$BLOCK_TABLE" 2>/dev/null || true
    ip netns exec "$ns" nft add table inet "$BLOCK_TABLE"
    ip netns exec "$ns" nft add chain inet "$BLOCK_TABLE" input '{ type filter hook input priority 0; }'
    ip netns exec "$ns" nft add rule inet "$BLOCK_TABLE" input iifname eth0 tcp dport "$range" drop
    log "node $node drops TCP to ports $range from the other nodes"
}

cmd_unblock_ports() {
    local node="${1:-}"
    [[ -n "$node" ]] || die "usage: $0 unblock-ports NODE [STATE_DIR]"
    open_node "$node" "${2:-}"
    ip netns exec "$(node_netns "$node")" nft delete table inet "$BLOCK_TABLE" 2>/dev/null || true
    log "node $node drops nothing"
}

usage() {
    sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
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
        kill-node) cmd_kill_node "$@" ;;
        restart-node) cmd_restart_node "$@" ;;
        block-ports) cmd_block_ports "$@" ;;
        unblock-ports) cmd_unblock_ports "$@" ;;
        -h | --help | help) usage 0 ;;
        *) usage 2 >&2 ;;
    esac
}

main "$@"
