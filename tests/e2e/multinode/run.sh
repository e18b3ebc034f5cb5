#!/usr/bin/env bash
# Multi-node end-to-end suite: the plugin on a real nine-node Slurm that this script starts
# on this one machine (lib.sh: one slurmd per network + UTS namespace, slurmctld and the
# clients in a hub namespace), driven with real srun/sbatch, checked from inside the tasks:
# node name (Slurm's and gethostname()), SLURM_PROCID, SLURM_LOCALID, Cpus_allowed_list and
# every variable the plugin may set. The case runner, its init (cases_init: e2e_init under
# mn_init) and the verdicts are tests/e2e/cases.sh's.
#
#   flock /tmp/mbd-slurm.lock tests/e2e/multinode/run.sh          # every case (root)
#   flock /tmp/mbd-slurm.lock tests/e2e/multinode/run.sh refus    # cases whose name has "refus"
#   MN_SOURCE=xml ...                                             # topology= instead of the caches
#   E2E_KEEP=1 ...                                                # keep configs and logs
#
# Nodes (each its own topology, from its slurmd's topology cache: lib.sh, MN_SOURCE; all share
# this machine's CPUs 0 and 1):
#   node1  topologies/e2e-2gpu.xml      two NVIDIA GPUs and two mlx5 HCAs, one of each per CPU
#   node2  topologies/e2e-2gpu-amd.xml  two AMD GPUs, no network adapter; bus order is not
#                                       CPU order (the first GPU is next to CPU 1)
#   node3  topologies/e2e-nogpu.xml     no GPU; an Ethernet adapter and a disk
#   node4-9                             as node2 (4, 6, 8) and node1 (5, 7, 9): the eight-node
#                                       cases run on node1, node2 and node4-9, or node1-8
# Every node with GPUs also has two fake GPUs as GRES (gres.conf File=/dev/null, /dev/zero).
# The cases map the fixtures' GPUs without asking Slurm for them: the nodes' config files say
# require_step_gpus = false, except in the GRES case (lib.sh, MN_GRES).
#
# Prints one line per case, the failing case's commands and output, the daemons' logs if
# anything failed, notes (measured times), and finally exactly "N passed, N failed".
# Does not depend on the prefix of step errors (`slurmstepd-NODE: error:` up to 24.11,
# `[timestamp] error:` on 26.05).

set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/e2e/multinode/lib.sh
source "$HERE/lib.sh"

# The nodes and their topologies (lib.sh's mn_topology): the three of the cases above, and
# six more with GPUs for the eight-node cases (MN_MIX: NVIDIA with adapters, AMD).
mn_set_nodes 9
# shellcheck disable=SC2034 # read by lib.sh's mn_topology, by name (${!v})
MN_TOPOLOGY_node1=e2e-2gpu.xml MN_TOPOLOGY_node2=e2e-2gpu-amd.xml MN_TOPOLOGY_node3=e2e-nogpu.xml

# shellcheck source=tests/e2e/cases.sh
source "$HERE/../cases.sh"
# shellcheck source=tests/e2e/launch.sh
source "$HERE/../launch.sh"
# Every variable of the plugin's table (src/env.rs VARIABLES).
VARS=(CUDA_VISIBLE_DEVICES ROCR_VISIBLE_DEVICES ZE_AFFINITY_MASK ZE_FLAT_DEVICE_HIERARCHY NCCL_IB_HCA UCX_NET_DEVICES PSM3_NIC OMP_NUM_THREADS OMP_PLACES OMP_PROC_BIND PMIX_DEVICE_ID)
# cases.sh's case runner, for K nodes: after every case no node is drained or down; ranks
# sorted as numbers; every node's log on a failure.
CASE_CHECK=nodes_up
CASE_WIDTH=86
PROBE_SORT=(sort -V)
DUMP_LOGS=mn_dump_logs
CLUSTER_INIT=mn_init
CLUSTER_CLEANUP=mn_cleanup

# --- Helpers -----------------------------------------------------------------------------

# nodes_up: no node drained, down or failing after the case (a refusal fails the step, never
# a node); a node left so is resumed for the next case.
nodes_up() {
    local bad
    bad=$(sinfo -h -N -o '%N %T' 2>&1 | grep -Ei 'drain|down|fail' | sort -u)
    [[ -z $bad ]] && return 0
    echo "nodes not in service after the case: $(tr '\n' ';' <<<"$bad")"
    scontrol update nodename="$(mn_hostlist "${MN_NODES[@]}")" state=resume >/dev/null 2>&1 || true
    return 1
}

# A command with extra environment, in the hub (`env VAR=... srun` would run the real srun
# outside the namespaces).
hub_env() { mn_hub env "$@"; }

