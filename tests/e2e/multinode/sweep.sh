#!/usr/bin/env bash
# Benchmark, not a test: what the plugin adds to a step as the node count grows. Starts one
# private cluster of the largest K (lib.sh: one slurmd per network namespace, every node with
# GPUs: NVIDIA with an mlx5 HCA each on odd nodes, AMD without adapter on even ones, each
# node's topology from its slurmd's cache, Slurm's tree fan-out at its default), then times
# `srun -N K -n 2K -w node[1-K] true` for each K, in interleaved rounds (each round runs every
# K and every setting, in a new random order) with four settings:
#
#   empty     no plugin on any node nor in srun (the reference)
#   unused    the plugin loaded everywhere, the job gives no spec
#   gpu       --map-by-device=gpu: every node plans its two tasks from its cache and binds them
#   adapters  --map-by-device=gpu:adapters: the NVIDIA nodes also pair each GPU with its HCA
#
# Per K and setting it reports the median wall time of the steps and the median of the
# per-round ratios to "empty"; and, told apart from what the step's wall time does on one
# shared host (where K nodes' work adds up on 2 CPUs, while a cluster pays it in parallel):
#   srun CPU         srun's own user+system time (its option and heterogeneous checks, and
#                    loading the plugin, besides everything srun does for K nodes);
#   node CPU / node  the CPU time of every slurmd and what it starts (slurmstepd and the tasks,
#                    all in one cpuacct cgroup this script makes), per step, divided by K;
#   plan / node      the plugin's user_init per node (its "planned ... in X ms" debug line in
#                    each slurmd's log, matched to the step by its job id);
#   memory           slurmd's resident size per node (idle), and slurmstepd's during a step.
# Then, at K=64 and at the largest K, one node is made to refuse (its plugin line names a
# topology without GPUs) under a step of `sleep 30` tasks: the time from its refusal to srun's
# exit, and to the last slurmstepd's exit, and whether any node is left drained.
#
#   flock /tmp/mbd-slurm.lock tests/e2e/multinode/sweep.sh                    # K = 1 8 16 32 64 128, 7 rounds
#   SWEEP_K="1 8 16 64" SWEEP_ROUNDS=21 flock /tmp/mbd-slurm.lock tests/e2e/multinode/sweep.sh
#
# On a 2-CPU machine 128 nodes is the largest K this times: 256 start (about 2 GB), but a
# 256-node step of 512 tasks takes 25 s and some launches miss Slurm's 10 s MessageTimeout
# ("Communication connection failure"). docs/plugin.md, "Many nodes", has the figures.
#
# Writes SWEEP_OUT (default target/sweep/<time>): samples.txt (one line per step), plan.txt
# (one line per node and step), report.txt (the table), ratio.svg (ratio against K, drawn by
# sweep-report.py with the standard library only). Root only; hold the machine's lock.

set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/e2e/multinode/lib.sh
source "$HERE/lib.sh"

read -ra KS <<<"${SWEEP_K:-1 8 16 32 64 128}"
ROUNDS=${SWEEP_ROUNDS:-7}
CONFIGS=(empty unused gpu adapters)
KMAX=$(printf '%s\n' "${KS[@]}" | sort -n | tail -n 1)
OUTDIR=${SWEEP_OUT:-$E2E_ROOT/target/sweep/$(date +%Y%m%d-%H%M%S)}
CGROUP=""

[[ $(id -u) == 0 ]] || { echo "sweep.sh starts slurmd and slurmctld in network namespaces: run it as root" >&2; exit 1; }
mkdir -p "$OUTDIR" || exit 1
e2e_install_packages "${MN_PACKAGES[@]}" || exit 1
e2e_build_plugin || exit 1

# Every node has GPUs here (MN_MIX): the steps are mapped on all of them.
mn_set_nodes "$KMAX"
MN_SOURCE=cache

sweep_cleanup() {
    mn_cleanup
    if [[ -n $CGROUP && -d $CGROUP ]]; then
        # Its processes go with the cluster (the last slurmstepd may take a few seconds).
        e2e_wait_for "[[ -z \$(cat '$CGROUP/cgroup.procs') ]]" 60
        rmdir "$CGROUP" 2>/dev/null || mn_log "could not remove $CGROUP: $(cat "$CGROUP/cgroup.procs" 2>/dev/null | tr '\n' ' ')"
    fi
}

mn_init || exit 1
trap sweep_cleanup EXIT
trap 'exit 130' INT TERM
mn_net_up || exit 1
t0=$(date +%s%N)
mn_cluster_start || { mn_dump_logs; exit 1; }
start_s=$(awk -v a="$t0" -v b="$(date +%s%N)" 'BEGIN {printf "%.1f", (b - a) / 1e9}')

# Every slurmd (and so every slurmstepd and task it starts) in one cpuacct cgroup: its usage
# counter is the nodes' CPU time. Slurm itself uses no cgroup here (proctrack/pgid).
if [[ -d /sys/fs/cgroup/cpuacct ]]; then
    CGROUP=/sys/fs/cgroup/cpuacct/mbd-sweep-$$
    mkdir "$CGROUP" || CGROUP=""
