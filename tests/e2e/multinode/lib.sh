# shellcheck shell=bash
# A private K-node Slurm on one machine, for the multi-node end-to-end suite (run.sh) and the
# node-count sweep (sweep.sh). Source this file (it sources tests/e2e/lib.sh for the package
# install, the plugin build and the daemon helpers), then:
#
#   mn_set_nodes K          # node1 .. nodeK (default 3)
#   mn_init                 # e2e_init's private directory, munge key and plugin; each
#                           # node's config, plugstack and hosts files
#   mn_net_up               # network namespaces: a hub with a bridge, one per node
#   mn_cluster_start        # munged, slurmctld in the hub, one slurmd per node namespace; each
#                           # node's topology cache then holds its fixture (MN_SOURCE=cache)
#   set_node_plugstack NODE "ARGS..."   # that node's plugin line (read by each step there)
#   set_client_plugstack "ARGS..."      # the line srun/sbatch/salloc read (the hub's)
#   mn_cluster_stop         # stops every daemon it started, by pid
#   mn_net_down             # removes the namespaces (and with them the bridge and veths)
#   mn_cleanup              # all of the above, for a trap
#
# Layout. Each node is a network namespace ($MN_PREFIX-nodeN) with one veth (eth0) whose
# peer is on a bridge inside a hub namespace ($MN_PREFIX-hub); addresses are 10.77.X.Y/16
# for node N = 256 X + Y (10.77.0.N up to node255) and 10.77.255.254 for the hub, and exist
# only inside these namespaces. Each
# slurmd also has its own UTS namespace (hostname = its node name, so gethostname() and the
# PMIX_DEVICE_ID host name the node) and mount namespace (its own /etc/hosts naming the
# nodes). slurmctld and every client (srun, sbatch, salloc, squeue, sinfo, scontrol,
# scancel) run in the hub: the shell functions below wrap them in nsenter. Each node has its
# own munged (same key), the hub another. The namespaces are entered with `nsenter --net=/run/netns/NAME`:
# `ip netns exec` remounts /sys, which hides /sys/fs/cgroup, and slurmd then refuses to start.
#
# Each slurmd reads its own slurm.conf ($E2E_DIR/etc/slurm-NODE.conf), identical to the
# clients' except for PlugStackConfig, so that each node has its own plugin line (its own
# topology=); DebugFlags=NO_CONF_HASH keeps 22.05 from logging the hash mismatch. Debian's
# slurmd is built without multiple-slurmd support: each slurmd's spool, pid and log files
# are named with %n. task/affinity and proctrack/pgid: cgroup directories would be shared
# by every slurmd on this one machine, and proctrack/linuxproc loses a task's children once
# the task is killed (an orphan keeps the step's output open, and the node completing).
# Slurm's tree fan-out (TreeWidth) is left at its default.
#
# Topologies. Each node has its own fixture (mn_topology): MN_TOPOLOGY_nodeN where set (run.sh
# keeps node1 NVIDIA with two mlx5 HCAs, node2 AMD without adapter, node3 no GPU), otherwise
# MN_MIX by node number. How a step reads it (MN_SOURCE):
#   cache (default)  the production path: the node's plugstack line names a config file of its
#                    own (cache_dir, sys_root and proc_root under $E2E_DIR/nodes/NODE), its
#                    slurmd discovers this machine at its start and writes the topology cache
#                    there, and mn_cluster_start then puts the node's fixture into that file in
#                    place (cache.py: same inode, so slurmd's lock, which proves to each step
#                    that its writer still runs, stays on it). Each step's user_init reads it
#                    through every check production has (root-only directories, the lock,
#                    the plugin file's identity, the boot id). sys_root holds the fixture's
#                    InfiniBand port states (re-read per step from the cache), proc_root
#                    nothing (the fixtures name their GPUs).
#   xml              topology=FIXTURE on the node's plugstack line: hwloc loads the XML in every
#                    step (about 4 ms per node), no cache.

MN_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/e2e/lib.sh
source "$MN_HERE/../lib.sh"