# tl RANK LOCAL NODE CPUS [VAR=VALUE...]: the probe's line for a task; variables not given
# are expected unset ("-"). An argument may hold several VAR=VALUE words (what n1gpu and the
# like print): no value has a space.
tl() {
    local rank=$1 local_id=$2 node=$3 cpus=$4 v kv out kvs
    shift 4
    read -ra kvs <<<"$*"
    out="rank=$rank local=$local_id node=$node host=$node cpus=$cpus"
    for v in "${VARS[@]}"; do
        local val=-
        for kv in "${kvs[@]}"; do
            [[ ${kv%%=*} == "$v" ]] && val=${kv#*=}
        done
        out+=" $v=$val"
    done
    echo "$out"
}

# The variables of each device, as the plugin sets them.
n1gpu() { echo "CUDA_VISIBLE_DEVICES=${N1_UUID[$1]}" "PMIX_DEVICE_ID=gpu://node1::nvml$1"; }
n2gpu() { echo "ROCR_VISIBLE_DEVICES=GPU-${N2_UUID[$1]}" "PMIX_DEVICE_ID=gpu://node2::rsmi$1"; }
n1hca() { echo "NCCL_IB_HCA==mlx5_$1" "UCX_NET_DEVICES=mlx5_$1:1" "PMIX_DEVICE_ID=fab://${N1_GUID[$1]}::${N1_GUID[$1]}"; }
n3nic() { echo "PMIX_DEVICE_ID=ipv4://$N3_MAC"; }

# Every node idle (not drained, not down) within a few seconds of a step's end.
expect_idle() {
    e2e_wait_for mn_all_idle 15 && return 0
    echo "not every node is idle:"
    sinfo -N -o '%N %t %E'
    return 1
}

# No step of this cluster is left: no slurmstepd process, no running job, no step socket in
# any node's spool directory.
expect_nothing_left() {
    local left
    e2e_wait_for "[[ -z \$(e2e_running_stepds) && -z \$(squeue -h -t R,CG -o %i) ]]" 15 || {
        echo "left behind: slurmstepd $(e2e_running_stepds | tr '\n' ' '); jobs $(squeue -h -t R,CG -o '%i %T' | tr '\n' ' ')"
        return 1
    }
    left=$(find "$E2E_DIR"/spool -type s 2>/dev/null)
    [[ -z $left ]] || { echo "step sockets left in the spool: $left"; return 1; }
}

# node_log_has NODE FROM TEXT: slurmd-NODE.log has TEXT after its line FROM (within 5 s:
# slurmstepd's debug lines reach the log after the step).
node_log_has() { log_file_has "$E2E_DIR/log/slurmd-$1.log" "$2" "$3"; }

# The time from a node's refusal (its slurmd log line, millisecond timestamps) to srun's
# exit (END, seconds since the epoch).
refusal_to_exit() { # NODE PATTERN END
    local stamp
    stamp=$(grep -F -- "$2" "$E2E_DIR/log/slurmd-$1.log" | tail -n1 | sed -n 's/^\[\([^]]*\)\].*/\1/p')
    [[ -n $stamp ]] || { echo "?"; return; }
    awk -v a="$(date -d "${stamp/T/ }" +%s.%N)" -v b="$3" 'BEGIN { printf "%.2f", b - a }'
}

# --- Cases -------------------------------------------------------------------------------

c_two_vendors() {
    set_plugstacks ""
    # Two tasks per node; block distribution (the default): ranks 0-1 on node1, 2-3 on node2.
    # Local ids restart on node2; each node names its own GPUs and itself.
    probe -w node1,node2 -N2 -n4 --map-by-device=gpu
    expect_rc 0 && expect_out "$(
        tl 0 0 node1 0 "$(n1gpu 0)"
        tl 1 1 node1 1 "$(n1gpu 1)"
        tl 2 0 node2 1 "$(n2gpu 0)"
        tl 3 1 node2 0 "$(n2gpu 1)"
    )"
}

c_cyclic_block() {
    set_plugstacks ""
    probe -w node1,node2 -N2 -n4 --distribution=cyclic --map-by-device=gpu
    expect_rc 0 && expect_out "$(
        tl 0 0 node1 0 "$(n1gpu 0)"
        tl 1 0 node2 1 "$(n2gpu 0)"
        tl 2 1 node1 1 "$(n1gpu 1)"
        tl 3 1 node2 0 "$(n2gpu 1)"
    )" || return 1
    probe -w node1,node2 -N2 -n4 --distribution=block --map-by-device=gpu
    expect_rc 0 && expect_out "$(
        tl 0 0 node1 0 "$(n1gpu 0)"
        tl 1 1 node1 1 "$(n1gpu 1)"
        tl 2 0 node2 1 "$(n2gpu 0)"
        tl 3 1 node2 0 "$(n2gpu 1)"
    )"
}

c_network() {
    set_plugstacks ""
    # node1's HCA next to the step's CPU; node3's Ethernet adapter (no NCCL/UCX name).
    probe -w node1,node3 -N2 -n2 --map-by-device=network
    expect_rc 0 && expect_out "$(
        tl 0 0 node1 0 "$(n1hca 0)"
        tl 1 0 node3 0 "$(n3nic)"
    )"
}

c_adapters() {
    set_plugstacks ""
    # node1's tasks: the GPU and the HCA beside it, PMIX_DEVICE_ID naming the GPU then the HCA;
    # UCX each task's own HCA, NCCL_IB_HCA the same list of node1's HCAs in both (NCCL requires
    # one value on every rank of a node), whichever global ranks node1 holds.
    local a0=("CUDA_VISIBLE_DEVICES=${N1_UUID[0]}" "NCCL_IB_HCA==mlx5_0,mlx5_1" UCX_NET_DEVICES=mlx5_0:1
        "PMIX_DEVICE_ID=gpu://node1::nvml0,fab://${N1_GUID[0]}::${N1_GUID[0]}")
    local a1=("CUDA_VISIBLE_DEVICES=${N1_UUID[1]}" "NCCL_IB_HCA==mlx5_0,mlx5_1" UCX_NET_DEVICES=mlx5_1:1
        "PMIX_DEVICE_ID=gpu://node1::nvml1,fab://${N1_GUID[1]}::${N1_GUID[1]}")
    local none="adapters: node node2 has no fabric adapter (InfiniBand or RoCE with an RDMA address, Omni-Path, Slingshot)"
    # node2 has no adapter: its tasks get their GPU alone, and node2 says so once (never a
    # silent pick); node1 says nothing.
    probe -w node1,node2 -N2 -n4 --map-by-device=gpu:adapters:verbose
    expect_rc 0 && expect_out "$(
        tl 0 0 node1 0 "${a0[@]}"
        tl 1 1 node1 1 "${a1[@]}"
        tl 2 0 node2 1 "$(n2gpu 0)"
        tl 3 1 node2 0 "$(n2gpu 1)"
    )" && expect_err "map-by-device: warning: $none" &&
        expect_err "node1, task 0 (global 0): gpu 0000:17:00.0 cuda0 ${N1_UUID[0]}, paired network 0000:18:00.0 mlx5_0; CPUs 0 set;" &&
        expect_err "node1, task 1 (global 1): gpu 0000:65:00.0 cuda1 ${N1_UUID[1]}, paired network 0000:66:00.0 mlx5_1; CPUs 1 set;" &&
        expect_err "node2, task 0 (global 2): gpu 0000:41:00.0 rsmi0 GPU-${N2_UUID[0]}; CPUs 1 set;" &&
        expect_no_err "adapters: node node1" || return 1
    [[ $(grep -c "$none" <<<"$ERR") == 1 ]] || { echo "node2's warning is not said exactly once"; show; return 1; }
    # Cyclic: node1 holds ranks 0 and 2; the ranks change, each task's pair does not.
    probe -w node1,node2 -N2 -n4 --distribution=cyclic --map-by-device=gpu:adapters
    expect_rc 0 && expect_out "$(
        tl 0 0 node1 0 "${a0[@]}"
        tl 1 0 node2 1 "$(n2gpu 0)"
        tl 2 1 node1 1 "${a1[@]}"
        tl 3 1 node2 0 "$(n2gpu 1)"
    )" || return 1
    # node3 has no GPU: an explicit gpu:adapters fails the step there, naming the node.
    run srun -w node1,node3 -N2 -n2 --map-by-device=gpu:adapters true
    expect_fail && expect_err "node node3 has no gpu devices" && expect_idle
}