fi
if [[ -n $CGROUP ]]; then
    for node in "${MN_NODES[@]}"; do
        echo "${E2E_PIDS[slurmd-$node]}" >"$CGROUP/cgroup.procs" || { mn_log "cannot move slurmd-$node into $CGROUP"; exit 1; }
    done
fi
node_cpu_ns() { if [[ -n $CGROUP ]]; then cat "$CGROUP/cpuacct.usage"; else echo 0; fi; }

# slurmd's resident size per node, idle (kB), and the cluster's memory.
rss_of() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null; }
slurmd_rss=$(for node in "${MN_NODES[@]}"; do rss_of "${E2E_PIDS[slurmd-$node]}"; done | sort -n |
    awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}')
munged_rss=$(rss_of "${E2E_PIDS[munged-node1]}")
# Every daemon of the cluster (K slurmd, K + 1 munged, slurmctld), resident, in MiB.
cluster_rss=$(for name in "${!E2E_PIDS[@]}"; do rss_of "${E2E_PIDS[$name]}"; done | awk '{s += $1} END {printf "%.0f", s / 1024}')

# configure NAME: plugstack files and srun's option (OPT) for one setting. The files are
# rewritten only when they change (unused, gpu and adapters share them).
PLUGSTACKS=""
configure() {
    local want=plugin
    [[ $1 == empty ]] && want=empty
    if [[ $want != "$PLUGSTACKS" ]]; then
        if [[ $want == empty ]]; then set_plugstacks_empty; else set_plugstacks ""; fi
        PLUGSTACKS=$want
    fi
    case $1 in
        empty | unused) OPT=() ;;
        gpu) OPT=(--map-by-device=gpu) ;;
        adapters) OPT=(--map-by-device=gpu:adapters) ;;
    esac
}

# The job ids are consecutive: each srun below makes one job, and JOB counts them.
JOB=$(srun -N1 -n1 -w node1 printenv SLURM_JOB_ID) || { mn_dump_logs; exit 1; }

# stepds: the slurmstepd processes still running (an exited one may wait a moment for init to
# reap it: not counted).
stepds() { e2e_running_stepds | wc -l; }
# quiet: no slurmstepd left from the step before (its teardown is not the next step's).
quiet() { e2e_wait_for "(( \$(stepds) == 0 ))" 30 || mn_log "slurmstepd still running: $(stepds)"; }

# step K SETTING ROUND: one timed step; a line in samples.txt.
step() {
    local k=$1 c=$2 r=$3 tf cpu0 cpu1 times
    quiet
    tf=$(mktemp)
    cpu0=$(node_cpu_ns)
    local TIMEFORMAT='%3R %3U %3S'
    { time srun -N "$k" -n $((2 * k)) -w "node[1-$k]" "${OPT[@]}" true >/dev/null 2>"$OUTDIR/last.err"; } 2>"$tf" ||
        { echo "srun -N $k ${OPT[*]} failed:"; cat "$OUTDIR/last.err"; exit 1; }
    JOB=$((JOB + 1))
    quiet
    cpu1=$(node_cpu_ns)
    times=$(tail -n 1 "$tf")
    rm -f "$tf"
    # K SETTING ROUND JOB WALL_MS SRUN_CPU_MS NODES_CPU_MS
    awk -v k="$k" -v c="$c" -v r="$r" -v j="$JOB" -v t="$times" -v a="$cpu0" -v b="$cpu1" \
        'BEGIN {split(t, x, " "); printf "%d %s %d %d %.1f %.1f %.1f\n", k, c, r, j, x[1] * 1000, (x[2] + x[3]) * 1000, (b - a) / 1e6}' \
        >>"$OUTDIR/samples.txt"
}

: >"$OUTDIR/samples.txt"
mn_log "warming up: one step of each setting at each K (${KS[*]})"
for k in "${KS[@]}"; do
    for c in "${CONFIGS[@]}"; do
        configure "$c"
        step "$k" "$c" 0
    done
done
load0=$(cut -d' ' -f1-3 /proc/loadavg)
t_rounds=$SECONDS
for ((r = 1; r <= ROUNDS; r++)); do
    mn_log "round $r of $ROUNDS (load $(cut -d' ' -f1 /proc/loadavg))"
    for k in $(printf '%s\n' "${KS[@]}" | shuf); do
        for c in $(printf '%s\n' "${CONFIGS[@]}" | shuf); do
            configure "$c"
            step "$k" "$c" "$r"
        done
    done
done
load1=$(cut -d' ' -f1-3 /proc/loadavg)
rounds_s=$((SECONDS - t_rounds))
# The count of jobs must still match (else the plan lines cannot be matched to their steps).
last=$(srun -N1 -n1 -w node1 printenv SLURM_JOB_ID)
[[ $last == $((JOB + 1)) ]] || mn_log "job ids: expected $((JOB + 1)) next, got $last: plan/node is not per K"