MN_NODES=()
MN_HUB_ADDR=10.77.255.254
MN_SOURCE=${MN_SOURCE:-cache}
# The fixtures of the nodes that have no MN_TOPOLOGY_nodeN, by node number: NVIDIA GPUs with
# an mlx5 HCA each (adapters), AMD GPUs without adapter.
MN_MIX=(e2e-2gpu.xml e2e-2gpu-amd.xml)
# Short and unique per run (interface names are limited to 15 characters).
MN_PREFIX=mbd$$
MN_HUB=$MN_PREFIX-hub
MN_NETNS=()
# iproute2 for the namespaces, util-linux for nsenter/unshare: the suites install them with
# the single-node suite's (e2e_install_packages "${MN_PACKAGES[@]}").
# shellcheck disable=SC2034 # for the scripts that source this file
MN_PACKAGES=(iproute2 util-linux)

mn_log() { printf 'multinode: %s\n' "$*" >&2; }

# mn_set_nodes K: the cluster's nodes, node1 .. nodeK (at most 65000).
mn_set_nodes() {
    local i
    MN_NODES=()
    for ((i = 1; i <= $1; i++)); do MN_NODES+=("node$i"); done
}
mn_set_nodes "${MN_K:-3}"

mn_node_index() { # NODE -> N
    echo "${1#node}"
}