c_missing_class_explicit() {
    set_plugstacks ""
    local before
    before=$(job_count)
    run srun -w node1,node3 -N2 -n2 --map-by-device=gpu bash -c 'sleep 30'
    expect_fail && expect_err "node node3 has no gpu devices" || return 1
    ((${SECS%.*} < 10)) || { echo "the step took $SECS s: node1's task was not ended"; return 1; }
    (($(job_count) == before + 1)) || { echo "expected exactly one job"; return 1; }
    expect_idle && expect_nothing_left
}

c_missing_class_default() {
    set_plugstacks "default=gpu"
    # The admin's default is soft: node3 runs unmapped, node1 is mapped. node1 runs one task
    # of the step (a launcher's daemon has this shape): a default never gives a task fewer
    # devices than the step's divided by its tasks (issue 35), so with both CPUs (-c2) it gets
    # both GPUs and the CPUs next to both, never one GPU.
    probe -w node1,node3 -N2 -n2 -c2
    expect_rc 0 && expect_out "$(
        tl 0 0 node1 0-1 "CUDA_VISIBLE_DEVICES=${N1_UUID[0]},${N1_UUID[1]}" "PMIX_DEVICE_ID=gpu://node1::nvml0,gpu://node1::nvml1"
        tl 1 0 node3 0-1
    )" && expect_no_err "map-by-device" || return 1
    grep -q "default not applied, task runs unmapped: node node3 has no gpu devices" "$E2E_DIR/log/slurmd-node3.log" ||
        { echo "slurmd-node3.log lacks the soft default's debug line"; return 1; }
    expect_idle
}

c_no_plugstack_line() {
    set_plugstacks ""
    set_node_plugstack node3 -
    # A node without the plugin: Slurm only logs it and runs the step there unmapped.
    probe -w node1,node3 -N2 -n2 --map-by-device=network
    set_plugstacks ""
    expect_rc 0 && expect_out "$(
        tl 0 0 node1 0 "$(n1hca 0)"
        tl 1 0 node3 0
    )" || return 1
    grep -q 'option "map-by-device" not found' "$E2E_DIR/log/slurmd-node3.log" ||
        { echo "slurmd-node3.log does not say the option is unknown there:"; grep -i spank "$E2E_DIR/log/slurmd-node3.log" | tail; return 1; }
}

c_het_differ() {
    set_plugstacks ""
    local before
    before=$(job_count)
    run srun -w node1 -n1 --map-by-device=gpu "$PROBE" : -w node3 -n1 --map-by-device=network "$PROBE"
    expect_fail && expect_err 'component 0: "gpu", component 1: "network"' &&
        expect_err "give every component the same --map-by-device" || return 1
    run srun -w node1 -n1 --map-by-device=gpu "$PROBE" : -w node2 -n1 "$PROBE"
    expect_fail && expect_err 'component 0: "gpu", component 1: not given' || return 1
    run sbatch -w node1 -n1 --map-by-device=gpu : -w node2 -n1 --map-by-device=network --wrap true
    expect_fail && expect_err 'component 0: "gpu", component 1: "network"' || return 1
    run salloc -w node1 -n1 --map-by-device=gpu : -w node2 -n1 --map-by-device=network true
    expect_fail && expect_err 'component 0: "gpu", component 1: "network"' || return 1
    [[ $(job_count) == "$before" ]] || { echo "a refused heterogeneous submission created a job"; squeue -t all; return 1; }
}

c_het_same() {
    set_plugstacks ""
    # One spec for both components, each mapped on its own node from that node's topology.
    run srun -w node1 -n1 --map-by-device=gpu "$PROBE" : -w node2 -n1 --map-by-device=gpu "$PROBE"
    OUT=$(sort -V <<<"$OUT")
    expect_rc 0 && expect_out "$(
        tl 0 0 node1 0 "$(n1gpu 0)"
        tl 1 0 node2 0 "$(n2gpu 1)"
    )" || return 1
    # The environment form applies to every component alike.
    run hub_env "$OPTION_ENV=network" srun -w node1 -n1 "$PROBE" : -w node3 -n1 "$PROBE"
    OUT=$(sort -V <<<"$OUT")
    expect_rc 0 && expect_out "$(
        tl 0 0 node1 0 "$(n1hca 0)"
        tl 1 0 node3 0 "$(n3nic)"
    )"
}