# slurmstepd's resident size during a step at the largest K, with the plugin mapping and with
# no plugin (kB, median over the nodes).
stepd_rss() {
    local c=$1 pid
    configure "$c"
    quiet
    srun -N "$KMAX" -n $((2 * KMAX)) -w "node[1-$KMAX]" "${OPT[@]}" sleep 5 >/dev/null 2>&1 &
    local srun_pid=$!
    # Every node's slurmstepd started, and its tasks (sleep) forked.
    e2e_wait_for "(( \$(stepds) >= $KMAX && \$(pgrep -xc sleep) >= $((2 * KMAX)) ))" 20
    sleep 0.5
    for pid in $(ps -C slurmstepd -o pid=,stat= | awk '$2 !~ /^Z/ {print $1}'); do rss_of "$pid"; done | sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'
    wait "$srun_pid"
}
# (In a subshell: configure there must write the files whatever the parent last wrote.)
PLUGSTACKS=""
stepd_rss_empty=$(stepd_rss empty)
stepd_rss_gpu=$(stepd_rss gpu)

# refusal_at K: one node of K refuses (the last one: its plugin line names a topology without
# GPUs) under a step of `sleep 30` tasks; one line: srun's exit after the refusal (its
# slurmd.log line), the last slurmstepd's, and any node left not idle.
refusal_at() {
    local k=$1 t0 t1 t2 rc stamp refused_at not_idle line
    PLUGSTACKS=""
    configure gpu
    mn_write_plugstack "node$k" "topology=$E2E_DIR/topologies/e2e-nogpu.xml"
    PLUGSTACKS=refusal
    quiet
    t0=$(date +%s.%N)
    srun -N "$k" -n $((2 * k)) -w "node[1-$k]" --map-by-device=gpu sleep 30 >/dev/null 2>"$OUTDIR/refusal-$k.err"
    rc=$?
    t1=$(date +%s.%N)
    e2e_wait_for "(( \$(stepds) == 0 ))" 30
    t2=$(date +%s.%N)
    configure gpu
    JOB=$((JOB + 1))
    stamp=$(grep -F "node node$k has no gpu devices" "$E2E_DIR/log/slurmd-node$k.log" | tail -n 1 | sed -n 's/^\[\([^]]*\)\].*/\1/p')
    refused_at=$(date -d "${stamp/T/ }" +%s.%N 2>/dev/null || echo "$t0")
    e2e_wait_for mn_all_idle 30
    not_idle=$(sinfo -h -N -o '%N %t' | awk '$2 != "idle"' | sort -u | tr '\n' ' ')
    line=$(awk -v a="$t0" -v b="$t1" -v c="$t2" -v f="$refused_at" -v rc="$rc" -v k="$k" \
        'BEGIN {printf "refusal at K=%d (node%d without GPUs, sleep 30 tasks): srun exit %d after %.2f s, %.2f s after the refusal; last slurmstepd gone %.2f s after the refusal", k, k, rc, b - a, b - f, c - f}')
    line+="; nodes not idle after: ${not_idle:-none}"
    grep -q "node node$k has no gpu devices" "$OUTDIR/refusal-$k.err" ||
        line+="; NOT the expected refusal: $(head -c 300 "$OUTDIR/refusal-$k.err" | tr '\n' ' ')"
    echo "$line"
}
refusals=()
for k in $(printf '%s\n' 64 "$KMAX" | sort -nu); do
    ((k <= KMAX)) && refusals+=("$(refusal_at "$k")")
done

# The plugin's planning time on each node and step (its debug line), with the step's job id.
for node in "${MN_NODES[@]}"; do
    sed -n "s/.*\[\([0-9]*\)\.[0-9]*\].*map-by-device: planned \([0-9]*\) tasks for \([^ ]*\) in \([0-9.]*\) ms.*/\1 \3 \4/p" \
        "$E2E_DIR/log/slurmd-$node.log" | sed "s/^/$node /"
done >"$OUTDIR/plan.txt"

{
    echo "Slurm $(srun --version | awk '{print $NF}') ($(scontrol show config | awk '$1 == "TreeWidth" {print "TreeWidth " $3}')), $(nproc) CPUs, $(awk '/^MemTotal:/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo); $ROUNDS interleaved rounds ($rounds_s s) after one warm-up; load $load0 before, $load1 after"
    echo "cluster of $KMAX nodes: started in $start_s s, its daemons ${cluster_rss} MiB resident; slurmd ${slurmd_rss} kB and munged ${munged_rss} kB resident per node (idle); slurmstepd ${stepd_rss_empty} kB (no plugin) and ${stepd_rss_gpu} kB (gpu) during a step at K=$KMAX"
    printf '%s\n' "${refusals[@]}"
} >"$OUTDIR/head.txt"
python3 "$HERE/sweep-report.py" "$OUTDIR" | tee "$OUTDIR/report.txt"
mn_log "written: $OUTDIR/{report.txt,ratio.svg,samples.txt,plan.txt}"