mn_addr() { # NODE -> its address
    local n=${1#node}
    echo "10.77.$((n / 256)).$((n % 256))"
}

# mn_hostlist NODE...: Slurm's compact form (node[1-3,5]), for -w and slurm.conf.
mn_hostlist() {
    local n prev=-2 start=-2 out=""
    for n in $(printf '%s\n' "$@" | sed 's/^node//' | sort -n); do
        if ((n == prev + 1)); then prev=$n; continue; fi
        ((start >= 0)) && out+=$( ((start == prev)) && echo ",$start" || echo ",$start-$prev")
        start=$n prev=$n
    done
    ((start >= 0)) && out+=$( ((start == prev)) && echo ",$start" || echo ",$start-$prev")
    echo "node[${out#,}]"
}

mn_ns() { # NODE -> its namespace name
    echo "$MN_PREFIX-$1"
}

# Runs a command in the hub namespace (where slurmctld listens and the clients run).
mn_hub() {
    nsenter --net="/run/netns/$MN_HUB" -- "$@"
}

# The clients, as the tests call them: always in the hub.
srun() { mn_hub srun "$@"; }
sbatch() { mn_hub sbatch "$@"; }
salloc() { mn_hub salloc "$@"; }
squeue() { mn_hub squeue "$@"; }
sinfo() { mn_hub sinfo "$@"; }
scontrol() { mn_hub scontrol "$@"; }
scancel() { mn_hub scancel "$@"; }

# Creates the hub (bridge with the hub's address) and one namespace per node (a veth on
# the bridge, the node's address). Everything lives inside namespaces this run created.
mn_net_up() {
    local node n ns
    ip netns add "$MN_HUB" || return 1
    MN_NETNS+=("$MN_HUB")
    ip -n "$MN_HUB" link set lo up &&
        ip -n "$MN_HUB" link add br0 type bridge &&
        ip -n "$MN_HUB" addr add "$MN_HUB_ADDR/16" dev br0 &&
        ip -n "$MN_HUB" link set br0 up || return 1
    for node in "${MN_NODES[@]}"; do
        n=$(mn_node_index "$node")
        ns=$(mn_ns "$node")
        ip netns add "$ns" || return 1
        MN_NETNS+=("$ns")
        ip -n "$MN_HUB" link add "veth$n" type veth peer name eth0 netns "$ns" &&
            ip -n "$MN_HUB" link set "veth$n" master br0 up &&
            ip -n "$ns" link set lo up &&
            ip -n "$ns" addr add "$(mn_addr "$node")/16" dev eth0 &&
            ip -n "$ns" link set eth0 up || return 1
    done
}

# Deletes the namespaces this run created (their veths and the bridge go with them).
mn_net_down() {
    local ns
    for ns in "${MN_NETNS[@]}"; do
        ip netns del "$ns" 2>/dev/null || mn_log "could not delete network namespace $ns"
    done
    MN_NETNS=()
}

# The single-node suite's private directory (e2e_init: /run/mbd-mn.*, the fixtures in
# root-only copies, the munge key, the plugin), and each node's files: its config file, its
# plugstack and /etc/hosts.
mn_init() {
    local node
    e2e_init mn || return 1
    mkdir -m 755 "$E2E_DIR/nodes" || return 1
    # Each node's config file, for the cache path: its own cache directory (several slurmd on
    # one machine would share the default /run/map-by-device) and driver-file roots. Two of
    # each: the cases map the fixtures' GPUs without asking Slurm for them, so their nodes say
    # require_step_gpus = false (every GPU of the node is a step's, as where Slurm does not
    # manage GPUs); MN_GRES=1 (c_gres) leaves it unset, the production rule: GresTypes=gpu,
    # so a step Slurm gave no GPU has none. xml.toml and xml-gres.toml: the same for MN_SOURCE=xml.
    local rule
    for node in "${MN_NODES[@]}"; do
        mkdir -p "$E2E_DIR/nodes/$node"/{sys,proc} && chmod 755 "$E2E_DIR/nodes/$node"{,/sys,/proc} || return 1
        for rule in "" "-gres"; do
            printf 'cache_dir = "%s"\nsys_root = "%s"\nproc_root = "%s"\n' "$E2E_DIR/nodes/$node/cache" \
                "$E2E_DIR/nodes/$node/sys" "$E2E_DIR/nodes/$node/proc" >"$E2E_DIR/nodes/$node/mbd$rule.toml"
            : >"$E2E_DIR/nodes/$node/xml$rule.toml"
        done
        echo "require_step_gpus = false" | tee -a "$E2E_DIR/nodes/$node/mbd.toml" >>"$E2E_DIR/nodes/$node/xml.toml"
        chmod 644 "$E2E_DIR/nodes/$node"/*.toml
    done
    # Each node's own topology (or config file) from the start: with topology= slurmd's init
    # writes no cache; with the config file, it writes its own node's.
    set_plugstacks ""
    # Each node's /etc/hosts (bind-mounted in its own mount namespace): the nodes and the hub.
    {
        echo "127.0.0.1 localhost"
        echo "$MN_HUB_ADDR $(hostname -s)"
        for node in "${MN_NODES[@]}"; do
            echo "$(mn_addr "$node") $node"
        done
    } >"$E2E_DIR/etc/hosts"
    chmod 644 "$E2E_DIR/etc/hosts"
}

# mn_write_plugstack WHO ARGS: the plugstack file of a node (or of the clients); empty ARGS
# with "-" means no plugin line at all.
mn_write_plugstack() {
    local args=$2 f=$E2E_DIR/etc/plugstack-$1.conf
    if [[ $args == - ]]; then
        : >"$f.new"
    else
        printf 'required %s %s\n' "$E2E_PLUGIN" "$args" >"$f.new"
    fi
    chmod 644 "$f.new"
    mv -f "$f.new" "$f"
}

set_node_plugstack() { mn_write_plugstack "$1" "$2"; }
set_client_plugstack() { mn_write_plugstack client "$1"; }

# mn_topology NODE: the fixture file name of a node's topology (MN_TOPOLOGY_nodeN, else
# MN_MIX by node number).
mn_topology() {
    local v="MN_TOPOLOGY_$1" n=${1#node}
    if [[ -n ${!v:-} ]]; then
        echo "${!v}"
    else
        echo "${MN_MIX[(n - 1) % ${#MN_MIX[@]}]}"
    fi
}

# mn_has_gpus NODE: whether its fixture has GPUs (two, as GRES gpu:2).
mn_has_gpus() { [[ $(mn_topology "$1") != *nogpu* ]]; }

# mn_source_arg NODE: what the node's plugin line names its topology with.
mn_source_arg() {
    local rule=${MN_GRES:+-gres}
    if [[ $MN_SOURCE == xml ]]; then
        echo "topology=$E2E_DIR/topologies/$(mn_topology "$1") config=$E2E_DIR/nodes/$1/xml$rule.toml"
    else
        echo "config=$E2E_DIR/nodes/$1/mbd$rule.toml"
    fi
}

# Every node's plugin line with its own topology, plus ARGS; the clients get the plugin
# with ARGS only (they validate specs and settings, and load no topology).
set_plugstacks() {
    local node
    for node in "${MN_NODES[@]}"; do
        mn_write_plugstack "$node" "$(mn_source_arg "$node") $*"
    done
    mn_write_plugstack client "$*"
}

# No plugin anywhere (an empty plugstack on every node and the clients).
set_plugstacks_empty() {
    local node
    for node in "${MN_NODES[@]}" client; do
        mn_write_plugstack "$node" -
    done
}

# slurm.conf for the clients and slurmctld, and one per node that differs only in
# PlugStackConfig. Every node: the machine's 2 real CPUs (all nodes share CPUs 0 and 1),
# two fake GPUs as GRES on each node whose fixture has GPUs (gres.conf File=/dev/null and
# /dev/zero, which Slurm numbers 0 and 1; the fixtures' GPUs in bus order match that).
mn_write_slurm_conf() {
    local cpus node gres
    cpus=$(nproc --all)
    {
        cat <<EOF
ClusterName=mbdmn
SlurmctldHost=$(hostname -s)($MN_HUB_ADDR)
SlurmctldPort=6817
SlurmdPort=6818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$E2E_DIR/munge/munge.socket
StateSaveLocation=$E2E_DIR/state
SlurmdSpoolDir=$E2E_DIR/spool/%n
SlurmctldPidFile=$E2E_DIR/state/slurmctld.pid
SlurmdPidFile=$E2E_DIR/spool/slurmd-%n.pid
SlurmctldLogFile=$E2E_DIR/log/slurmctld.log
SlurmdLogFile=$E2E_DIR/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=debug
DebugFlags=NO_CONF_HASH
ProctrackType=proctrack/pgid
TaskPlugin=task/affinity
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,bf_interval=1
MailProg=/bin/true
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
PlugStackConfig=$E2E_DIR/etc/plugstack-client.conf
ReturnToService=2
KillWait=2
MinJobAge=600
GresTypes=gpu
EOF
        for node in "${MN_NODES[@]}"; do
            gres=""
            mn_has_gpus "$node" && gres=" Gres=gpu:2"
            echo "NodeName=$node NodeAddr=$(mn_addr "$node") CPUs=$cpus Sockets=1 CoresPerSocket=$cpus ThreadsPerCore=1 RealMemory=1000$gres"
        done
        echo "PartitionName=debug Nodes=$(mn_hostlist "${MN_NODES[@]}") Default=YES MaxTime=INFINITE State=UP"
    } >"$E2E_DIR/etc/slurm.conf"
    for node in "${MN_NODES[@]}"; do
        sed -e "s|^PlugStackConfig=.*|PlugStackConfig=$E2E_DIR/etc/plugstack-$node.conf|" \
            -e "s|^AuthInfo=.*|AuthInfo=socket=$E2E_DIR/munge/munge-$node.socket|" \
            "$E2E_DIR/etc/slurm.conf" >"$E2E_DIR/etc/slurm-$node.conf"
    done
    {
        for node in "${MN_NODES[@]}"; do
            mn_has_gpus "$node" || continue
            echo "NodeName=$node Name=gpu File=/dev/null"
            echo "NodeName=$node Name=gpu File=/dev/zero"
        done
    } >"$E2E_DIR/etc/gres.conf"
    chmod 644 "$E2E_DIR"/etc/*.conf
}

# Starts one node's slurmd in its namespaces (in the foreground, so $! is slurmd's pid:
# nsenter and unshare exec without forking, and so does the shell).
mn_slurmd_start() {
    local node=$1
    mkdir -p "$E2E_DIR/spool/$node"
    nsenter --net="/run/netns/$(mn_ns "$node")" -- unshare --uts --mount --propagation private -- \
        sh -c 'echo "$1" >/proc/sys/kernel/hostname && mount --bind "$2" /etc/hosts && exec slurmd -D -N "$1" -f "$3"' \
        sh "$node" "$E2E_DIR/etc/hosts" "$E2E_DIR/etc/slurm-$node.conf" >>"$E2E_DIR/log/slurmd-$node.out" 2>&1 &
    E2E_PIDS[slurmd-$node]=$!
}

# Whether every node is idle (not drained, not down).
mn_all_idle() {
    local states
    states=$(sinfo -h -N -o '%N %t' 2>/dev/null | sort -u)
    [[ $(grep -c ' idle$' <<<"$states") == "${#MN_NODES[@]}" ]]
}

# mn_munged_start NAME SOCKET: a munged (same key) at SOCKET, as E2E_PIDS[NAME].
mn_munged_start() {
    local name=$1 socket=$2 log=$E2E_DIR/log
    munged -F --force --key-file="$E2E_DIR/munge/munge.key" --socket="$socket" \
        --pid-file="$E2E_DIR/munge/$name.pid" --log-file="$log/$name.log" \
        --seed-file="$E2E_DIR/munge/$name.seed" >>"$log/$name.out" 2>&1 &
    E2E_PIDS[$name]=$!
    e2e_wait_for "[[ -S '$socket' ]]" 10 || { mn_log "$name did not start"; return 1; }
}

# munged (one for the hub and one per node, as on a cluster: munged refuses to decode the same
# credential twice, and with one munged for all, Slurm 25.11's nodes refused each multi-node
# step's launch request, "_verify_signature: failed decode"), slurmctld (hub) and every
# slurmd; waits until every node is idle.
mn_cluster_start() {
    local log=$E2E_DIR/log node
    mn_write_slurm_conf
    mn_munged_start munged "$E2E_DIR/munge/munge.socket" || return 1
    for node in "${MN_NODES[@]}"; do
        mn_munged_start "munged-$node" "$E2E_DIR/munge/munge-$node.socket" || return 1
    done
    # nsenter execs slurmctld (a shell function here would leave $! a subshell).
    nsenter --net="/run/netns/$MN_HUB" -- slurmctld -D -i >>"$log/slurmctld.out" 2>&1 &
    E2E_PIDS[slurmctld]=$!
    e2e_wait_for "scontrol ping | grep -q UP" 30 || { mn_log "slurmctld did not answer"; return 1; }
    for node in "${MN_NODES[@]}"; do
        mn_slurmd_start "$node"
    done
    e2e_wait_for mn_all_idle $((60 + ${#MN_NODES[@]})) || {
        mn_log "not every node became idle: $(sinfo -h -N -o '%N %t %E' 2>&1 | tr '\n' ';')"
        return 1
    }
    if [[ $MN_SOURCE == cache ]]; then
        mn_cache_fixtures || return 1
    fi
    mn_log "cluster up: $(mn_hostlist "${MN_NODES[@]}") ($E2E_DIR, topologies from $MN_SOURCE)"
}

# Each node's topology cache (written by its slurmd at its start) given the node's fixture
# (cache.py); the lines it prints go to log/cache.out.
mn_cache_fixtures() {
    local node args=() f
    for node in "${MN_NODES[@]}"; do
        f=$E2E_DIR/nodes/$node/cache/topology.json
        e2e_wait_for "[[ -s '$f' ]]" 30 || {
            mn_log "$node's slurmd wrote no topology cache ($f): $(grep -h 'map-by-device' "$E2E_DIR/log/slurmd-$node.log" | tail -n 3)"
            return 1
        }
        args+=("$f" "$E2E_DIR/topologies/$(mn_topology "$node")" "$E2E_DIR/nodes/$node/sys")
    done
    python3 "$MN_HERE/cache.py" "$(dirname "$E2E_PLUGIN")/map_by_device_discover.so" "${args[@]}" \
        >>"$E2E_DIR/log/cache.out" 2>&1 || {
        mn_log "could not put the fixtures into the caches: $(tail -n 3 "$E2E_DIR/log/cache.out")"
        return 1
    }
}

# Cancels the jobs, then stops the slurmds (all at once: each takes about 3 s), slurmctld
# and munged, by pid.
mn_cluster_stop() {
    local name pids=() i
    if [[ -n ${E2E_PIDS[slurmctld]:-} ]]; then
        scancel --quiet --partition=debug >/dev/null 2>&1 || true
        e2e_wait_for "[[ -z \$(squeue -h -o %i 2>/dev/null) ]]" 15 || true
    fi
    for name in "${!E2E_PIDS[@]}"; do
        [[ $name == slurmd-* ]] || continue
        kill -TERM "${E2E_PIDS[$name]}" 2>/dev/null && pids+=("$name")
    done
    for ((i = 0; i < 100; i++)); do
        local alive=0
        for name in "${pids[@]}"; do
            kill -0 "${E2E_PIDS[$name]}" 2>/dev/null && alive=1
        done
        ((alive)) || break
        sleep 0.1
    done
    for name in "${pids[@]}"; do
        e2e_stop_daemon "$name"
    done
    for name in "${!E2E_PIDS[@]}"; do
        [[ $name == slurmd-* ]] && e2e_stop_daemon "$name"
    done
    e2e_stop_daemon slurmctld
    for name in "${!E2E_PIDS[@]}"; do
        [[ $name == munged* ]] && e2e_stop_daemon "$name"
    done
    return 0
}

# Prints the end of the daemons' logs (on failure).
mn_dump_logs() {
    local f
    for f in "$E2E_DIR"/log/slurmctld.log "$E2E_DIR"/log/slurmd-*.log; do
        [[ -f $f ]] || continue
        printf '\n===== %s (last 80 lines) =====\n' "${f##*/}"
        tail -n 80 "$f"
    done
}

# Stops everything and removes the namespaces and the private directory (kept with E2E_KEEP=1).
mn_cleanup() {
    mn_cluster_stop
    mn_net_down
    e2e_remove_dir
}