c_refusal_ends_step() {
    set_plugstacks ""
    local end took
    # node2 has no network adapter: its refusal ends node1's task too (it would sleep 30 s).
    run srun -w node1,node2 -N2 -n2 --map-by-device=network sleep 30
    end=$(date +%s.%N)
    expect_fail && expect_err "node node2 has no network devices: run on a node that has them" &&
        expect_err "node1: task 0: Killed" || return 1
    [[ $(grep -c "node node2 has no network devices" <<<"$ERR") == 1 ]] || { echo "refusal not said exactly once"; show; return 1; }
    ((${SECS%.*} < 10)) || { echo "srun took $SECS s"; show; return 1; }
    took=$(refusal_to_exit node2 "node node2 has no network devices" "$end")
    NOTES+=("a step refused on node2 ended on every node: srun exited $took s after the refusal ($SECS s in all, exit $RC)")
    expect_idle && expect_nothing_left || return 1
    # The same as an unprivileged user (the step is ended with the user's own credentials),
    # with a task that has a child: the whole process group goes. Slurm's proctrack/pgid then
    # polls for the group's end (after 1 s, 3 s, ...), which srun waits for.
    run mn_hub runuser -u nobody -- env SLURM_CONF="$SLURM_CONF" srun --chdir=/tmp -w node1,node2 -N2 -n2 \
        --map-by-device=network bash -c 'sleep 30; echo survived'
    expect_fail && expect_err "node node2 has no network devices" && [[ $OUT != *survived* ]] || { show; return 1; }
    ((${SECS%.*} < 10)) || { echo "srun (nobody) took $SECS s"; show; return 1; }
    NOTES+=("the same as nobody, node1's task with a child process: srun exited after $SECS s")
    expect_no_err "were not stopped" && expect_idle && expect_nothing_left
}

c_refusal_ends_het_step() {
    set_plugstacks ""
    local end took
    # A heterogeneous step: node3's component is refused, node1's component ends with it.
    # When the kill reaches srun before it saw node1's component start, srun itself waits up
    # to 10 s for every component to start (_wait_all_het_job_comps_started, 22.05-26.05).
    run srun -w node1 -n1 --map-by-device=gpu sleep 30 : -w node3 -n1 --map-by-device=gpu sleep 30
    end=$(date +%s.%N)
    expect_fail && expect_err "node node3 has no gpu devices" || return 1
    # node1's task ends with it: killed by the plugin's end of the step (22.05, 24.11, 26.05),
    # or cancelled by Slurm 25.11, which ends a failed step's other components itself
    # (SIGTERM; srun then says "Terminated", or only slurmstepd's "CANCELLED" line).
    grep -qE -- "node1: task 0: (Killed|Terminated)|STEP [0-9.]+ ON node1 CANCELLED" <<<"$ERR" ||
        { echo "stderr lacks: node1: task 0: Killed (or Terminated, or node1's step CANCELLED)"; show; return 1; }
    ((${SECS%.*} < 15)) || { echo "srun took $SECS s"; show; return 1; }
    took=$(refusal_to_exit node3 "node node3 has no gpu devices" "$end")
    NOTES+=("a heterogeneous step refused in one component: srun exited $took s after the refusal ($SECS s with the allocation)")
    expect_idle && expect_nothing_left
}

c_partial_node() {
    set_plugstacks ""
    # One CPU per node (CPU 0 on each): node2's first GPU in bus order is next to CPU 1, so
    # its task gets the other one, next to CPU 0.
    probe -w node1,node2 -N2 -n2 --map-by-device=gpu
    expect_rc 0 && expect_out "$(
        tl 0 0 node1 0 "$(n1gpu 0)"
        tl 1 0 node2 0 "$(n2gpu 1)"
    )" || return 1
    # bind=none keeps Slurm's CPU and still hands out the near GPU first.
    probe -w node1,node2 -N2 -n2 --map-by-device=gpu:bind=none
    expect_rc 0 && expect_out "$(
        tl 0 0 node1 0 "$(n1gpu 0)"
        tl 1 0 node2 0 "$(n2gpu 1)"
    )" || return 1
    # Under the admin's default the same step would leave each node's other GPU to no task:
    # a default never gives a task fewer devices than the step's divided by its tasks (issue
    # 35), so it steps aside on both nodes (unmapped, every GPU seen) and each slurmd says why.
    set_plugstacks "default=gpu"
    local n1 n2
    n1=$(wc -l <"$E2E_DIR/log/slurmd-node1.log") n2=$(wc -l <"$E2E_DIR/log/slurmd-node2.log")
    probe -w node1,node2 -N2 -n2
    expect_rc 0 && expect_out "$(
        tl 0 0 node1 0
        tl 1 0 node2 0
    )" && expect_no_err "map-by-device" || return 1
    local aside="the default gpu steps aside: it would leave 1 of the step's 2 gpu devices on"
    node_log_has node1 "$n1" "$aside node1 to no task (cuda1; they are far from the step's CPUs)" &&
        node_log_has node2 "$n2" "$aside node2 to no task (rsmi0; they are far from the step's CPUs)" || return 1
    # With both CPUs (-c2) each node's one task gets both its GPUs and the CPUs next to them.
    probe -w node1,node2 -N2 -n2 -c2
    expect_rc 0 && expect_out "$(
        tl 0 0 node1 0-1 "CUDA_VISIBLE_DEVICES=${N1_UUID[0]},${N1_UUID[1]}" "PMIX_DEVICE_ID=gpu://node1::nvml0,gpu://node1::nvml1"
        tl 1 0 node2 0-1 "ROCR_VISIBLE_DEVICES=GPU-${N2_UUID[0]},GPU-${N2_UUID[1]}" "PMIX_DEVICE_ID=gpu://node2::rsmi0,gpu://node2::rsmi1"
    )"
}

c_partial_node_too_many() {
    set_plugstacks ""
    # Two tasks on node2's CPU 0 (--overcommit): one GPU is near, the other is not.
    run srun -w node2 -n2 --overcommit --map-by-device=gpu "$PROBE"
    if [[ $RC == 0 ]]; then
        SKIPS+=("overcommit case: Slurm gave the step more than CPU 0 ($OUT)")
        return 0
    fi
    expect_err "outside them: rsmi0 at CPUs 1" && expect_idle
}

c_batch() {
    set_plugstacks ""
    local script=$E2E_DIR/work/batch.sh out=$E2E_DIR/work/batch.out
    cat >"$script" <<EOF
#!/bin/bash
#SBATCH --map-by-device=gpu
#SBATCH --nodes=2
#SBATCH --ntasks=2
#SBATCH --nodelist=node1,node2
#SBATCH --output=$out
echo "script node=\$SLURMD_NODENAME CUDA_VISIBLE_DEVICES=\${CUDA_VISIBLE_DEVICES:--} ROCR_VISIBLE_DEVICES=\${ROCR_VISIBLE_DEVICES:--}"
srun $PROBE | sort -V
srun --map-by-device=none $PROBE | sort -V
EOF
    rm -f "$out"
    run sbatch --parsable "$script"
    expect_rc 0 || return 1
    local job=$OUT
    # (sbatch --wait polls slurmctld at growing intervals: this is quicker.)
    e2e_wait_for "[[ -z \$(squeue -h -j $job -o %i 2>/dev/null) ]]" 60 || { echo "job $job did not end"; return 1; }
    [[ $(scontrol show job "$job" | grep -o 'ExitCode=[0-9:]*' | head -n1) == ExitCode=0:0 ]] ||
        { echo "job $job failed:"; scontrol show job "$job"; cat "$out"; return 1; }
    OUT=$(<"$out")
    # The batch script is not a task (not mapped); the #SBATCH spec reaches the step on both
    # nodes; an srun's own --map-by-device=none overrides it.
    expect_out "$(
        echo "script node=node1 CUDA_VISIBLE_DEVICES=- ROCR_VISIBLE_DEVICES=-"
        tl 0 0 node1 0 "$(n1gpu 0)"
        tl 1 0 node2 0 "$(n2gpu 1)"
        tl 0 0 node1 0
        tl 1 0 node2 0
    )"
}

# gres_probe SRUN-ARGS...: the GRES probe, sorted by rank. Slurm writes its GPU indices into
# CUDA_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES and ZE_AFFINITY_MASK (which of them depends on
# the release); the plugin replaces only its own vendor's, so the others keep Slurm's
# indices: any index list there (or unset) reads as "idx".
gres_probe() {
    run srun "$@" "$GPROBE"
    local idx='s/ (CUDA_VISIBLE_DEVICES|ROCR_VISIBLE_DEVICES|ZE_AFFINITY_MASK)=([0-9,]+|-)( |$)/ \1=idx\3/g'
    OUT=$(sort -V <<<"$OUT" | sed -E "$idx; $idx")
}

c_gres() {
    # The production rule (require_step_gpus unset, GresTypes=gpu): only what Slurm gave.
    MN_GRES=1 set_plugstacks ""
    local idx="ROCR_VISIBLE_DEVICES=idx ZE_AFFINITY_MASK=idx" idx2="CUDA_VISIBLE_DEVICES=idx ZE_AFFINITY_MASK=idx"
    # No GPU asked for: the step has none on either node, and is refused once, with how to ask.
    run srun -w node1,node2 -N2 -n2 --map-by-device=gpu true
    expect_fail && expect_err "the step has no GPUs on node1 (Slurm set no SLURM_STEP_GPUS): ask Slurm for them" ||
        return 1
    expect_idle || return 1
    # One GRES GPU per node, both CPUs (-c2): each GPU has one CPU near it, fewer than the two
    # each task asked for, so the plan is refused; bind=none keeps Slurm's binding and names
    # Slurm's GPU 0 on each node (bus order) to its vendor's runtime.
    run srun -w node1,node2 -N2 -n2 -c2 --gres=gpu:1 --map-by-device=gpu true
    expect_fail && expect_err "fewer than the 2 it asked Slurm for with --cpus-per-task" || return 1
    expect_idle || return 1
    gres_probe -w node1,node2 -N2 -n2 -c2 --gres=gpu:1 --map-by-device=gpu:bind=none
    expect_rc 0 && expect_out "$(
        echo "$(tl 0 0 node1 0-1 "$idx" "$(n1gpu 0)") SLURM_STEP_GPUS=0"
        echo "$(tl 1 0 node2 0-1 "$idx2" "$(n2gpu 0)") SLURM_STEP_GPUS=0"
    )" || return 1
    # Both GPUs of both nodes, two tasks per node: each task its own.
    gres_probe -w node1,node2 -N2 -n4 --gres=gpu:2 --map-by-device=gpu
    expect_rc 0 && expect_out "$(
        echo "$(tl 0 0 node1 0 "$idx" "$(n1gpu 0)") SLURM_STEP_GPUS=0,1"
        echo "$(tl 1 1 node1 1 "$idx" "$(n1gpu 1)") SLURM_STEP_GPUS=0,1"
        echo "$(tl 2 0 node2 1 "$idx2" "$(n2gpu 0)") SLURM_STEP_GPUS=0,1"
        echo "$(tl 3 1 node2 0 "$idx2" "$(n2gpu 1)") SLURM_STEP_GPUS=0,1"
    )"
}

c_twenty_steps() {
    set_plugstacks ""
    local i want
    want=$(
        tl 0 0 node1 0 "$(n1hca 0)"
        tl 1 0 node3 0 "$(n3nic)"
    )
    for ((i = 1; i <= 20; i++)); do
        if ((i % 2)); then
            probe -w node1,node3 -N2 -n2 --map-by-device=network
            expect_rc 0 && expect_out "$want" || { echo "(step $i)"; return 1; }
        else
            probe -w node1,node2 -N2 -n4 --map-by-device=gpu
            expect_rc 0 && expect_out "$(
                tl 0 0 node1 0 "$(n1gpu 0)"
                tl 1 1 node1 1 "$(n1gpu 1)"
                tl 2 0 node2 1 "$(n2gpu 0)"
                tl 3 1 node2 0 "$(n2gpu 1)"
            )" || { echo "(step $i)"; return 1; }
        fi
    done
    expect_nothing_left && expect_idle
}

# --- Eight nodes: node1, node2 and node4-9 have GPUs (NVIDIA with an HCA each on the odd
# ones, AMD on the even ones), node3 none. -------------------------------------------------

EIGHT=(node1 node2 node4 node5 node6 node7 node8 node9)

# gpu_lines RANK NODE...: the probe's lines of two tasks per node under --map-by-device=gpu,
# block distribution, ranks from RANK: each node its own two GPUs, named from its fixture
# (node1's UUIDs on the NVIDIA nodes, node2's on the AMD ones), its own name in PMIX_DEVICE_ID.
gpu_lines() {
    local rank=$1 node
    shift
    for node in "$@"; do
        if [[ $(mn_topology "$node") == e2e-2gpu.xml ]]; then
            tl "$rank" 0 "$node" 0 "CUDA_VISIBLE_DEVICES=${N1_UUID[0]}" "PMIX_DEVICE_ID=gpu://$node::nvml0"
            tl $((rank + 1)) 1 "$node" 1 "CUDA_VISIBLE_DEVICES=${N1_UUID[1]}" "PMIX_DEVICE_ID=gpu://$node::nvml1"
        else
            tl "$rank" 0 "$node" 1 "ROCR_VISIBLE_DEVICES=GPU-${N2_UUID[0]}" "PMIX_DEVICE_ID=gpu://$node::rsmi0"
            tl $((rank + 1)) 1 "$node" 0 "ROCR_VISIBLE_DEVICES=GPU-${N2_UUID[1]}" "PMIX_DEVICE_ID=gpu://$node::rsmi1"
        fi
        rank=$((rank + 2))
    done
}

# from_cache NODE...: each node's last planned step read its topology from its slurmd's cache
# (with MN_SOURCE=xml: from its topology= file).
from_cache() {
    local node line want="topology from slurmd's cache $E2E_DIR/nodes/"
    [[ $MN_SOURCE == xml ]] && want="topology $E2E_DIR/topologies/"
    for node in "$@"; do
        line=$(grep -F 'map-by-device: planned' "$E2E_DIR/log/slurmd-$node.log" | tail -n 1)
        [[ $line == *"$want"* ]] || { echo "$node's last step did not plan from its cache: ${line:-no planned line}"; return 1; }
    done
}

c_eight_nodes() {
    set_plugstacks ""
    local t0=$SECONDS
    probe -w "$(mn_hostlist "${EIGHT[@]}")" -N8 -n16 --map-by-device=gpu
    expect_rc 0 && expect_out "$(gpu_lines 0 "${EIGHT[@]}")" && from_cache "${EIGHT[@]}" || return 1
    NOTES+=("an eight-node step of 16 tasks mapped from the caches: $SECS s")
    # gpu:adapters: the NVIDIA nodes' tasks get their GPU and its HCA, each AMD node (no HCA)
    # says once that it has none; every node's GPUs as before.
    run srun -w "$(mn_hostlist "${EIGHT[@]}")" -N8 -n16 --map-by-device=gpu:adapters "$PROBE"
    expect_rc 0 || return 1
    local node
    for node in "${EIGHT[@]}"; do
        if [[ $(mn_topology "$node") == e2e-2gpu.xml ]]; then
            grep -q "node=$node .*UCX_NET_DEVICES=mlx5_0:1 .*PMIX_DEVICE_ID=gpu://$node::nvml0,fab://" <<<"$OUT" ||
                { echo "$node's task 0 lacks its HCA"; show; return 1; }
        else
            [[ $(grep -c "adapters: node $node has no fabric adapter" <<<"$ERR") == 1 ]] ||
                { echo "$node's warning is not said exactly once"; show; return 1; }
        fi
    done
}

c_eight_refusal() {
    set_plugstacks ""
    local end took killed
    # node3 (no GPU) among eight: its refusal ends the seven other nodes' tasks (sleep 30).
    run srun -w "node[1-8]" -N8 -n16 --map-by-device=gpu sleep 30
    end=$(date +%s.%N)
    expect_fail && expect_err "node node3 has no gpu devices" || return 1
    [[ $(grep -c "node node3 has no gpu devices" <<<"$ERR") == 1 ]] || { echo "refusal not said exactly once"; show; return 1; }
    ((${SECS%.*} < 10)) || { echo "srun took $SECS s: the other nodes' tasks were not ended"; show; return 1; }
    took=$(refusal_to_exit node3 "node node3 has no gpu devices" "$end")
    killed=$(grep -cE "node[0-9]+: tasks? [0-9,-]+: (Killed|Terminated)" <<<"$ERR")
    NOTES+=("one node of eight refused (no GPU): srun exited $took s after the refusal ($SECS s in all, exit $RC, $killed nodes' tasks said Killed)")
    expect_idle && expect_nothing_left || return 1
    # A bad topology on node5 (its topology= file does not exist): the same.
    mn_write_plugstack node5 "topology=$E2E_DIR/topologies/missing.xml"
    run srun -w "$(mn_hostlist "${EIGHT[@]}")" -N8 -n16 --map-by-device=gpu sleep 30
    end=$(date +%s.%N)
    set_plugstacks ""
    expect_fail && expect_err "missing.xml" || return 1
    ((${SECS%.*} < 10)) || { echo "srun took $SECS s: the other nodes' tasks were not ended"; show; return 1; }
    NOTES+=("one node of eight with a bad topology= file: srun exited after $SECS s (exit $RC)")
    expect_idle && expect_nothing_left
}

c_eight_het() {
    set_plugstacks ""
    # Two components of four nodes each, one spec: each node mapped from its own cache, the
    # second component's ranks after the first's.
    run srun -w node1,node2,node4,node5 -N4 -n8 --map-by-device=gpu "$PROBE" : \
        -w node6,node7,node8,node9 -N4 -n8 --map-by-device=gpu "$PROBE"
    OUT=$(sort -V <<<"$OUT")
    expect_rc 0 && expect_out "$(gpu_lines 0 node1 node2 node4 node5; gpu_lines 8 node6 node7 node8 node9)" &&
        from_cache "${EIGHT[@]}"
}

c_eight_twenty() {
    set_plugstacks ""
    local i want t0=$SECONDS
    want=$(gpu_lines 0 "${EIGHT[@]}")
    # Every fifth step checks every task's mapping; the others run `true`, mapped alike.
    for ((i = 1; i <= 20; i++)); do
        if ((i % 5 == 0)); then
            probe -w "$(mn_hostlist "${EIGHT[@]}")" -N8 -n16 --map-by-device=gpu
            expect_rc 0 && expect_out "$want" || { echo "(step $i)"; return 1; }
        else
            run srun -w "$(mn_hostlist "${EIGHT[@]}")" -N8 -n16 --map-by-device=gpu true
            expect_rc 0 || { echo "(step $i)"; return 1; }
        fi
    done
    NOTES+=("20 eight-node steps of 16 tasks: $((SECONDS - t0)) s")
    expect_nothing_left && expect_idle
}

# Ranks another launcher starts (issue 35; tests/e2e/launch.sh), two per node: under the
# admin's default=gpu and default=gpu:interleave, Open MPI's mpirun and MPICH's mpiexec.hydra -launcher slurm on
# node1-3 (node3 has no GPU: its ranks run unmapped), with and without
# --external-launcher where srun has it; every rank follows the default's rule, and each
# run is a note (issue 35's table).
mn_launch_default() {
    local kind=$1 ext exts=(plain) bad=0 spec
    launch_available "$kind" || return 0
    ((EXT_LAUNCHER)) && exts+=(ext)
    LAUNCH_WHERE=(-w "node1,node2,node3" -N3)
    for spec in gpu gpu:interleave; do
        set_plugstacks "default=$spec"
        for ext in "${exts[@]}"; do
            launch "$kind" "$ext" 6 "$RPROBE"
            expect_rc 0 || { bad=1; continue; }
            launch_note "Slurm $SLURM_VERSION, 3 nodes, $(launch_label "$kind" "$ext"), default=$spec"
            expect_default_ranks 6 || { echo "($spec, $ext)"; bad=1; }
            grep -q " node=node3 .*CUDA_VISIBLE_DEVICES=-" <<<"$OUT" || { echo "no rank on node3"; show; bad=1; }
        done
    done
    LAUNCH_WHERE=()
    return $bad
}

# The same launchers with `map-by-device exec gpu` on node1 and node2: every rank gets what
# srun --map-by-device=gpu gives the task of its rank on its node.
mn_launch_exec() {
    local kind=$1 ref
    launch_available "$kind" || return 0
    launch_build_cli || { echo "no map-by-device CLI at $MBD"; return 1; }
    "$MBD" exec --help >/dev/null 2>&1 || { echo "$MBD has no exec command (issue 35)"; return 1; }
    set_plugstacks ""
    run srun -w node1,node2 -N2 -n4 --map-by-device=gpu env LAUNCH_KIND=slurm "$RPROBE"
    OUT=$("${PROBE_SORT[@]}" <<<"$OUT")
    expect_rc 0 || return 1
    ref=$OUT
    LAUNCH_WHERE=(-w "node1,node2" -N2)
    # Each node here has its own slurm.conf (SLURM_CONF, set by its slurmd for its tasks),
    # where a real node reads its own /etc/slurm. Hydra forwards mpiexec's environment to
    # every rank, the hub's SLURM_CONF with it: the wrapper gives the rank its node's back.
    local wrap=$E2E_DIR/work/node-conf.sh
    printf '#!/bin/sh\nSLURM_CONF=%s/etc/slurm-$SLURMD_NODENAME.conf exec "$@"\n' "$E2E_DIR" >"$wrap"
    chmod 755 "$wrap"
    if [[ $kind == hydra ]]; then
        launch "$kind" plain 4 "$wrap" "$MBD" exec gpu -- "$RPROBE"
    else
        launch "$kind" plain 4 "$MBD" exec gpu -- "$RPROBE"
    fi
    LAUNCH_WHERE=()
    expect_rc 0 && expect_same_ranks "$ref" || return 1
    launch_note "Slurm $SLURM_VERSION, 2 nodes, $(launch_label "$kind" plain) map-by-device exec, spec gpu"
}

c_launch_ompi_default() { mn_launch_default ompi; }
c_launch_hydra_default() { mn_launch_default hydra; }
c_launch_ompi_exec() { mn_launch_exec ompi; }
c_launch_hydra_exec() { mn_launch_exec hydra; }

CASES=(
    "-N2 GPUs of two vendors: local ids restart per node, each node's own UUIDs and host|c_two_vendors"
    "--distribution=cyclic and block|c_cyclic_block"
    "network across nodes: an InfiniBand HCA on node1, Ethernet on node3|c_network"
    "gpu:adapters across nodes: node1's tasks their GPU and its HCA, node2 (no HCA) warned once|c_adapters"
    "a node without GPUs, explicit spec: the whole step fails naming node3|c_missing_class_explicit"
    "a node without GPUs, admin default: unmapped there, node1's one task every GPU|c_missing_class_default"
    "a node without the plugstack line runs the step unmapped; slurmd says so|c_no_plugstack_line"
    "heterogeneous (defect 1): differing specs are refused in srun/sbatch/salloc|c_het_differ"
    "heterogeneous (defect 1): one spec (option or environment) maps each component|c_het_same"
    "refusal (defect 2): node2's refusal ends node1's task promptly, as root and nobody|c_refusal_ends_step"
    "refusal (defect 2): a heterogeneous step ends in every component|c_refusal_ends_het_step"
    "partial node (defect 3): a step on CPU 0 gets the GPU next to CPU 0; a default steps aside|c_partial_node"
    "partial node (defect 3): more tasks than near GPUs is refused naming the far one|c_partial_node_too_many"
    "a batch job's #SBATCH --map-by-device reaches its steps on every node|c_batch"
    "GRES GPUs across two nodes: a step given none has none; -c above a GPU's CPUs refused, bind=none maps|c_gres"
    "20 consecutive multi-node steps, nothing left behind|c_twenty_steps"
    "launchers: mpirun ranks on 3 nodes under default=gpu and gpu:interleave: each node's GPUs whole or none, node3 unmapped|c_launch_ompi_default"
    "launchers: mpiexec.hydra ranks on 3 nodes under default=gpu and gpu:interleave: each node's GPUs whole or none|c_launch_hydra_default"
    "launchers: map-by-device exec under mpirun on 2 nodes maps each rank as srun does|c_launch_ompi_exec"
    "launchers: map-by-device exec under mpiexec.hydra on 2 nodes maps each rank as srun does|c_launch_hydra_exec"
    "eight nodes: a 16-task step mapped on every node from its cache (gpu, gpu:adapters)|c_eight_nodes"
    "eight nodes: one refuses (no GPU, bad topology): the step ends everywhere, no drain|c_eight_refusal"
    "eight nodes: a heterogeneous step of two four-node components|c_eight_het"
    "eight nodes: 20 consecutive 16-task steps, nothing left behind|c_eight_twenty"
)

# --- Main --------------------------------------------------------------------------------

# xml_info FILE BUSID KEY: the first info KEY after the PCI function BUSID.
xml_info() {
    awk -v bus="pci_busid=\"$2\"" -v key="name=\"$3\"" '
        index($0, bus) { on = 1 }
        on && index($0, key) { sub(/.*value="/, ""); sub(/".*/, ""); print; exit }' "$1"
}

main() {
    local t0=$SECONDS entry wanted=()
    e2e_require_root "tests/e2e/multinode/run.sh starts slurmd and slurmctld in network namespaces"
    for entry in "${CASES[@]}"; do
        [[ -z $FILTER || ${entry%%|*} == *"$FILTER"* ]] && wanted+=("$entry")
    done
    e2e_install_packages "${MN_PACKAGES[@]}" "${E2E_LAUNCHER_PACKAGES[@]}" || abort "installing the Debian packages"
    e2e_build_plugin || abort "building the plugin"
    local t1 t2 t3
    t1=$E2E_ROOT/topologies/$(mn_topology node1)
    t2=$E2E_ROOT/topologies/$(mn_topology node2)
    t3=$E2E_ROOT/topologies/$(mn_topology node3)
    N1_UUID=("$(xml_info "$t1" 0000:17:00.0 NVIDIAUUID)" "$(xml_info "$t1" 0000:65:00.0 NVIDIAUUID)")
    N1_GUID=("$(xml_info "$t1" 0000:18:00.0 NodeGUID)" "$(xml_info "$t1" 0000:66:00.0 NodeGUID)")
    N2_UUID=("$(xml_info "$t2" 0000:41:00.0 AMDUUID)" "$(xml_info "$t2" 0000:c1:00.0 AMDUUID)")
    N3_MAC=$(xml_info "$t3" 0000:01:00.0 Address)
    for v in "${N1_UUID[@]}" "${N1_GUID[@]}" "${N2_UUID[@]}" "$N3_MAC"; do
        [[ -n $v ]] || abort "reading the fixtures' identities ($t1 $t2 $t3)"
    done

    cases_init
    # cases_init's probe (PROBE) made multi-node: the task's rank, node and host too, and
    # every variable the plugin may set.
    cat >"$PROBE" <<EOF
#!/bin/bash
# One line per task: rank, local id, Slurm's node name and gethostname(), CPUs, and every
# variable the plugin may set ("-" when unset).
out="rank=\$SLURM_PROCID local=\$SLURM_LOCALID node=\$SLURMD_NODENAME host=\$(cat /proc/sys/kernel/hostname)"
out+=" cpus=\$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)"
for v in ${VARS[*]}; do
    val=\$(env | sed -n "s/^\$v=//p")
    out+=" \$v=\${val:--}"
done
echo "\$out"
EOF
    # The GRES probe: the same, plus the GPUs Slurm gave the step.
    GPROBE=$E2E_DIR/work/gprobe.sh
    printf '#!/bin/bash\necho "$(%s) SLURM_STEP_GPUS=${SLURM_STEP_GPUS:--}"\n' "$PROBE" >"$GPROBE"
    chmod 755 "$PROBE" "$GPROBE"

    # The launcher cases' ranks (the probe prints every variable already) and the nodes' GPUs
    # (after mn_net_up: launch_init asks the hub's srun what it has).
    MBD_NODE_GPUS[node1]=${N1_UUID[0]},${N1_UUID[1]} MBD_NODE_GPU_CPUS[node1]=0-1
    MBD_NODE_GPUS[node2]=GPU-${N2_UUID[0]},GPU-${N2_UUID[1]} MBD_NODE_GPU_CPUS[node2]=0-1
    MBD_GPU_NAME[${N1_UUID[0]}]=nvml0 MBD_GPU_NAME[${N1_UUID[1]}]=nvml1
    MBD_GPU_NAME[GPU-${N2_UUID[0]}]=rsmi0 MBD_GPU_NAME[GPU-${N2_UUID[1]}]=rsmi1
    mn_net_up || abort "creating the network namespaces"
    launch_init
    local t_start=$SECONDS
    mn_cluster_start || { mn_dump_logs; abort "starting the ${#MN_NODES[@]}-node cluster"; }
    NOTES+=("cluster start took $((SECONDS - t_start)) s")
    for entry in "${wanted[@]}"; do
        run_case "${entry%%|*}" "${entry##*|}"
    done
    local t_stop=$SECONDS
    mn_cluster_stop
    NOTES+=("cluster stop took $((SECONDS - t_stop)) s; the suite $((SECONDS - t0)) s")
    summary
    ((FAILED == 0))
}

main "$@"
