#!/usr/bin/env bash
# End-to-end suite: the plugin on a real single-node Slurm (22.05, 24.11 or 26.05: Debian's) that this script starts on
# localhost (tests/e2e/lib.sh), driven with real srun/sbatch/salloc, checked from inside the
# tasks (Cpus_allowed_list in /proc/self/status, env).
#
#   tests/e2e/run.sh              # every case (root; installs the Debian packages if missing)
#   tests/e2e/run.sh closest      # only the cases whose name contains "closest"
#   E2E_KEEP=1 tests/e2e/run.sh   # keep the private directory (configs, logs) afterwards
#
# Phases: task/affinity (8 CPUs declared on the real 2, like the facts notes); task/affinity
# with the real layout; task/cgroup with ConstrainCores (cgroup v1; skipped with a note where
# v1 is not mounted); the same with two fake GPUs as GRES (gres.conf File=/dev/null and
# /dev/zero) and GPU identities from NVIDIA driver files (topologies/drivers/nvidia/proc);
# task/affinity with GresTypes=gpu but no GPU GRES on the node; live discovery with slurmd's
# topology cache; and hostile local users (security:, some with a test-hooks build).
# Topologies: topologies/e2e-2gpu.xml (two packages, one core, one GPU and one HCA each),
# its GPU-without-identity twin e2e-2gpu-drm.xml, e2e-1socket-2gpu.xml (one package: both
# GPUs and HCAs local to both cores), and tests/e2e/fixtures/e2e-snc-2gpu.xml (one package, a
# device per core: bind=package is above the devices' locality).
# The reader cases (reader: ...) check variables with the programs that read them, inside
# the tasks: libgomp, through tests/e2e/fixtures/omp_places.c (built here with gcc
# -fopenmp: the place and CPU of each OpenMP thread), and UCX's ucx_info (UCX_NET_DEVICES as
# UCX parsed it, and the devices it warned it lacks); numactl --show for the task's binding
# (lib.sh's E2E_READER_PACKAGES).
#
# Prints one line per case, the failing case's commands and output, the daemons' logs if
# anything failed, and finally exactly "N passed, N failed"; exits 1 on any failure.

set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/e2e/lib.sh
source "$HERE/lib.sh"
# shellcheck source=tests/e2e/cases.sh
source "$HERE/cases.sh"
# shellcheck source=tests/e2e/launch.sh
source "$HERE/launch.sh"

# --- Cases: task/affinity ----------------------------------------------------------------

c_help() {
    local cmd
    set_plugstack "topology=$FIX"
    for cmd in srun sbatch salloc; do
        run "$cmd" --help
        expect_rc 0 || return 1
        grep -q -- '--map-by-device=spec' <<<"$OUT" || { echo "$cmd --help does not list --map-by-device"; return 1; }
        # Every qualifier, adapters among them (issue 24).
        grep -qw -- 'adapters' <<<"$OUT" || { echo "$cmd --help does not list adapters"; return 1; }
    done
}

c_gpu() {
    set_plugstack "topology=$FIX"
    probe -n 2 --map-by-device=gpu
    expect_rc 0 && expect_out "$GPU_LINES"
}

c_interleave() {
    set_plugstack "topology=$FIX"
    probe -n 2 --map-by-device=gpu:interleave
    expect_rc 0 && expect_out "$GPU_LINES"
}

c_bind_none() {
    set_plugstack "topology=$FIX"
    probe -n 2 --map-by-device=gpu:bind=none
    expect_rc 0 && expect_out "$(line 0 "$ALL_CPUS" "$UUID0" - -; line 1 "$ALL_CPUS" "$UUID1" - -)"
}

c_verbose() {
    set_plugstack "topology=$FIX"
    probe -n 2 --map-by-device=gpu:verbose
    expect_rc 0 && expect_out "$GPU_LINES" &&
        expect_err "map-by-device: $E2E_NODE, task 0 (global 0): gpu 0000:17:00.0 cuda0 $UUID0; CPUs 0 set; CUDA_VISIBLE_DEVICES=$UUID0" &&
        expect_err "map-by-device: $E2E_NODE, task 1 (global 1): gpu 0000:65:00.0 cuda1 $UUID1; CPUs 1 set; CUDA_VISIBLE_DEVICES=$UUID1"
}

c_adapters() {
    set_plugstack "topology=$FIX"
    # Each task its GPU and the HCA beside it (same host bridge): both named, bound to the GPU's
    # CPU; UCX told each task its own HCA, NCCL every task the node's list (one value per node).
    probe -n 2 --map-by-device=gpu:adapters:verbose
    expect_rc 0 && expect_out "$(line 0 0 "$UUID0" =mlx5_0,mlx5_1 mlx5_0:1; line 1 1 "$UUID1" =mlx5_0,mlx5_1 mlx5_1:1)" &&
        expect_err "map-by-device: $E2E_NODE, task 0 (global 0): gpu 0000:17:00.0 cuda0 $UUID0, paired network 0000:18:00.0 mlx5_0; CPUs 0 set; CUDA_VISIBLE_DEVICES=$UUID0 NCCL_IB_HCA==mlx5_0,mlx5_1" &&
        expect_err "map-by-device: $E2E_NODE, task 1 (global 1): gpu 0000:65:00.0 cuda1 $UUID1, paired network 0000:66:00.0 mlx5_1; CPUs 1 set;" ||
        return 1
    # PMIX_DEVICE_ID names the GPU, then its adapter, as the task sees it.
    run srun -n 2 --map-by-device=gpu:adapters bash -c 'echo "task=$SLURM_LOCALID PMIX_DEVICE_ID=${PMIX_DEVICE_ID:--}"'
    OUT=$(sed 's#gpu://[^:]*::#gpu://HOST::#' <<<"$OUT" | sort)
    expect_rc 0 && expect_out "task=0 PMIX_DEVICE_ID=gpu://HOST::nvml0,fab://9c63:c003:004d:2030::9c63:c003:004d:2030
task=1 PMIX_DEVICE_ID=gpu://HOST::nvml1,fab://9c63:c003:004d:2031::9c63:c003:004d:2031" || return 1
    # Four tasks on two GPUs: tasks 0 and 2 share GPU 0 and its HCA, which needs no more than
    # the GPU's :shared (and :overload for the one CPU each GPU has), and verbose says who shares.
    probe -n 4 --map-by-device=gpu:shared:adapters:overload:verbose
    expect_rc 0 && expect_out "$(line 0 0 "$UUID0" =mlx5_0,mlx5_1 mlx5_0:1; line 1 1 "$UUID1" =mlx5_0,mlx5_1 mlx5_1:1
        line 2 0 "$UUID0" =mlx5_0,mlx5_1 mlx5_0:1; line 3 1 "$UUID1" =mlx5_0,mlx5_1 mlx5_1:1)" &&
        expect_err "task 0 (global 0): gpu 0000:17:00.0 cuda0 $UUID0, paired network 0000:18:00.0 mlx5_0 (shared with task 2); CPUs 0 set;" &&
        expect_err "task 3 (global 3): gpu 0000:65:00.0 cuda1 $UUID1, paired network 0000:66:00.0 mlx5_1 (shared with task 1); CPUs 1 set;" ||
        return 1
    # Without a GPU to pair, the submission is refused before anything runs.
    run srun -n 1 --map-by-device=network:adapters true
    expect_fail && expect_err "write gpu:adapters"
}

c_network() {
    set_plugstack "topology=$FIX"
    probe -n 2 --map-by-device=network
    expect_rc 0 && expect_out "$NET_LINES"
}

# Slingshot (tests/e2e/fixtures/e2e-slingshot.xml: two APUs on CPUs 0 and 1, each with its
# Slingshot NIC as hwloc 2.14 shows it, hsnN beside cxiN, and the management port enp129s0
# between them in bus order): each task one NIC next to its CPU, never the management port;
# libfabric's cxi provider told the node's CXI devices, one value in every task
# (FI_CXI_DEVICE_NAME, docs/variables.md); gpu:adapters pairs each APU with its own NIC.
c_slingshot() {
    local fix=$E2E_TOPO/e2e-slingshot.xml task uuid0 uuid1 ids
    mapfile -t ids < <(grep -o 'name="AMDUUID" value="[^"]*"' "$fix" | sed 's/.*value="//;s/"$//')
    ((${#ids[@]} == 2)) || { echo "expected 2 AMDUUIDs in $fix"; return 1; }
    uuid0=GPU-${ids[0]} uuid1=GPU-${ids[1]}
    set_plugstack "topology=$fix"
    task=$E2E_DIR/work/slingshot.sh
    cat >"$task" <<'EOS'
#!/bin/bash
echo "task=$SLURM_LOCALID cpus=$(grep Cpus_allowed_list /proc/self/status | cut -f2) ROCR_VISIBLE_DEVICES=${ROCR_VISIBLE_DEVICES:--} FI_CXI_DEVICE_NAME=${FI_CXI_DEVICE_NAME:--} PMIX_DEVICE_ID=${PMIX_DEVICE_ID:--}"
EOS
    chmod 755 "$task"
    run srun -n 2 --map-by-device=network "$task"
    OUT=$(sort <<<"$OUT")
    expect_rc 0 && expect_out "task=0 cpus=0 ROCR_VISIBLE_DEVICES=- FI_CXI_DEVICE_NAME=cxi0,cxi1 PMIX_DEVICE_ID=ipv4://02:00:00:00:36:10
task=1 cpus=1 ROCR_VISIBLE_DEVICES=- FI_CXI_DEVICE_NAME=cxi0,cxi1 PMIX_DEVICE_ID=ipv4://02:00:00:00:36:11" || return 1
    run srun -n 2 --map-by-device=gpu:adapters "$task"
    OUT=$(sed 's#gpu://[^:]*::#gpu://HOST::#' <<<"$OUT" | sort)
    expect_rc 0 && expect_out "task=0 cpus=0 ROCR_VISIBLE_DEVICES=$uuid0 FI_CXI_DEVICE_NAME=cxi0,cxi1 PMIX_DEVICE_ID=gpu://HOST::rsmi0,ipv4://02:00:00:00:36:10
task=1 cpus=1 ROCR_VISIBLE_DEVICES=$uuid1 FI_CXI_DEVICE_NAME=cxi0,cxi1 PMIX_DEVICE_ID=gpu://HOST::rsmi1,ipv4://02:00:00:00:36:11" || return 1
    # One task: the node's list is its own NIC's; a job's own value is kept.
    run srun -n 1 --map-by-device=network "$task"
    expect_rc 0 && expect_out "task=0 cpus=0 ROCR_VISIBLE_DEVICES=- FI_CXI_DEVICE_NAME=cxi0 PMIX_DEVICE_ID=ipv4://02:00:00:00:36:10" || return 1
    run env FI_CXI_DEVICE_NAME=cxi1 srun -n 1 --map-by-device=network "$task"
    expect_rc 0 && expect_out "task=0 cpus=0 ROCR_VISIBLE_DEVICES=- FI_CXI_DEVICE_NAME=cxi1 PMIX_DEVICE_ID=ipv4://02:00:00:00:36:10" || return 1
    # Three tasks, two NICs: the management port is never the third; the step is refused.
    run srun -n 3 --map-by-device=network "$task"
    expect_fail && expect_err "3 tasks with ndev=1 need 3 network devices, but" && expect_err "has 2 to give" || return 1
    # Named, the management port is the job's, with no fabric variable.
    run srun -n 1 --map-by-device=enp129s0 "$task"
    expect_rc 0 && expect_out "task=0 cpus=0 ROCR_VISIBLE_DEVICES=- FI_CXI_DEVICE_NAME=- PMIX_DEVICE_ID=ipv4://00:40:a6:89:36:20"
}

c_ndev_cpus_per_task() {
    set_plugstack "topology=$FIX"
    # One task holding both GPUs: its locality is the machine; --cpus-per-task=2 with
    # bind=core takes two cores of it.
    probe -n 1 -c 2 --map-by-device=gpu:ndev=2:bind=core
    expect_rc 0 && expect_out "$(line 0 0-1 "$UUID0,$UUID1" - -)"
}

# 20 runs in each binding mode: Slurm binds first, the plugin's mask must always win.
mask_wins() {
    local mode i
    for mode in none cores map_cpu:1,0 mask_cpu:0x2,0x1; do
        for ((i = 1; i <= 20; i++)); do
            if [[ $mode == none ]]; then
                probe -n 2 --map-by-device=gpu
            else
                probe -n 2 --cpu-bind="$mode" --map-by-device=gpu
            fi
            expect_rc 0 && expect_out "$GPU_LINES" || { echo "(--cpu-bind=$mode, run $i)"; return 1; }
        done
    done
}

c_mask_wins() {
    set_plugstack "topology=$FIX"
    mask_wins
}

c_closest() {
    set_plugstack "topology=$FIX"
    # Slurm puts task 0 on CPU 1 and task 1 on CPU 0; closest keeps that binding and picks
    # the GPU next to it.
    probe -n 2 --cpu-bind=map_cpu:1,0 --map-by-device=gpu:closest
    expect_rc 0 && expect_out "$(line 0 1 "$UUID1" - -; line 1 0 "$UUID0" - -)"
}

c_ids_with_colons() {
    set_plugstack "topology=$FIX"
    # The id the plugin writes into PMIX_DEVICE_ID (gpu://<this host>::nvml1), and the bus
    # ids, name one device; qualifiers still follow.
    local host
    host=$(hostname)
    for id in "gpu://$host::nvml1" "0000:65:00.0" "65:00.0"; do
        # Two tasks: the step holds both CPUs, so the GPU's CPU 1 is the step's (one task of
        # -c 2 would be bound to fewer CPUs than it asked for, which is refused); both on the
        # one device (shared), on its one CPU (overload).
        probe -n 2 --map-by-device="$id:shared:overload:verbose"
        expect_rc 0 && expect_out "$(line 0 1 "$UUID1" - -; line 1 1 "$UUID1" - -)" &&
            expect_err "gpu 0000:65:00.0 cuda1 $UUID1; CPUs 1 set" ||
            { echo "(id $id)"; return 1; }
    done
}

c_overload_refused() {
    set_plugstack "topology=$FIX"
    # Two tasks per GPU, one core next to each GPU: the second task would share the first's core.
    probe -n 4 --map-by-device=gpu:shared:bind=core
    expect_rc 1 && expect_err "task 2 would share CPUs with another task of the step" &&
        expect_err "add :overload" || return 1
    node_idle || return 1
    probe -n 4 --map-by-device=gpu:shared:bind=core:overload
    expect_rc 0 && expect_out "$(line 0 0 "$UUID0" - -; line 1 1 "$UUID1" - -; line 2 0 "$UUID0" - -; line 3 1 "$UUID1" - -)"
}

c_ppr() {
    set_plugstack "topology=$FIX"
    # ppr=2: tasks 0,1 on GPU 0 and 2,3 on GPU 1 (not round-robin, as shared is).
    probe -n 4 --map-by-device=gpu:ppr=2:overload
    expect_rc 0 && expect_out "$(line 0 0 "$UUID0" - -; line 1 0 "$UUID0" - -; line 2 1 "$UUID1" - -; line 3 1 "$UUID1" - -)" ||
        return 1
    probe -n 5 --map-by-device=gpu:ppr=2:overload
    expect_rc 1 && expect_err "5 tasks with ndev=1 and ppr=2 need 3 gpu devices"
}

c_split_omp() {
    local one=$E2E_TOPO/e2e-1socket-2gpu.xml u
    mapfile -t u < <(grep -o 'name="NVIDIAUUID" value="[^"]*"' "$one" | sed 's/.*value="//;s/"$//')
    set_plugstack "topology=$one"
    # Both GPUs hang off the one package (CPUs 0-1): by default (bind=split) each task gets
    # its own core of it; bind=locality gives both tasks the whole package.
    probe -n 2 --map-by-device=gpu
    expect_rc 0 && expect_out "$(line 0 0 "${u[0]}" - -; line 1 1 "${u[1]}" - -)" || return 1
    probe -n 2 --map-by-device=gpu:bind=locality
    expect_rc 0 && expect_out "$(line 0 0-1 "${u[0]}" - -; line 1 0-1 "${u[1]}" - -)" || return 1
    # omp: OpenMP told each task's binding (one core); a job's own OMP_NUM_THREADS is kept.
    local omp='echo "task=$SLURM_LOCALID $OMP_NUM_THREADS $OMP_PLACES $OMP_PROC_BIND"'
    run srun -n 2 --map-by-device=gpu:omp bash -c "$omp"
    OUT=$(sort <<<"$OUT")
    expect_rc 0 && expect_out "$(printf 'task=0 1 cores spread\ntask=1 1 cores spread')" || return 1
    run env OMP_NUM_THREADS=7 srun -n 2 --map-by-device=gpu:omp bash -c "$omp"
    OUT=$(sort <<<"$OUT")
    expect_rc 0 && expect_out "$(printf 'task=0 7 cores spread\ntask=1 7 cores spread')" || return 1
    # Three tasks on two cores: refused with the fix, before any task starts.
    probe -n 3 --overcommit --map-by-device=gpu:shared
    expect_rc 1 && expect_err "3 tasks share the locality of cuda0 (CPUs 0" && expect_err ":overload"
}

c_admin_omp() {
    local conf=$E2E_DIR/etc/omp.toml
    local omp='echo "task=$SLURM_LOCALID ${OMP_NUM_THREADS:--} ${OMP_PLACES:--} ${OMP_PROC_BIND:--}"'
    printf 'omp = true\ntopology = "%s"\n' "$FIX" >"$conf"
    chmod 644 "$conf"
    set_plugstack "config=$conf"
    # The admin's omp = true: each mapped task is told its binding (one core each) ...
    run srun -n 2 --map-by-device=gpu bash -c "$omp"
    OUT=$(sort <<<"$OUT")
    expect_rc 0 && expect_out "$(printf 'task=0 1 cores spread\ntask=1 1 cores spread')" || return 1
    # ... a value the job set is kept, each variable on its own ...
    run env OMP_NUM_THREADS=7 srun -n 2 --map-by-device=gpu bash -c "$omp"
    OUT=$(sort <<<"$OUT")
    expect_rc 0 && expect_out "$(printf 'task=0 7 cores spread\ntask=1 7 cores spread')" || return 1
    run env OMP_PLACES=threads OMP_PROC_BIND=close srun -n 2 --map-by-device=gpu bash -c "$omp"
    OUT=$(sort <<<"$OUT")
    expect_rc 0 && expect_out "$(printf 'task=0 1 threads close\ntask=1 1 threads close')" || return 1
    # ... the admin's default is told too; omp=false opts out; an unmapped step gets nothing.
    set_plugstack "config=$conf default=gpu"
    run srun -n 2 bash -c "$omp"
    OUT=$(sort <<<"$OUT")
    expect_rc 0 && expect_out "$(printf 'task=0 1 cores spread\ntask=1 1 cores spread')" || return 1
    run srun -n 2 --map-by-device=gpu:omp=false bash -c "$omp"
    OUT=$(sort <<<"$OUT")
    expect_rc 0 && expect_out "$(printf 'task=0 - - -\ntask=1 - - -')" || return 1
    run srun -n 2 --map-by-device=none bash -c "$omp"
    OUT=$(sort <<<"$OUT")
    expect_rc 0 && expect_out "$(printf 'task=0 - - -\ntask=1 - - -')"
}

# --- Cases: each variable read by its real reader (libgomp, UCX) inside the task -----------

# omp_line TASK CPUS THREADS [PLACES BIND]: the omp task's first line (its mask, numactl's
# and hwloc-bind's readings of it, and the OMP_* the plugin wrote; "-" unset); omp_thread TASK THREAD
# PLACE/PLACES PROCS CPU: a thread's line (tests/e2e/fixtures/omp_places.c).
omp_line() {
    echo "task=$1 cpus=$2 physcpubind=$(expand "$2" | tr ' ' ,) hwloc=$(expand "$2" | tr ' ' ,) OMP_NUM_THREADS=$3 OMP_PLACES=${4:-cores} OMP_PROC_BIND=${5:-spread}"
}
omp_thread() {
    echo "task=$1 thread=$2 place=$3 procs=$4 cpu=$5"
}

c_reader_omp() {
    local one=$E2E_TOPO/e2e-1socket-2gpu.xml
    # libgomp builds OMP_PLACES=cores from the process's mask (and this machine's cores in
    # /sys): one place per core of the task. OMP_PROC_BIND=spread with as many threads as
    # places puts thread i on place i, bound there, so sched_getcpu is its core. So the lines
    # say: as many threads as the task has cores, each on its own core, all inside the mask.
    # One package holding both GPUs and both cores: one task that holds both (-c 2: this
    # phase declares 8 CPUs, so -n 1 alone gets one) gets CPUs 0-1, two threads.
    set_plugstack "topology=$one"
    run srun -n 1 -c 2 --map-by-device=gpu:omp "$OMP_TASK"
    OUT=$(LC_ALL=C sort <<<"$OUT")
    expect_rc 0 && expect_out "$(omp_line 0 0-1 2; omp_thread 0 0 0/2 0 0; omp_thread 0 1 1/2 1 1)" || return 1
    # The control: without omp, libgomp still starts a thread per CPU, but places none and
    # binds none (what omp is for).
    run srun -n 1 -c 2 --map-by-device=gpu "$OMP_TASK"
    OUT=$(LC_ALL=C sort <<<"$OUT")
    expect_rc 0 && expect_out "$(omp_line 0 0-1 - - -; omp_thread 0 0 -1/0 - -; omp_thread 0 1 -1/0 - -)" || return 1
    # Two tasks, a GPU and a core each: one thread each, on the task's own core.
    set_plugstack "topology=$FIX"
    run srun -n 2 --map-by-device=gpu:omp "$OMP_TASK"
    OUT=$(LC_ALL=C sort <<<"$OUT")
    expect_rc 0 && expect_out "$(omp_line 0 0 1; omp_thread 0 0 0/1 0 0; omp_line 1 1 1; omp_thread 1 0 0/1 1 1)"
}

# uline TASK VALUE: the UCX task's line for a task given UCX_NET_DEVICES=VALUE that UCX read
# as written: its configuration parser made the same list of it (ucx_info -c), ucx_info
# exited 0, and opening a context (ucx_info -p) it warned of exactly those devices, each
# quoted as written and in that order (this machine has none of them), and of nothing else.
# (UCX 1.13 on Debian 12 to 1.23 on sid: "network device 'X' is not available", "network
# devices 'X','Y' are not available".)
uline() {
    local -a e
    local q
    IFS=, read -ra e <<<"$2"
    q=$(printf "'%s'," "${e[@]}")
    q=${q%,}
    if ((${#e[@]} == 1)); then
        q="network device $q is not available"
    else
        q="network devices $q are not available"
    fi
    echo "task=$1 UCX_NET_DEVICES=$2 config=$2 rc=0 said=UCX WARN $q"
}

# ucx_read_back: every line of OUT (the UCX task's) is the uline of its own value, and each
# entry of that value is device:port: whatever a fixture made the plugin write, UCX read it
# as written. (UCX checks no syntax here, 1.13 to 1.23 alike: it splits at commas, drops
# empty entries, and matches each entry verbatim, spaces included, against its devices'
# names; more than 64 entries abort it. So the device:port form is this suite's check,
# after UCX's reading.)
ucx_read_back() {
    local l t v e
    local -a entries
    [[ -n $OUT ]] || { echo "no task line"; show; return 1; }
    while read -r l; do
        t=$(sed -n 's/^task=\([^ ]*\) .*/\1/p' <<<"$l")
        v=$(sed -n 's/^task=[^ ]* UCX_NET_DEVICES=\([^ ]*\) .*/\1/p' <<<"$l")
        [[ -n $v && $l == "$(uline "$t" "$v")" ]] ||
            { printf 'UCX did not read "%s" as written:\n- %s\n+ %s\n' "$v" "$(uline "$t" "$v")" "$l"; return 1; }
        IFS=, read -ra entries <<<"$v"
        for e in "${entries[@]}"; do
            [[ $e =~ ^[A-Za-z0-9_]+:[0-9]+$ ]] || { echo "entry '$e' of $v is not device:port"; return 1; }
        done
    done <<<"$OUT"
}

c_reader_ucx() {
    # UCX says which devices it read by warning that this machine lacks them.
    if ucx_info -d 2>/dev/null | grep -q 'Device: mlx5_'; then
        SKIPS+=("the UCX reader case: this machine has mlx5 adapters, the fixtures' names may exist")
        return 0
    fi
    set_plugstack "topology=$FIX"
    # network and gpu:adapters: each task its adapter's port; one task with both: a list.
    run srun -n 2 --map-by-device=network "$UCX_TASK"
    OUT=$(sort <<<"$OUT")
    expect_rc 0 && expect_out "$(uline 0 mlx5_0:1; uline 1 mlx5_1:1)" || return 1
    run srun -n 2 --map-by-device=gpu:adapters "$UCX_TASK"
    OUT=$(sort <<<"$OUT")
    expect_rc 0 && expect_out "$(uline 0 mlx5_0:1; uline 1 mlx5_1:1)" || return 1
    run srun -n 1 -c 2 --map-by-device=network:ndev=2 "$UCX_TASK"
    expect_rc 0 && expect_out "$(uline 0 mlx5_0:1,mlx5_1:1)" || return 1
    # The other e2e fixtures with Mellanox adapters (e2e-4gpu, e2e-2gpu-amd and e2e-nogpu
    # have none): whatever their tasks are given (the probe's, which starts no UCX: each
    # ucx_info start takes 0.4 s on sid) UCX reads as written, each new value once.
    local -A seen=([mlx5_0:1]=1 [mlx5_1:1]=1 [mlx5_0:1,mlx5_1:1]=1)
    local one=$E2E_TOPO/e2e-1socket-2gpu.xml run_spec spec v
    for run_spec in "$FIX_DRM|-n 2 --map-by-device=network" "$FIX_DRM|-n 1 -c 2 --map-by-device=network:ndev=2" \
        "$FIX_SNC|-n 2 --map-by-device=network" "$FIX_SNC|-n 1 -c 2 --map-by-device=network:ndev=2" \
        "$FIX_SNC|-n 2 --map-by-device=gpu:adapters" "$one|-n 2 --map-by-device=network" \
        "$one|-n 1 -c 2 --map-by-device=network:ndev=2" "$one|-n 2 --map-by-device=gpu:adapters"; do
        set_plugstack "topology=${run_spec%%|*}"
        spec=${run_spec#*|}
        # shellcheck disable=SC2086 # the spec's words
        probe $spec
        expect_rc 0 || { echo "(${run_spec##*/})"; return 1; }
        for v in $(sed 's/.* UCX_NET_DEVICES=//' <<<"$OUT"); do
            [[ -z ${seen[$v]:-} ]] || continue
            OUT=$(UCX_NET_DEVICES=$v "$UCX_TASK")
            ucx_read_back || { echo "(${run_spec##*/})"; return 1; }
            seen[$v]=1
        done
    done
    # The check can fail: UCX drops an empty entry without a word, so a value with one is
    # not read as written (ucx_info -c prints mlx5_0:1,mlx5_1:1).
    OUT=$(UCX_NET_DEVICES=mlx5_0:1,,mlx5_1:1 "$UCX_TASK")
    local why
    why=$(ucx_read_back) && { echo "the check passed a value UCX does not read as written: $OUT"; return 1; }
    [[ $why == "UCX did not read"* ]] || { echo "the control failed for another reason: $why"; return 1; }
}

c_default_applies() {
    set_plugstack "topology=$FIX default=gpu"
    probe -n 2
    expect_rc 0 && expect_out "$GPU_LINES"
}

c_default_none() {
    set_plugstack "topology=$FIX default=gpu"
    probe -n 2 --map-by-device=none
    expect_rc 0 && expect_out "$UNMAPPED_LINES"
}

c_default_overridden() {
    set_plugstack "topology=$FIX default=gpu"
    probe -n 2 --map-by-device=network
    expect_rc 0 && expect_out "$NET_LINES"
}

c_default_from_config_file() {
    local conf=$E2E_DIR/etc/map-by-device.toml
    printf 'default = "network"\ntopology = "%s"\n' "$FIX" >"$conf"
    chmod 644 "$conf"
    set_plugstack "config=$conf"
    probe -n 2
    expect_rc 0 && expect_out "$NET_LINES" || return 1
    # The plugstack line overrides the file.
    set_plugstack "config=$conf default=gpu"
    probe -n 2
    expect_rc 0 && expect_out "$GPU_LINES"
}

c_sbatch() {
    set_plugstack "topology=$FIX"
    local script=$E2E_DIR/work/batch.sh batch_out=$E2E_DIR/work/batch.out
    cat >"$script" <<EOF
#!/bin/bash
#SBATCH --map-by-device=network
#SBATCH --ntasks=2
#SBATCH --output=$batch_out
echo "script cpus=\$(grep Cpus_allowed_list /proc/self/status | cut -f2) NCCL_IB_HCA=\${NCCL_IB_HCA:--}"
srun $PROBE | sort
srun --map-by-device=gpu $PROBE | sort
EOF
    rm -f "$batch_out"
    run sbatch --wait "$script"
    expect_rc 0 || return 1
    # When the first step's CPUs are not yet released, srun says it waits and then that the
    # step was created ("step creation temporarily disabled" ... "Step created"): Slurm's
    # own progress lines on the batch output, not the plugin's.
    OUT=$(grep -v -e '^srun: Job [0-9]* step creation temporarily disabled' -e '^srun: Step created for job' "$batch_out")
    # The batch script itself is not a task: it is not bound and gets no variables, so
    # nothing leaks into the later steps.
    expect_out "$(
        echo "script cpus=$ALL_CPUS NCCL_IB_HCA=-"
        echo "$NET_LINES"
        echo "$GPU_LINES"
    )"
}

c_salloc() {
    set_plugstack "topology=$FIX"
    run salloc -n 2 --map-by-device=network srun "$PROBE"
    OUT=$(sort <<<"$OUT")
    expect_rc 0 && expect_out "$NET_LINES"
}

c_environment_form() {
    set_plugstack "topology=$FIX"
    run env "$OPTION_ENV=network" srun -n 2 "$PROBE"
    OUT=$(sort <<<"$OUT")
    expect_rc 0 && expect_out "$NET_LINES"
}

c_bad_spec() {
    set_plugstack "topology=$FIX"
    local before msg='unknown qualifier "bogus": expected one of interleave'
    before=$(job_count)
    probe -n 2 --map-by-device=gpu:bogus
    expect_fail && expect_err "map-by-device: invalid --map-by-device=gpu:bogus: $msg" || return 1
    run sbatch --map-by-device=gpu:bogus --wrap true
    expect_fail && expect_err "$msg" || return 1
    run salloc --map-by-device=gpu:bogus true
    expect_fail && expect_err "$msg" || return 1
    printf '#!/bin/bash\n#SBATCH --map-by-device=gpu:bogus\ntrue\n' >"$E2E_DIR/work/bad.sh"
    run sbatch "$E2E_DIR/work/bad.sh"
    expect_fail && expect_err "$msg" || return 1
    run env "$OPTION_ENV=gpu:bogus" srun -n 1 true
    expect_fail && expect_err "$msg" || return 1
    # Targets no node can have (issue 24): refused by srun, sbatch and salloc too, not on the
    # node after the queue wait; a real device's name still passes to the node.
    local spec want
    for spec in 'gpus|no device is named "gpus" (did you mean gpu?)' \
        "gpu,shared|a comma does not separate qualifiers, write them with ':' (gpu:shared)" \
        "gpu;shared|a semicolon does not separate qualifiers, write them with ':' (gpu:shared)" \
        "gpu shared|a blank does not separate qualifiers, write them with ':' (gpu:shared)" \
        "ppr:2:gpu|Open MPI's --map-by spelling, not a --map-by-device spec: write gpu:ppr=2" \
        'gpu:ndev=0|(did you mean ndev=auto?)'; do
        want=${spec#*|} spec=${spec%%|*}
        run srun -n 1 "--map-by-device=$spec" true
        expect_fail && expect_err "map-by-device: invalid --map-by-device=$spec: " && expect_err "$want" || return 1
        run sbatch "--map-by-device=$spec" --wrap true
        expect_fail && expect_err "$want" || return 1
        run salloc "--map-by-device=$spec" true
        expect_fail && expect_err "$want" || return 1
    done
    [[ $(job_count) == "$before" ]] || { echo "a refused submission created a job"; squeue -t all; return 1; }
    probe -n 1 --map-by-device=cuda0
    expect_rc 0 && expect_out "$(line 0 0 "$UUID0" - -)" || return 1
    probe -n 1 --map-by-device=cuda7
    expect_rc 1 && expect_err "has no device named \"cuda7\""
}

c_too_many_tasks() {
    set_plugstack "topology=$FIX"
    probe -n 3 --map-by-device=gpu
    expect_rc 1 && expect_err "3 tasks with ndev=1 need 3 gpu devices, but" && expect_err "has 2 to give" || return 1
    # The refusal is said once (by task 0), and the node stays up for the next step.
    [[ $(grep -c "3 tasks with ndev=1" <<<"$ERR") == 1 ]] || { echo "refusal not reported exactly once"; show; return 1; }
    probe -n 2 --map-by-device=gpu
    expect_rc 0 && expect_out "$GPU_LINES"
}

c_bind_above_locality() {
    set_plugstack "topology=$FIX_SNC"
    probe -n 2 --map-by-device=gpu:bind=package
    expect_rc 1 && expect_err "bind=package is above the locality of cuda0" || return 1
    probe -n 2 --map-by-device=gpu
    expect_rc 0 && expect_out "$GPU_LINES"
}

c_no_identity() {
    set_plugstack "topology=$FIX_DRM"
    probe -n 2 --map-by-device=gpu
    expect_rc 1 && expect_err "at 0000:17:00.0" && expect_err "cannot be named to its runtime" || return 1
    probe -n 2 --map-by-device=network
    expect_rc 0 && expect_out "$NET_LINES"
}

c_hwloc_env_topology() {
    # topology= is the admin's: a job pointing hwloc elsewhere changes nothing. With the
    # SNC fixture bind=package would be refused; with the admin's it is fine.
    set_plugstack "topology=$FIX"
    run env HWLOC_XMLFILE="$FIX_SNC" HWLOC_COMPONENTS=xml srun -n 2 --map-by-device=gpu:bind=package "$PROBE"
    OUT=$(sort <<<"$OUT")
    expect_rc 0 && expect_out "$GPU_LINES"
}

c_hwloc_env_live() {
    if [[ $LIVE_GPUS != 0 ]]; then
        SKIPS+=("the live HWLOC_XMLFILE case: this machine has GPUs, it needs one without")
        return 0
    fi
    # Live discovery: a job's HWLOC_XMLFILE must not make the plugin see the fixture's GPUs.
    set_plugstack ""
    run env HWLOC_XMLFILE="$FIX" srun -n 2 --map-by-device=gpu "$PROBE"
    expect_rc 1 && expect_err "has no gpu devices" || return 1
    set_plugstack "default=gpu"
    run env HWLOC_XMLFILE="$FIX" srun -n 2 "$PROBE"
    OUT=$(sort <<<"$OUT")
    expect_rc 0 && expect_out "$UNMAPPED_LINES"
}

c_soft_default() {
    if [[ $LIVE_GPUS != 0 ]]; then
        SKIPS+=("the soft-default case: this machine has GPUs, it needs one without")
        return 0
    fi
    set_plugstack "default=gpu"
    probe -n 2
    expect_rc 0 && expect_out "$UNMAPPED_LINES" && expect_no_err "map-by-device" || return 1
    grep -q "default not applied, task runs unmapped: node .* has no gpu devices" "$E2E_DIR/log/slurmd.log" ||
        { echo "slurmd.log lacks the debug line for the soft default"; return 1; }
    # The same spec given by the job is a hard refusal.
    probe -n 2 --map-by-device=gpu
    expect_rc 1 && expect_err "has no gpu devices"
}

c_broken_config() {
    set_plugstack "topology=$FIX default=gpu:bogus"
    run srun -n 1 true
    expect_fail && expect_err 'map-by-device: plugstack.conf: bad default spec "gpu:bogus" in plugstack.conf' || return 1
    set_plugstack "topology=$FIX bogus=1"
    run srun -n 1 --map-by-device=gpu true
    expect_fail && expect_err 'unknown plugstack.conf argument "bogus=1"' || return 1
    set_plugstack "topology=relative.xml"
    run sbatch --wrap true
    expect_fail && expect_err '"relative.xml" in plugstack.conf is not absolute'
}

c_unprivileged_user() {
    set_plugstack "topology=$FIX"
    run runuser -u nobody -- env SLURM_CONF="$SLURM_CONF" srun --chdir=/tmp -n 2 --map-by-device=gpu "$PROBE"
    OUT=$(sort <<<"$OUT")
    expect_rc 0 && expect_out "$GPU_LINES"
}

# --- Cases: task/cgroup (and task/affinity with the real layout) ------------------------------------------------------------------

c_cgroup_gpu() {
    set_plugstack "topology=$FIX"
    probe -n 2 --map-by-device=gpu
    expect_rc 0 && expect_out "$GPU_LINES"
}

c_cgroup_mask_wins() {
    set_plugstack "topology=$FIX"
    mask_wins
}

c_step_cpus() {
    set_plugstack "topology=$FIX"
    # Hold one CPU with another job; the next step gets the other one only.
    local hold=$E2E_DIR/work/hold.out held free dev
    rm -f "$hold"
    srun -n 1 --output="$hold" bash -c 'grep Cpus_allowed_list /proc/self/status | cut -f2; exec sleep 120' &
    local holder=$!
    e2e_wait_for "[[ -s '$hold' ]]" 20 || { echo "the holding job did not start"; kill "$holder"; return 1; }
    held=$(head -n1 "$hold")
    case $held in
        0) free=1 dev=mlx5_1 ;;
        1) free=0 dev=mlx5_0 ;;
        *) echo "holding job got CPUs $held, expected one CPU"; kill "$holder"; return 1 ;;
    esac
    local ok=0
    # The GPU next to the step's CPU, whichever it is in bus order (never one it cannot reach).
    probe -n 1 --map-by-device=gpu:ndev=1
    if [[ $held == 0 ]]; then
        expect_rc 0 && expect_out "$(line 0 1 "$UUID1" - -)" || ok=1
    else
        expect_rc 0 && expect_out "$(line 0 0 "$UUID0" - -)" || ok=1
    fi
    # A GPU named by the job is never swapped: outside the step's CPUs it is refused.
    if ((ok == 0)); then
        probe -n 1 --map-by-device="$([[ $held == 0 ]] && echo cuda0 || echo cuda1)"
        expect_rc 1 && expect_err "none of which are allocated to this step (allowed CPUs: $free)" || ok=1
    fi
    # The device next to the step's CPU: bound to it.
    if ((ok == 0)); then
        probe -n 1 --map-by-device="$dev"
        expect_rc 0 && expect_out "$(line 0 "$free" - "=$dev" "$dev:1")" || ok=1
    fi
    # bind=none keeps Slurm's binding (the step's CPU) and still names a device, the near one first.
    if ((ok == 0)); then
        probe -n 1 --map-by-device=gpu:bind=none
        expect_rc 0 && expect_out "$(line 0 "$free" "$([[ $free == 1 ]] && echo "$UUID1" || echo "$UUID0")" - -)" || ok=1
    fi
    scancel --quiet --name=bash >/dev/null 2>&1
    kill "$holder" 2>/dev/null
    wait "$holder" 2>/dev/null
    return $ok
}

# --- Cases: ranks another launcher starts (issue 35; tests/e2e/launch.sh) ----------------
#
# task/affinity with the real layout, no GPU GRES (the node's GPUs are every step's: the
# shape of issue 35's measurement): salloc -n 2, then Open MPI's mpirun, MPICH's
# mpiexec.hydra -launcher slurm, or one srun task that forks two workers as torchrun does.

# launch_default_case KIND: KIND's two ranks without a default (unmapped: the plugin sets
# nothing), then under default=gpu and default=gpu:interleave, each with and without
# --external-launcher where srun has it (not torch: its agent is the job's own srun task):
# the default's rule (expect_default_ranks), and none at all for an external launcher's step. Every run is a note (the table of issue 35).
launch_default_case() {
    local kind=$1 spec ext exts=(plain) bad=0 v
    launch_available "$kind" || return 0
    ((EXT_LAUNCHER)) && [[ $kind != torch ]] && exts+=(ext)
    for spec in "" gpu gpu:interleave; do
        set_plugstack "topology=$FIX${spec:+ default=$spec}"
        for ext in "${exts[@]}"; do
            launch "$kind" "$ext" 2 "$RPROBE"
            expect_rc 0 || { bad=1; continue; }
            launch_note "Slurm $SLURM_VERSION, $(launch_label "$kind" "$ext"), ${spec:+default=}${spec:-no default}"
            if [[ -n $spec ]]; then
                expect_default_ranks 2 || { echo "(default=$spec, $ext)"; bad=1; }
            fi
            # No default, or an external launcher's step (srun marks it): nothing mapped.
            if [[ -z $spec || $ext == ext ]]; then
                for v in "${PLUGIN_VARS[@]}"; do
                    [[ " $LAUNCH_OWN_VARS " == *" $v "* ]] && continue
                    grep -q " $v=[^-]" <<<"$OUT" && { echo "${spec:-no default} ($ext), yet $v is set"; show; bad=1; }
                done
                [[ $(grep -c . <<<"$OUT") == 2 ]] || { echo "expected 2 ranks"; show; bad=1; }
            fi
        done
    done
    return $bad
}

# launch_exec_case KIND: `map-by-device exec [SPEC] -- RPROBE` as KIND's two ranks gives
# rank i exactly what srun -n 2 gives local task i: SPEC gpu and gpu:interleave without a
# default, no SPEC under default=gpu; with and without --external-launcher where srun has it.
launch_exec_case() {
    local kind=$1 spec ext exts=(plain) bad=0 ref
    launch_available "$kind" || return 0
    ((EXT_LAUNCHER)) && [[ $kind != torch ]] && exts+=(ext)
    launch_build_cli || { echo "no map-by-device CLI at $MBD"; return 1; }
    "$MBD" exec --help >/dev/null 2>&1 || { echo "$MBD has no exec command (issue 35)"; "$MBD" exec --help 2>&1 | head -n 3; return 1; }
    for spec in gpu gpu:interleave default; do
        if [[ $spec == default ]]; then
            set_plugstack "topology=$FIX default=gpu"
            srun_ranks 2
        else
            set_plugstack "topology=$FIX"
            srun_ranks 2 --map-by-device="$spec"
        fi
        expect_rc 0 || return 1
        ref=$OUT
        for ext in "${exts[@]}"; do
            if [[ $spec == default ]]; then
                launch "$kind" "$ext" 2 "$MBD" exec -- "$RPROBE"
            else
                launch "$kind" "$ext" 2 "$MBD" exec "$spec" -- "$RPROBE"
            fi
            expect_rc 0 && expect_same_ranks "$ref" || { echo "($spec, $ext)"; bad=1; continue; }
            launch_note "Slurm $SLURM_VERSION, $(launch_label "$kind" "$ext") map-by-device exec, ${spec/#gpu/spec gpu}"
        done
    done
    return $bad
}

# Where Slurm manages the GPUs (the GRES phase): salloc -n 2 --gres=gpu:2, default=gpu. The
# daemon's step holds the job's two GPUs (Slurm's CUDA_VISIBLE_DEVICES=0,1): the default
# gives its one task both or steps aside, never one; exec maps each rank as srun does.
c_gres_launch() {
    local kind ext exts=(plain) bad=0 ref
    ((EXT_LAUNCHER)) && exts+=(ext)
    MBD_NODE_SLURM_GPUS[$E2E_NODE]=0,1
    LAUNCH_WHERE=(--gres=gpu:2)
    set_plugstack "topology=$FIX_DRM config=$GRES_CONF default=gpu"
    for kind in ompi hydra; do
        launch_available "$kind" || continue
        for ext in "${exts[@]}"; do
            launch "$kind" "$ext" 2 "$RPROBE"
            expect_rc 0 || { bad=1; continue; }
            launch_note "Slurm $SLURM_VERSION, GRES gpu:2, $(launch_label "$kind" "$ext"), default=gpu"
            expect_default_ranks 2 || { echo "($kind, $ext)"; bad=1; }
        done
    done
    if launch_build_cli && "$MBD" exec --help >/dev/null 2>&1; then
        set_plugstack "topology=$FIX_DRM config=$GRES_CONF"
        srun_ranks 2 --gres=gpu:2 --map-by-device=gpu
        ref=$OUT
        for kind in ompi hydra; do
            launch_available "$kind" || continue
            for ext in "${exts[@]}"; do
                launch "$kind" "$ext" 2 "$MBD" exec gpu -- "$RPROBE"
                expect_rc 0 && expect_same_ranks "$ref" || { echo "(exec, $kind, $ext)"; bad=1; continue; }
                launch_note "Slurm $SLURM_VERSION, GRES gpu:2, $(launch_label "$kind" "$ext") map-by-device exec, spec gpu"
            done
        done
    else
        echo "$MBD has no exec command (issue 35)"
        bad=1
    fi
    LAUNCH_WHERE=()
    unset "MBD_NODE_SLURM_GPUS[$E2E_NODE]"
    return $bad
}

c_launch_ompi_default() { launch_default_case ompi; }
c_launch_hydra_default() { launch_default_case hydra; }
c_launch_torch_default() { launch_default_case torch; }
c_launch_ompi_exec() { launch_exec_case ompi; }
c_launch_hydra_exec() { launch_exec_case hydra; }
c_launch_torch_exec() { launch_exec_case torch; }

# --- Cases: task/cgroup + GPU GRES (fake GPUs /dev/null and /dev/zero) -------------------
#
# topology=e2e-2gpu-drm.xml: two GPUs that hwloc knows only as DRM devices (as Debian's
# hwloc reports them), 0000:17:00.0 near CPU 0 and 0000:65:00.0 near CPU 1; their UUIDs come
# from the NVIDIA driver files under proc_root (topologies/drivers/nvidia/proc). Slurm
# numbers the node's GPUs 0 and 1 (gres.conf order, which is their bus order here), so GPU
# index i is GRES_BUS[i] and its UUID is the one in that bus id's driver file.

# gline TASK CPUS STEP-CPUS SLURM_STEP_GPUS CUDA_VISIBLE_DEVICES: the GRES probe's line.
gline() {
    echo "task=$1 cpus=$2 step=$3 SLURM_STEP_GPUS=$4 CUDA_VISIBLE_DEVICES=$5"
}

# inside_step: every line of OUT (GRES probe lines) has its CPUs inside its step's cpuset,
# and a CUDA_VISIBLE_DEVICES that is the UUID of one of the GPUs in its SLURM_STEP_GPUS.
inside_step() {
    local l cpus step gpus cuda c ok i
    while read -r l; do
        [[ -n $l ]] || continue
        cpus=$(sed -n 's/.* cpus=\([^ ]*\).*/\1/p' <<<"$l")
        step=$(sed -n 's/.* step=\([^ ]*\).*/\1/p' <<<"$l")
        gpus=$(sed -n 's/.* SLURM_STEP_GPUS=\([^ ]*\).*/\1/p' <<<"$l")
        cuda=$(sed -n 's/.* CUDA_VISIBLE_DEVICES=\([^ ]*\).*/\1/p' <<<"$l")
        for c in $(expand "$cpus"); do
            [[ " $(expand "$step") " == *" $c "* ]] || { echo "CPU $c is outside the step's cpuset $step: $l"; return 1; }
        done
        [[ $cuda == GPU-* ]] || continue
        ok=0
        for i in $(expand "$gpus"); do
            [[ ${GRES_UUID[$i]:-} == "$cuda" ]] && ok=1
        done
        ((ok)) || { echo "$cuda is none of the step's GPUs ($gpus = ${GRES_UUID[*]}): $l"; return 1; }
    done <<<"$OUT"
}

gres_probe() {
    run srun "$@" "$GPROBE"
    OUT=$(sort <<<"$OUT")
}

# user_step_gpus_probe VALUE SRUN-ARGS...: the GRES probe as nobody, who exports SLURM_STEP_GPUS=VALUE.
user_step_gpus_probe() {
    local value=$1
    shift
    run runuser -u nobody -- env SLURM_CONF="$SLURM_CONF" SLURM_STEP_GPUS="$value" srun --chdir=/tmp "$@" "$GPROBE"
    OUT=$(sort <<<"$OUT")
}

c_gres_user_step_gpus() {
    # The job's user exports SLURM_STEP_GPUS=1 (the second GPU). Slurm's gres/gpu runs in
    # every step of a GRES node and replaces or removes it: the plugin maps only what Slurm
    # allocated. (Were the user's value read, the task would get GPU 1.)
    set_plugstack "topology=$FIX_DRM config=$GRES_CONF"
    # No --gres: Slurm removes it; the step has no GPU of its own, so a GPU mapping is refused
    # (were the user's value read, the task would get GPU 1).
    user_step_gpus_probe 1 -n 1 --map-by-device=gpu
    expect_rc 1 && expect_err "(Slurm set no SLURM_STEP_GPUS)" || return 1
    # require_step_gpus = false (every GPU of the node is fair game): the node's first, not 1.
    local conf
    conf=$(gres_conf_with gres-no-require-user "require_step_gpus = false")
    set_plugstack "topology=$FIX_DRM config=$conf"
    user_step_gpus_probe 1 -n 1 --map-by-device=gpu
    expect_rc 0 && expect_out "$(gline 0 0 0 - "${GRES_UUID[0]}")" || return 1
    set_plugstack "topology=$FIX_DRM config=$GRES_CONF"
    # A different --gres: Slurm gives GPU 0 and says so; the user's 1, 0-1, 4096 are gone.
    local v
    for v in 1 0-1 4096; do
        user_step_gpus_probe "$v" -n 1 --gres=gpu:1 --map-by-device=gpu
        expect_rc 0 && expect_out "$(gline 0 0 0 0 "${GRES_UUID[0]}")" || { echo "(user's SLURM_STEP_GPUS=$v)"; return 1; }
    done
}

# gres_conf_with NAME LINE: the GRES cases' config file plus LINE, as $E2E_DIR/etc/NAME.toml
# (root's, readable); prints its path.
gres_conf_with() {
    local conf=$E2E_DIR/etc/$1.toml
    { cat "$GRES_CONF"; echo "$2"; } >"$conf"
    chmod 644 "$conf"
    echo "$conf"
}

c_gres_types_user_step_gpus() {
    # GresTypes=gpu for the cluster, but this node has no GPU GRES: gres/gpu is loaded in the
    # step all the same, and it removes the user's SLURM_STEP_GPUS (the plugin trusts the
    # variable wherever gres_gpu.so is loaded, so this must hold on a node without GPUs too).
    # The step has no GPU, by the rule of gres/gpu: a GPU mapping is refused.
    set_plugstack "topology=$FIX_DRM config=$GRES_CONF"
    user_step_gpus_probe 1 -n 1 --map-by-device=gpu
    expect_rc 1 && expect_err "the step has no GPUs on" || return 1
    # The node's config file says its GPUs are not Slurm's (require_step_gpus = false): every
    # GPU of the node is the step's, and still not the user's list.
    local conf
    conf=$(gres_conf_with gres-types-no-require "require_step_gpus = false")
    set_plugstack "topology=$FIX_DRM config=$conf"
    user_step_gpus_probe 1 -n 1 --map-by-device=gpu
    expect_rc 0 || return 1
    [[ $OUT == "task=0 cpus=0 step="*" SLURM_STEP_GPUS=- CUDA_VISIBLE_DEVICES=${GRES_UUID[0]}" ]] ||
        { echo "expected SLURM_STEP_GPUS removed by Slurm and GPU 0 mapped"; show; return 1; }
}

c_gres_partial_step() {
    set_plugstack "topology=$FIX_DRM config=$GRES_CONF"
    # One CPU and one GPU of the node's two: bound to that GPU's CPU, which the step holds,
    # and told the GPU's UUID, read from the driver file of the bus id Slurm's index names.
    gres_probe -n 1 -c 1 --gres=gpu:1 --map-by-device=gpu:verbose
    expect_rc 0 && inside_step && expect_out "$(gline 0 0 0 0 "${GRES_UUID[0]}")" &&
        expect_err "gpu 0000:17:00.0 renderD128 ${GRES_UUID[0]}; CPUs 0 set"
}

c_gres_two_jobs() {
    set_plugstack "topology=$FIX_DRM config=$GRES_CONF"
    # Job A holds a CPU and a GPU (its task keeps running); job B gets the other of each.
    local out_a=$E2E_DIR/work/job_a.out job ok=0
    rm -f "$out_a"
    job=$(HOLD=120 sbatch --parsable -n 1 -c 1 --gres=gpu:1 --output="$out_a" \
        --wrap "srun --map-by-device=gpu $GPROBE") || { echo "sbatch failed"; return 1; }
    e2e_wait_for "[[ -s '$out_a' ]]" 30 || { echo "job A did not start"; scancel "$job"; return 1; }
    gres_probe -n 1 -c 1 --gres=gpu:1 --map-by-device=gpu
    local out_b=$OUT
    OUT="$(cat "$out_a")"$'\n'"$out_b"
    echo "job A: $(cat "$out_a")"
    echo "job B: $out_b"
    expect_rc 0 && inside_step || ok=1
    # Each job's task on its own CPU with its own GPU, whichever Slurm gave to whom.
    if ((ok == 0)); then
        expect_out "$(gline 0 0 0 0 "${GRES_UUID[0]}")"$'\n'"$(gline 0 1 1 1 "${GRES_UUID[1]}")" || ok=1
    fi
    scancel "$job"
    return $ok
}

c_gres_foreign_cpus() {
    set_plugstack "topology=$FIX_DRM config=$GRES_CONF"
    # Job A holds CPU 0 and no GPU; job B gets CPU 1 and GPU 0, which is local to CPU 0:
    # refused rather than moved onto job A's CPU; bind=none keeps the step's CPU.
    local out_a=$E2E_DIR/work/job_a.out job ok=0
    rm -f "$out_a"
    job=$(HOLD=120 sbatch --parsable -n 1 -c 1 --output="$out_a" --wrap "srun $GPROBE") ||
        { echo "sbatch failed"; return 1; }
    e2e_wait_for "[[ -s '$out_a' ]]" 30 || { echo "job A did not start"; scancel "$job"; return 1; }
    echo "job A: $(cat "$out_a")"
    gres_probe -n 1 -c 1 --gres=gpu:1 --map-by-device=gpu
    expect_rc 1 && expect_err "is local to the step's CPUs 1 (renderD128 at CPUs 0)" || ok=1
    if ((ok == 0)); then
        gres_probe -n 1 -c 1 --gres=gpu:1 --map-by-device=gpu:bind=none
        expect_rc 0 && inside_step && expect_out "$(gline 0 1 1 0 "${GRES_UUID[0]}")" || ok=1
    fi
    scancel "$job"
    return $ok
}

c_gres_two_gpus_two_tasks() {
    set_plugstack "topology=$FIX_DRM config=$GRES_CONF"
    gres_probe -n 2 --gres=gpu:2 --map-by-device=gpu
    expect_rc 0 && inside_step &&
        expect_out "$(gline 0 0 0-1 0,1 "${GRES_UUID[0]}"; gline 1 1 0-1 0,1 "${GRES_UUID[1]}")" || return 1
    # One task given two GPUs and two CPUs (-c 2) with ndev=1: its GPU has one CPU near it,
    # fewer than the two it asked Slurm for: refused with the fix (issue 41).
    gres_probe -n 1 -c 2 --gres=gpu:2 --map-by-device=gpu
    expect_rc 1 && expect_err "task 0 would be bound to 1 CPU near renderD128 (CPUs 0), fewer than the 2 it asked Slurm for with --cpus-per-task" &&
        expect_err "give each task more devices (ndev=N)" || return 1
    # Unbound (bind=none keeps Slurm's binding): mapped, and told the other GPU stays idle,
    # with the spec that uses both (issue 24).
    gres_probe -n 1 -c 2 --gres=gpu:2 --map-by-device=gpu:bind=none
    expect_rc 0 && expect_err "map-by-device: warning: the step has 2 GPUs on" &&
        expect_err "but the plan for its 1 task with ndev=1 uses 1; idle: renderD129; write --map-by-device=gpu:ndev=auto" || return 1
    gres_probe -n 1 -c 2 --gres=gpu:2 --map-by-device=gpu:ndev=auto
    expect_rc 0 && expect_out "$(gline 0 0-1 0-1 0,1 "${GRES_UUID[0]},${GRES_UUID[1]}")" && expect_no_err "idle: "
}

c_gres_one_gpu_two_tasks() {
    set_plugstack "topology=$FIX_DRM config=$GRES_CONF"
    gres_probe -n 2 --gres=gpu:1 --map-by-device=gpu
    expect_rc 1 && expect_err "2 tasks with ndev=1 need 2 gpu devices, but" && expect_err "has 1 to give" || return 1
    # With shared, both tasks get the step's one GPU; next to it is one core, which holds one
    # task: the second is refused unless the job says it may share CPUs (overload).
    gres_probe -n 2 --gres=gpu:1 --map-by-device=gpu:shared
    expect_rc 1 && expect_err "2 tasks share the locality of renderD128 (CPUs 0), which has 1 core" || return 1
    gres_probe -n 2 --gres=gpu:1 --map-by-device=gpu:shared:overload
    expect_rc 0 && inside_step &&
        expect_out "$(gline 0 0 0-1 0 "${GRES_UUID[0]}"; gline 1 0 0-1 0 "${GRES_UUID[0]}")"
}

# fake_env_plugstack "NAME=VALUE..." "ARGS...": a test plugin first, which sets those variables
# in the step's environment as Slurm 26.05's gres/gpu writes them for MIG instances and for
# gres.conf Flags=env_uuid (tests/e2e/fixtures/fake_gpu_env.c), then this plugin with ARGS.
fake_env_plugstack() {
    e2e_write_plugstack "required $FAKE_PLUGIN $1" "required $E2E_PLUGIN $2"
}

c_gres_mig() {
    local mig=MIG-4f1a5e7c-1b3e-5f0e-9a5d-2c7e0b8d6a11
    fake_env_plugstack "CUDA_VISIBLE_DEVICES=$mig" "topology=$FIX_DRM config=$GRES_CONF"
    # The step's GPU is a MIG instance: a GPU mapping would hide it behind its parent's UUID.
    gres_probe -n 1 --gres=gpu:1 --map-by-device=gpu
    expect_rc 1 && expect_err "the step's GPUs are MIG instances (CUDA_VISIBLE_DEVICES=\"$mig\")" || return 1
    node_idle || return 1
    # Slurm's assignment stays: unmapped, the task keeps the MIG instance.
    gres_probe -n 1 --gres=gpu:1 --map-by-device=none
    expect_rc 0 && expect_out "$(gline 0 0 0 0 "$mig")" || return 1
    # An admin default steps aside the same way.
    fake_env_plugstack "CUDA_VISIBLE_DEVICES=$mig" "topology=$FIX_DRM config=$GRES_CONF default=gpu"
    gres_probe -n 1 --gres=gpu:1
    expect_rc 0 && expect_out "$(gline 0 0 0 0 "$mig")"
}

c_gres_env_uuid() {
    # gres.conf Flags=env_uuid: Slurm names the step's GPU by UUID. It must be the GPU that
    # SLURM_STEP_GPUS names (index 0 here: GRES_UUID[0]); then the plugin maps it.
    fake_env_plugstack "CUDA_VISIBLE_DEVICES=${GRES_UUID[0]}" "topology=$FIX_DRM config=$GRES_CONF"
    gres_probe -n 1 --gres=gpu:1 --map-by-device=gpu
    expect_rc 0 && expect_out "$(gline 0 0 0 0 "${GRES_UUID[0]}")" || return 1
    # A UUID that disagrees with SLURM_STEP_GPUS: gres.conf is not in PCI order; refused.
    fake_env_plugstack "CUDA_VISIBLE_DEVICES=${GRES_UUID[1]}" "topology=$FIX_DRM config=$GRES_CONF"
    gres_probe -n 1 --gres=gpu:1 --map-by-device=gpu
    expect_rc 1 && expect_err "names GPUs [1] in PCI-bus order, but SLURM_STEP_GPUS says [0]" || return 1
    node_idle
}

c_gres_gpu_bind() {
    set_plugstack "topology=$FIX_DRM config=$GRES_CONF"
    local fix="drop --gpu-bind or use --gpu-bind=none, or drop --map-by-device"
    gres_probe -n 2 --gres=gpu:2 --gpu-bind=closest --map-by-device=gpu
    expect_rc 1 && expect_err "cannot be combined with Slurm's GPU binding (SLURMD_TRES_BIND=${TRES_GPU}closest" &&
        expect_err "$fix" || return 1
    [[ $(grep -c "cannot be combined" <<<"$ERR") == 1 ]] || { echo "refusal not reported exactly once"; show; return 1; }
    # --gpus-per-task=N: Slurm gives task k the step's GPUs kN..kN+N-1 itself. A plan that
    # gives each task the same GPUs maps (ndev=auto divides them that way); one that does
    # not is refused.
    gres_probe -n 2 --gpus-per-task=1 --map-by-device=gpu
    expect_rc 0 && inside_step &&
        expect_out "$(gline 0 0 0-1 0 "${GRES_UUID[0]}"; gline 1 1 0-1 1 "${GRES_UUID[1]}")" || return 1
    gres_probe -n 2 --gpus-per-task=1 --map-by-device=gpu:ndev=auto
    expect_rc 0 && inside_step &&
        expect_out "$(gline 0 0 0-1 0 "${GRES_UUID[0]}"; gline 1 1 0-1 1 "${GRES_UUID[1]}")" || return 1
    gres_probe -n 1 -c 2 --gpus-per-task=2 --map-by-device=gpu:ndev=auto
    expect_rc 0 && expect_out "$(gline 0 0-1 0-1 0,1 "${GRES_UUID[0]},${GRES_UUID[1]}")" || return 1
    gres_probe -n 2 --gpus-per-task=1 --map-by-device=65:00.0:shared:overload
    expect_rc 1 && expect_err "per_task:1" && expect_err "$fix" || return 1
    # --gpu-bind=none: no Slurm binding, the plugin maps and names each task's GPU. Slurm
    # 22.05 unsets the step's GPU list in the tasks, 24.11 and later keep it.
    gres_probe -n 2 --gres=gpu:2 --gpu-bind=none --map-by-device=gpu
    expect_rc 0 && expect_out "$(gline 0 0 0-1 "$NONE_STEP_GPUS" "${GRES_UUID[0]}"; gline 1 1 0-1 "$NONE_STEP_GPUS" "${GRES_UUID[1]}")" || return 1
    # One task per node: Slurm binds nothing, so nothing to refuse.
    gres_probe -n 1 --gres=gpu:2 --gpu-bind=closest --map-by-device=gpu
    expect_rc 0 && inside_step && expect_out "$(gline 0 0 0 0,1 "${GRES_UUID[0]}")" || return 1
    # A network mapping does not touch GPUs: unaffected.
    run srun -n 2 --gres=gpu:2 --gpu-bind=closest --map-by-device=network "$PROBE"
    OUT=$(sort <<<"$OUT")
    expect_rc 0 && expect_out "$(line 0 0 0,1 =mlx5_0,mlx5_1 mlx5_0:1; line 1 1 0,1 =mlx5_0,mlx5_1 mlx5_1:1)"
}

c_gres4_gpus_per_task() {
    set_plugstack "topology=$FIX_4GPU"
    # --gpus-per-task=2 with two tasks: Slurm gives task k the step's GPUs 2k and 2k+1 (its
    # SLURM_STEP_GPUS); ndev=auto gives task k the same two, by UUID, and the CPU next to
    # both (each package holds two GPUs and one CPU).
    gres_probe -n 2 --gpus-per-task=2 --map-by-device=gpu:ndev=auto:verbose
    expect_rc 0 && expect_out "$(gline 0 0 0-1 0,1 "${G4[0]},${G4[1]}"; gline 1 1 0-1 2,3 "${G4[2]},${G4[3]}")" &&
        expect_err "task 0 (global 0): gpu 0000:17:00.0 cuda0 ${G4[0]}, gpu 0000:18:00.0 cuda1 ${G4[1]}; CPUs 0 set" &&
        expect_err "task 1 (global 1): gpu 0000:65:00.0 cuda2 ${G4[2]}, gpu 0000:66:00.0 cuda3 ${G4[3]}; CPUs 1 set" &&
        node_idle || return 1
    # Without ndev=auto the plan gives task 1 GPU 1, which Slurm bound to task 0 (overload:
    # both GPUs hang off one CPU): refused, naming the spec that agrees with Slurm (issue 24),
    # not only --gpu-bind=none.
    gres_probe -n 2 --gpus-per-task=2 --map-by-device=gpu:overload
    expect_rc 1 && expect_err "per_task:2" &&
        expect_err "add :ndev=auto (--map-by-device=gpu:ndev=auto:overload gives each task exactly the 2 GPUs --gpus-per-task binds to it" &&
        node_idle
}

c_gres_gpu_bind_default() {
    set_plugstack "topology=$FIX_DRM config=$GRES_CONF default=gpu"
    # The admin's default steps aside for Slurm's binding: Slurm's variables stay.
    gres_probe -n 2 --gres=gpu:2 --gpu-bind=closest
    expect_rc 0 && expect_no_err "map-by-device" && expect_out "$(gline 0 0 0-1 0,1 0,1; gline 1 1 0-1 0,1 0,1)" || return 1
    grep -qF "default not applied, Slurm binds the GPUs of this step (SLURMD_TRES_BIND=${TRES_GPU}closest)" "$E2E_DIR/log/slurmd.log" ||
        { echo "slurmd.log lacks the debug line for the default stepping aside"; return 1; }
    # Without --gpu-bind the default maps.
    gres_probe -n 2 --gres=gpu:2
    expect_rc 0 && inside_step && expect_out "$(gline 0 0 0-1 0,1 "${GRES_UUID[0]}"; gline 1 1 0-1 0,1 "${GRES_UUID[1]}")"
}

c_gres_no_gpus_requested() {
    # A step that asked for no GPU: Slurm's gres/gpu runs in the step and removes
    # SLURM_STEP_GPUS, so the step has no GPU on the node (issue 41): the job's GPU mapping is
    # refused with how to ask Slurm for GPUs, said once.
    set_plugstack "topology=$FIX_DRM config=$GRES_CONF"
    gres_probe -n 2 --map-by-device=gpu
    expect_rc 1 && expect_err "the step has no GPUs on $(hostname) (Slurm set no SLURM_STEP_GPUS): ask Slurm for them (--gpus-per-node=N, --gpus-per-task=N or --gres=gpu:N)" || return 1
    [[ $(grep -c "the step has no GPUs" <<<"$ERR") == 1 ]] || { echo "refusal not reported exactly once"; show; return 1; }
    # A network mapping needs no GPU.
    run srun -n 2 --map-by-device=network "$PROBE"
    OUT=$(sort <<<"$OUT")
    expect_rc 0 && expect_out "$(line 0 0 - =mlx5_0,mlx5_1 mlx5_0:1; line 1 1 - =mlx5_0,mlx5_1 mlx5_1:1)" || return 1
    # With GPUs asked for, mapped.
    gres_probe -n 1 --gres=gpu:1 --map-by-device=gpu
    expect_rc 0 && expect_out "$(gline 0 0 0 0 "${GRES_UUID[0]}")" || return 1
    # The admin's default steps aside for the CPU job: unmapped, and slurmd.log says why.
    set_plugstack "topology=$FIX_DRM config=$GRES_CONF default=gpu"
    log_mark
    gres_probe -n 1
    expect_rc 0 && expect_no_err "map-by-device" || return 1
    [[ $OUT == *" SLURM_STEP_GPUS=- CUDA_VISIBLE_DEVICES=-" ]] || { echo "expected the task unmapped, without GPUs"; show; return 1; }
    log_has "default not applied, task runs unmapped: the step has no GPUs on" || return 1
    # require_step_gpus says it explicitly: false maps every GPU of the node, true refuses.
    local conf
    conf=$(gres_conf_with gres-require "require_step_gpus = false")
    set_plugstack "topology=$FIX_DRM config=$conf"
    gres_probe -n 1 --map-by-device=gpu
    expect_rc 0 && expect_out "$(gline 0 0 0 - "${GRES_UUID[0]}")" || return 1
    { cat "$GRES_CONF"; echo "require_step_gpus = true"; } >"$conf"
    gres_probe -n 1 --map-by-device=gpu
    expect_rc 1 && expect_err "the step has no GPUs on" || return 1
    gres_probe -n 1 --gres=gpu:1 --map-by-device=gpu
    expect_rc 0 && expect_out "$(gline 0 0 0 0 "${GRES_UUID[0]}")"
}

c_gres_default_respects_the_job() {
    # The admin's default never overrides what the job asked Slurm for, nor gives it less
    # (issue 41): each of these runs unmapped, with Slurm's own variables, and slurmd.log says
    # why at debug level; the same step without them is mapped.
    set_plugstack "topology=$FIX_DRM config=$GRES_CONF default=gpu"
    gres_probe -n 2 --gres=gpu:2
    expect_rc 0 && expect_out "$(gline 0 0 0-1 0,1 "${GRES_UUID[0]}"; gline 1 1 0-1 0,1 "${GRES_UUID[1]}")" || return 1
    # --cpu-bind of its own (srun sends it; the site's default is slurmd's, never sent).
    local bind
    for bind in cores map_cpu:1,0 none; do
        log_mark
        gres_probe -n 2 --gres=gpu:2 --cpu-bind="$bind"
        expect_rc 0 && expect_no_err "map-by-device" || { echo "(--cpu-bind=$bind)"; return 1; }
        grep -q "CUDA_VISIBLE_DEVICES=GPU-" <<<"$OUT" && { echo "--cpu-bind=$bind: the default mapped"; show; return 1; }
        log_has "default not applied, the job asked Slurm for its own CPU binding (SLURM_CPU_BIND_TYPE=" ||
            { echo "(--cpu-bind=$bind)"; return 1; }
    done
    # --cpu-bind=verbose binds nothing: mapped.
    gres_probe -n 2 --gres=gpu:2 --cpu-bind=verbose
    expect_rc 0 && expect_out "$(gline 0 0 0-1 0,1 "${GRES_UUID[0]}"; gline 1 1 0-1 0,1 "${GRES_UUID[1]}")" || return 1
    # --gpu-bind=none: each task keeps every GPU of the step (22.05 unsets the list in the
    # tasks, later releases keep it).
    log_mark
    gres_probe -n 2 --gres=gpu:2 --gpu-bind=none
    expect_rc 0 && expect_no_err "map-by-device" || return 1
    grep -q "CUDA_VISIBLE_DEVICES=GPU-" <<<"$OUT" && { echo "--gpu-bind=none: the default mapped"; show; return 1; }
    log_has "default not applied, the job chose its own GPU binding (SLURMD_TRES_BIND=${TRES_GPU}none)" || return 1
    # One task given two GPUs (a launcher's daemon; issue 35): a default never gives a task
    # fewer devices than the step's divided by its tasks. With both CPUs (-c 2) the task gets
    # both GPUs and the CPUs next to both (applied as ndev=auto), never one GPU.
    gres_probe -n 1 -c 2 --gres=gpu:2
    expect_rc 0 && expect_out "$(gline 0 0-1 0-1 0,1 "${GRES_UUID[0]},${GRES_UUID[1]}")" || return 1
    # With one CPU, next to the first GPU only, it would leave the second to no task: the
    # default steps aside (the task keeps both GPUs, unmapped) and slurmd.log says why.
    log_mark
    gres_probe -n 1 --gres=gpu:2
    expect_rc 0 && expect_out "$(gline 0 0 0 0,1 0,1)" && expect_no_err "map-by-device" || return 1
    log_has "the default gpu steps aside: it would leave 1 of the step's 2 gpu devices on $(hostname) to no task (renderD129; they are far from the step's CPUs): without the default every task sees them all" || return 1
    # Two CPUs per task (-c 2) where each GPU has one CPU near it: the default would bind each
    # task to fewer CPUs than Slurm gave it.
    log_mark
    gres_probe -n 1 -c 2 --gres=gpu:1
    expect_rc 0 && expect_out "$(gline 0 0-1 0-1 0 0)" || return 1
    log_has "fewer than the 2 it asked Slurm for with --cpus-per-task" || return 1
    # The job's own spec is the job's: its --cpu-bind does not stop it.
    gres_probe -n 2 --gres=gpu:2 --cpu-bind=cores --map-by-device=gpu
    expect_rc 0 && expect_out "$(gline 0 0 0-1 0,1 "${GRES_UUID[0]}"; gline 1 1 0-1 0,1 "${GRES_UUID[1]}")"
}

# --- Cases: the per-node topology cache (live discovery) ---------------------------------
#
# slurmd starts with the plugin configured (cache_dir = $E2E_DIR/cache): its init discovers
# the node and writes topology.json; steps read it instead of discovering the node again.

cache_setup() {
    CACHE_DIR=$E2E_DIR/cache
    CACHE_FILE=$CACHE_DIR/topology.json
    CACHE_CONF=$E2E_DIR/etc/cache.toml
    printf 'cache_dir = "%s"\n' "$CACHE_DIR" >"$CACHE_CONF"
    chmod 644 "$CACHE_CONF"
    # In plugstack.conf before slurmd starts: slurmd's init writes the cache.
    set_plugstack "config=$CACHE_CONF"
}

# A step with live discovery whose outcome does not matter here (a GPU request: refused on
# a node without GPUs); only slurmd.log is read.
cache_step() {
    run srun -n 1 --map-by-device=gpu true
}

c_cache_used() {
    [[ -f $CACHE_FILE ]] || { echo "slurmd wrote no $CACHE_FILE"; ls -la "$CACHE_DIR"; return 1; }
    [[ $(stat -c '%U %a' "$CACHE_FILE") == "root 644" && $(stat -c '%U %a' "$CACHE_DIR") == "root 755" ]] ||
        { echo "cache modes: $(stat -c '%n %U %a' "$CACHE_DIR" "$CACHE_FILE")"; return 1; }
    grep -q "map-by-device: cached this node's topology in $CACHE_FILE" "$E2E_DIR/log/slurmd.log" ||
        { echo "slurmd.log lacks the cache line"; return 1; }
    log_mark
    cache_step
    log_has "topology from slurmd's cache $CACHE_FILE" || return 1
    # As an unprivileged user too (user_init runs as the job's user).
    log_mark
    run runuser -u nobody -- env SLURM_CONF="$SLURM_CONF" srun --chdir=/tmp -n 1 --map-by-device=gpu true
    log_has "topology from slurmd's cache $CACHE_FILE" || return 1
    ((LIVE_NET > 0)) || { SKIPS+=("cache content check: no network device found live here"); return 0; }
    # The steps map from the file's contents: without its PCI devices (rewritten in place,
    # so slurmd's lock stays), the network device is gone, and so is every I/O device.
    local saved=$E2E_DIR/work/topology.json.saved
    cp "$CACHE_FILE" "$saved"
    probe -n 1 --map-by-device=network
    expect_rc 0 || return 1
    jq -c '.topology.pci = [] | .topology.loose = []' "$saved" >"$E2E_DIR/work/emptied.json" &&
        cat "$E2E_DIR/work/emptied.json" >"$CACHE_FILE"
    probe -n 1 --map-by-device=network
    local rc=$RC err=$ERR
    cat "$saved" >"$CACHE_FILE"
    RC=$rc ERR=$err
    expect_rc 1 && expect_err "has no I/O devices at all" || return 1
    probe -n 1 --map-by-device=network
    expect_rc 0
}

# tamper WHAT SETUP UNDO: SETUP spoils the cache, a step must ignore it naming WHAT, UNDO
# restores it, and the next step uses it again.
tamper() {
    local what=$1 setup=$2 undo=$3
    eval "$setup"
    log_mark
    cache_step
    eval "$undo"
    log_has "$what" && log_has "discovering the node live" || { echo "(after: $setup)"; return 1; }
    log_mark
    cache_step
    log_has "topology from slurmd's cache $CACHE_FILE"
}

c_cache_tampered() {
    tamper "cache $CACHE_FILE not used: is writable by group or others (mode 0666)" \
        "chmod 666 '$CACHE_FILE'" "chmod 644 '$CACHE_FILE'" || return 1
    tamper "cache $CACHE_FILE not used: is owned by uid 65534, not root" \
        "chown nobody '$CACHE_FILE'" "chown root '$CACHE_FILE'" || return 1
    tamper "the directory $CACHE_DIR is writable by group or others (mode 0777)" \
        "chmod 777 '$CACHE_DIR'" "chmod 755 '$CACHE_DIR'" || return 1
    tamper "the directory $CACHE_DIR is owned by uid 65534, not root" \
        "chown nobody '$CACHE_DIR'" "chown root '$CACHE_DIR'" || return 1
    # A file from an earlier slurmd (it names that slurmd's lock file, which is gone): not used.
    jq -c '.lock = "0:1"' "$CACHE_FILE" >"$E2E_DIR/work/copy.json"
    chmod 644 "$E2E_DIR/work/copy.json"
    mv -f "$E2E_DIR/work/copy.json" "$CACHE_FILE"
    log_mark
    cache_step
    log_has "cache $CACHE_FILE not used: no running slurmd holds it" && log_has "discovering the node live"
}

# symbol_int FILE SYMBOL: the 4-byte integer an exported data symbol of FILE holds (readelf's
# section table maps its address to a file offset).
symbol_int() {
    local file=$1 sym=$2 addr name type saddr soff ssize _
    addr=$(nm -D --defined-only "$file" | awk -v s="$sym" '$3 == s {print $1}')
    [[ -n $addr ]] || return 1
    # "  [NN] NAME TYPE ADDRESS OFFSET SIZE ...", hexadecimal without 0x.
    while read -r name type saddr soff ssize _; do
        [[ $type != NOBITS && $saddr =~ ^[0-9a-f]+$ && $soff =~ ^[0-9a-f]+$ && $ssize =~ ^[0-9a-f]+$ ]] || continue
        if ((16#$saddr > 0 && 16#$addr >= 16#$saddr && 16#$addr < 16#$saddr + 16#$ssize)); then
            od -An -t d4 -j $((16#$addr - 16#$saddr + 16#$soff)) -N 4 "$file" | tr -d ' '
            return 0
        fi
    done < <(readelf -SW "$file" | sed -n 's/^ *\[ *[0-9]*\] //p')
    return 1
}

c_no_spank_job_scripts() {
    # slurmd loaded the plugin at its start. A plugin that exports slurm_spank_job_prolog or
    # _epilog makes slurmd run "slurmstepd spank prolog/epilog" for every job (about 20 ms
    # each, and the job's CPUs are held until the epilog ends): this one exports neither.
    # From Slurm 25.05 on it also says that a failing init fails the job, not the node.
    local syms want="slurm_spank_init slurm_spank_init_post_opt slurm_spank_local_user_init slurm_spank_slurmd_exit slurm_spank_task_init slurm_spank_user_init "
    syms=$(nm -D --defined-only "$E2E_PLUGIN" | awk '{print $3}' | grep '^slurm_spank_' | sort | tr '\n' ' ')
    if grep -q slurm_spank_init_failure_mode /usr/include/slurm/spank.h; then
        want="slurm_spank_init slurm_spank_init_failure_mode ${want#slurm_spank_init }"
        local mode job_failure
        mode=$(symbol_int "$E2E_PLUGIN" slurm_spank_init_failure_mode)
        # ESPANK_JOB_FAILURE: the enumerator after ESPANK_NODE_FAILURE in slurm_errno.h.
        job_failure=$(awk '/ESPANK_ERROR *=/ {gsub(/[^0-9]/, "", $3); n = $3; on = 1; next}
            on && /ESPANK_/ {n++; if ($1 ~ /^ESPANK_JOB_FAILURE/) {print n; exit}}' /usr/include/slurm/slurm_errno.h)
        [[ -n $mode && $mode == "$job_failure" ]] ||
            { echo "slurm_spank_init_failure_mode is '$mode', expected ESPANK_JOB_FAILURE ($job_failure)"; return 1; }
    fi
    [[ $syms == "$want" ]] || { echo "unexpected hooks exported: $syms (expected: $want)"; return 1; }
    cache_step
    run srun -n 1 true
    if grep -q "calling .*slurmstepd spank" "$E2E_DIR/log/slurmd.log"; then
        echo "slurmd ran spank job scripts:"
        grep "calling .*slurmstepd spank" "$E2E_DIR/log/slurmd.log" | tail -n 3
        return 1
    fi
}

c_cache_slurmd_restart() {
    # A new slurmd rewrites the cache (replacing the stale file of the case before), and
    # removes it when it stops.
    e2e_slurmd_stop && e2e_slurmd_start || return 1
    [[ -f $CACHE_FILE && $(jq -r .writer_pid "$CACHE_FILE") == "${E2E_PIDS[slurmd]}" ]] ||
        { echo "slurmd (pid ${E2E_PIDS[slurmd]}) did not rewrite the cache: $(head -c 200 "$CACHE_FILE")"; return 1; }
    log_mark
    cache_step
    log_has "topology from slurmd's cache $CACHE_FILE" || return 1
    e2e_slurmd_stop
    local ok=0
    [[ ! -e $CACHE_FILE ]] || { echo "slurmd left $CACHE_FILE behind when it stopped"; ok=1; }
    e2e_slurmd_start || return 1
    return $ok
}

# --- Cases: hostile local users (docs/admin-guide.md, Threat model) -------------------------
#
# Each reproduces a way an unprivileged user could steer or stall the root side, and checks
# what happens now: slurmd starts and steps end promptly, root touches nothing outside its own
# directories, and whatever the user planted is refused with a message.

# fake_x_start: an X server impostor, as nobody, on the abstract sockets of displays :0-:9,
# that accepts and never answers (what made slurmd hang in XOpenDisplay through hwloc's gl
# component). FAKE_X_LOG gets one line per connection.
fake_x_start() {
    FAKE_X_LOG=$E2E_DIR/work/fakex.log
    rm -f "$FAKE_X_LOG" "$FAKE_X_LOG.ready"
    runuser -u nobody -- python3 - "$FAKE_X_LOG" <<'PY' &
import select, socket, sys
log, socks, held = sys.argv[1], [], []
for i in range(10):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.bind("\0/tmp/.X11-unix/X%d" % i)
    except OSError:
        continue
    s.listen(64)
    socks.append(s)
open(log + ".ready", "w").write("%d\n" % len(socks))
while True:
    for s in select.select(socks, [], [])[0]:
        held.append(s.accept()[0])
        open(log, "a").write("connection\n")
PY
    FAKE_X_PID=$!
    e2e_wait_for "[[ -s '$FAKE_X_LOG.ready' ]]" 10 || { echo "the fake X server did not start"; return 1; }
    (($(cat "$FAKE_X_LOG.ready") > 0)) || { echo "no X display socket was free for the fake server"; return 1; }
}

# fake_x_connections: how many connections the fake X server has accepted so far.
fake_x_connections() {
    if [[ -f $FAKE_X_LOG ]]; then wc -l <"$FAKE_X_LOG"; else echo 0; fi
}

# fake_x_stop: the plugin's discovery never connected; then the positive control (hwloc with
# its gl component, lstopo as nobody, does connect: the impostor is one hwloc would talk to);
# then the server stops.
fake_x_stop() {
    local n ok=0 pid
    n=$(fake_x_connections)
    ((n == 0)) || { echo "hwloc connected $n times to the fake X server"; ok=1; }
    # setpriv execs lstopo itself, so $! is the process to kill when it hangs in XOpenDisplay.
    setpriv --reuid=nobody --regid=nogroup --clear-groups lstopo-no-graphics --of xml - >/dev/null 2>&1 &
    pid=$!
    # Measured: on sid (hwloc 2.15) lstopo with gl never connects on these machines (its gl
    # component did not probe the displays); there the case only shows that the plugin made no
    # connection, and says so as a skip.
    e2e_wait_for "((\$(fake_x_connections) > n))" 10 ||
        SKIPS+=("the positive control of the fake X server: lstopo-no-graphics (hwloc $(pkg-config --modversion hwloc 2>/dev/null)) did not connect to it within 10 s, so this hwloc's gl component does not probe X displays here; the plugin's discovery made $n connections")
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    kill "$FAKE_X_PID" 2>/dev/null
    wait "$FAKE_X_PID" 2>/dev/null
    return $ok
}

c_sec_fake_x_slurmd() {
    has_gl c_sec_fake_x_slurmd || return 0
    fake_x_start || return 1
    set_plugstack "config=$SEC_CONF"
    e2e_slurmd_stop
    local t0=$SECONDS ok=0
    e2e_slurmd_start || ok=1
    echo "slurmd started in $((SECONDS - t0)) s with the fake X server listening"
    fake_x_stop || ok=1
    ((ok == 0)) || return 1
    grep -q "cached this node's topology in $SEC_CACHE/topology.json" "$E2E_DIR/log/slurmd.log" ||
        { echo "slurmd wrote no cache"; return 1; }
    (((SECONDS - t0) < 30)) || { echo "slurmd took too long to start"; return 1; }
}

c_sec_fake_x_step() {
    has_gl c_sec_fake_x_step || return 0
    fake_x_start || return 1
    set_plugstack "config=$SEC_NOCACHE_CONF"
    local t0=$SECONDS
    run runuser -u nobody -- env SLURM_CONF="$SLURM_CONF" timeout 120 srun --chdir=/tmp -n 1 --map-by-device=network true
    local took=$((SECONDS - t0)) rc=$RC
    fake_x_stop || return 1
    echo "the live-discovery step ended in $took s (exit $rc)"
    ((took < 20)) || { echo "the step took too long"; show; return 1; }
    RC=$rc
    if ((LIVE_NET > 0)); then expect_rc 0 || return 1; else expect_err "has no network devices" || return 1; fi
    node_idle
}

# has_gl CASE: hwloc's gl component is installed (libhwloc-plugins) and lstopo-no-graphics
# (hwloc-nox) runs the control; without them the case proves nothing and says it skipped.
has_gl() {
    if ! compgen -G "/usr/lib/*/hwloc/hwloc_gl.so" >/dev/null; then
        SKIPS+=("$1: no hwloc gl component (hwloc_gl.so, libhwloc-plugins) here")
        return 1
    fi
    command -v lstopo-no-graphics >/dev/null && return 0
    SKIPS+=("$1: no lstopo-no-graphics (hwloc-nox) for the positive control")
    return 1
}

c_sec_discovery_deadline() {
    # A discovery that never ends (the test build waits inside live discovery's child for a
    # file that never comes) is cut at discovery_timeout: slurmd starts promptly without a
    # cache, a live-discovery step ends promptly with one line, the admin's default is dropped.
    [[ -n ${HOOKS_PLUGIN:-} ]] || { echo "no test-hooks build of the plugin"; return 1; }
    local conf=$E2E_DIR/etc/deadline.toml nocache=$E2E_DIR/etc/deadline-nocache.toml
    local go=$E2E_DIR/work/deadline-go cache=$E2E_DIR/deadline-cache ok=0 t0 took
    printf 'cache_dir = "%s"\ndiscovery_timeout = 2\n' "$cache" >"$conf"
    printf 'cache = false\ndiscovery_timeout = 2\n' >"$nocache"
    chmod 644 "$conf" "$nocache"
    rm -f "$go" "$go.reached"
    set_plugstack "config=$conf"
    e2e_slurmd_stop
    e2e_install_plugin "$HOOKS_PLUGIN"
    log_mark
    t0=$SECONDS
    MBD_TEST_PAUSE_AT=live-discovery MBD_TEST_PAUSE_FILE=$go e2e_slurmd_start || ok=1
    took=$((SECONDS - t0))
    echo "slurmd started in $took s with a discovery that never ends"
    [[ -e $go.reached ]] || { echo "the test build never paused in discovery"; ok=1; }
    log_has "no topology cache, every step will discover the node: discovering this machine with hwloc failed: it did not finish within 2 s (killed)" || ok=1
    ((took < 20)) || { echo "slurmd took too long to start"; ok=1; }
    [[ ! -e $cache/topology.json ]] || { echo "slurmd wrote a cache anyway"; ok=1; }
    # A step with live discovery: the job's request fails in one line, promptly.
    set_plugstack "config=$nocache"
    rm -f "$go.reached"
    t0=$SECONDS
    run runuser -u nobody -- env SLURM_CONF="$SLURM_CONF" timeout 120 srun --chdir=/tmp -n 1 --map-by-device=network true
    took=$((SECONDS - t0))
    echo "the live-discovery step ended in $took s (exit $RC)"
    [[ -e $go.reached ]] || { echo "the step's discovery never paused"; ok=1; }
    expect_rc 1 && expect_err "map-by-device: discovering this machine with hwloc failed: it did not finish within 2 s (killed)" || ok=1
    (($(grep -c "did not finish within" <<<"$ERR") == 1)) || { echo "expected the message once"; show; ok=1; }
    ((took < 20)) || { echo "the step took too long"; ok=1; }
    # The admin's default: the task runs unmapped, slurmd.log says why.
    set_plugstack "config=$nocache default=network"
    log_mark
    probe -n 1
    [[ $RC == 0 && $OUT == "task=0 cpus="*" CUDA_VISIBLE_DEVICES=- NCCL_IB_HCA=- UCX_NET_DEVICES=-" ]] ||
        { echo "the admin's default did not run unmapped"; show; ok=1; }
    log_has "did not finish within 2 s (killed)" || ok=1
    e2e_slurmd_stop
    e2e_install_plugin "$E2E_PLUGIN_BUILT"
    set_plugstack "config=$SEC_CONF"
    e2e_slurmd_start || return 1
    return $ok
}

c_sec_cache_symlink() {
    # A user-owned directory in /tmp with a symlink named like the admin's cache_dir, pointing
    # at a root directory that holds a file root must not touch.
    local victim=$E2E_DIR/victim ud conf
    mkdir -p "$victim" && chmod 755 "$victim" && echo "precious" >"$victim/topology.json" || return 1
    ud=$(runuser -u nobody -- mktemp -d /tmp/mbd-sym.XXXXXX) || return 1
    runuser -u nobody -- ln -s "$victim" "$ud/cache" || return 1
    conf=$E2E_DIR/etc/symlink.toml
    printf 'cache_dir = "%s/cache"\n' "$ud" >"$conf" && chmod 644 "$conf"
    set_plugstack "config=$conf"
    e2e_slurmd_stop
    log_mark
    e2e_slurmd_start || return 1
    local ok=0
    [[ $(cat "$victim/topology.json") == precious && ! -e $victim/topology.lock ]] ||
        { echo "root changed the symlink's target: $(ls -la "$victim")"; ok=1; }
    log_has "cache_dir: a parent directory /tmp is writable by group or others (mode 1777)" || ok=1
    log_mark
    run runuser -u nobody -- env SLURM_CONF="$SLURM_CONF" srun --chdir=/tmp -n 1 --map-by-device=network true
    log_has "cache $ud/cache/topology.json not used: a parent directory /tmp is writable" || ok=1
    run cargo run --quiet --manifest-path "$E2E_ROOT/Cargo.toml" --bin map-by-device -- check --config "$conf"
    expect_out_has "a parent directory /tmp is writable by group or others (mode 1777)" || ok=1
    rm -rf "$ud"
    set_plugstack "config=$SEC_CONF"
    e2e_slurmd_stop && e2e_slurmd_start || return 1
    return $ok
}

c_sec_cache_race() {
    # The path to cache_dir is swapped for a symlink right after slurmd checked it (a test
    # build pauses there): everything slurmd does next happens in the directory it opened.
    [[ -n ${HOOKS_PLUGIN:-} ]] || { echo "no test-hooks build of the plugin"; return 1; }
    local race=$E2E_DIR/race conf ok=0
    mkdir -p "$race/victim" && chmod 755 "$race" "$race/victim" || return 1
    conf=$E2E_DIR/etc/race.toml
    printf 'cache_dir = "%s/cache"\n' "$race" >"$conf" && chmod 644 "$conf"
    set_plugstack "config=$conf"
    e2e_slurmd_stop
    e2e_install_plugin "$HOOKS_PLUGIN"
    local log=$E2E_DIR/log/slurmd.log mark
    mark=$(wc -l <"$log")
    MBD_TEST_PAUSE_AT=cache-dir-opened MBD_TEST_PAUSE_FILE=$race/go slurmd -D -N "$E2E_NODE" >>"$E2E_DIR/log/slurmd.out" 2>&1 &
    E2E_PIDS[slurmd]=$!
    if e2e_wait_for "[[ -e '$race/go.reached' ]]" 30; then
        mv "$race/cache" "$race/moved" && ln -s "$race/victim" "$race/cache"
        touch "$race/go"
        e2e_wait_for "tail -n +$((mark + 1)) '$log' | grep -q 'slurmd started on'" 60 || { echo "slurmd did not start"; ok=1; }
        [[ -f $race/moved/topology.json && -f $race/moved/topology.lock ]] ||
            { echo "slurmd did not write into the directory it opened: $(ls -la "$race/moved")"; ok=1; }
        [[ -z $(ls -A "$race/victim") ]] || { echo "slurmd wrote through the swapped path: $(ls -la "$race/victim")"; ok=1; }
    else
        echo "the test build never paused"
        ok=1
    fi
    # slurmd_exit: it removes its own cache, never the file the swapped path now leads to.
    echo precious >"$race/victim/topology.json" && chmod 644 "$race/victim/topology.json"
    e2e_slurmd_stop
    [[ $(cat "$race/victim/topology.json") == precious && $(stat -c '%U %a' "$race/victim/topology.json") == "root 644" ]] ||
        { echo "slurmd_exit touched the symlink's target: $(ls -la "$race/victim")"; ok=1; }
    [[ ! -e $race/moved/topology.json ]] || { echo "slurmd_exit left its own cache behind"; ok=1; }
    e2e_install_plugin "$E2E_PLUGIN_BUILT"
    set_plugstack "config=$SEC_CONF"
    e2e_slurmd_start || return 1
    return $ok
}

c_sec_step_gpus_long() {
    # 12,000 ranges 0-1048576 (120 kB) in the job's SLURM_STEP_GPUS, on a node whose GPUs
    # are not GRES (Slurm leaves the variable as the user set it): ignored, at once.
    set_plugstack "topology=$FIX"
    local long=$E2E_DIR/work/step_gpus t0
    printf '0-1048576,%.0s' $(seq 12000) | head -c 119999 >"$long"
    chmod 644 "$long"
    log_mark
    t0=$(date +%s%N)
    # (through a file: the 120 kB value stays off the case's printed command line)
    run runuser -u nobody -- env SLURM_CONF="$SLURM_CONF" bash -c \
        'SLURM_STEP_GPUS=$(<"$1") exec srun --chdir=/tmp -n 1 --map-by-device=gpu "$2"' - "$long" "$PROBE"
    local ms=$((($(date +%s%N) - t0) / 1000000))
    echo "the step took $ms ms"
    expect_rc 0 && expect_out "$(line 0 0 "$UUID0" - -)" || return 1
    ((ms < 5000)) || { echo "too slow: $ms ms"; return 1; }
    log_has "SLURM_STEP_GPUS ignored (119999 bytes)"
}

c_sec_stale_cache_user_lock() {
    # slurmd dies without cleaning up; a slurmd starts without the plugin, the plugin is then
    # enabled for the steps, and a user holds a lock on the stale file: not trusted.
    set_plugstack "config=$SEC_CONF"
    [[ -f $SEC_CACHE/topology.json ]] || { echo "no cache to begin with"; return 1; }
    kill -KILL "${E2E_PIDS[slurmd]}"
    wait "${E2E_PIDS[slurmd]}" 2>/dev/null
    unset "E2E_PIDS[slurmd]"
    set_plugstack_empty
    e2e_slurmd_start || return 1
    set_plugstack "config=$SEC_CONF"
    # The stale file says the node has no PCI device: if it were used, network would be refused.
    jq -c '.topology.pci = [] | .topology.loose = []' "$SEC_CACHE/topology.json" >"$E2E_DIR/work/stale.json" &&
        cat "$E2E_DIR/work/stale.json" >"$SEC_CACHE/topology.json"
    runuser -u nobody -- flock -s "$SEC_CACHE/topology.json" sleep 60 &
    local locker=$!
    sleep 0.3
    local ok=0
    runuser -u nobody -- flock -n -s "$SEC_CACHE/topology.lock" true 2>/dev/null &&
        { echo "nobody could lock the root-only lock file"; ok=1; }
    log_mark
    run runuser -u nobody -- env SLURM_CONF="$SLURM_CONF" srun --chdir=/tmp -n 1 --map-by-device=network true
    log_has "cache $SEC_CACHE/topology.json not used: no running slurmd holds it" || ok=1
    if ((LIVE_NET > 0)); then expect_rc 0 || ok=1; fi
    kill "$locker" 2>/dev/null
    wait "$locker" 2>/dev/null
    e2e_slurmd_stop && e2e_slurmd_start || return 1
    return $ok
}

c_sec_crafted_xml() {
    # An XML whose GPU UUID carries a newline and text after it.
    local crafted=$E2E_TOPO/crafted.xml
    sed 's/name="NVIDIAUUID" value="GPU-/name="NVIDIAUUID" value="GPU-\&#10;injected: 1 /' "$FIX" >"$crafted"
    chmod 644 "$crafted"
    set_plugstack "topology=$crafted"
    run runuser -u nobody -- env SLURM_CONF="$SLURM_CONF" srun --chdir=/tmp -n 2 --map-by-device=gpu:verbose "$PROBE"
    expect_rc 1 && expect_err 'CUDA_VISIBLE_DEVICES would be "GPU-\ninjected: 1 ' || return 1
    ! grep -q "^injected" <<<"$ERR" || { echo "the newline reached the terminal"; show; return 1; }
    node_idle || return 1
    probe -n 2 --map-by-device=network
    expect_rc 0 && expect_out "$NET_LINES"
}

c_sec_untrusted_topology() {
    local ud
    ud=$(runuser -u nobody -- mktemp -d /tmp/mbd-topo.XXXXXX) || return 1
    runuser -u nobody -- cp "$FIX" "$ud/t.xml"
    set_plugstack "topology=$ud/t.xml"
    run runuser -u nobody -- env SLURM_CONF="$SLURM_CONF" srun --chdir=/tmp -n 1 --map-by-device=gpu true
    rm -rf "$ud"
    expect_rc 1 && expect_err "cannot use topology=$ud/t.xml: a parent directory /tmp is writable by group or others" ||
        return 1
    cp "$FIX" "$E2E_TOPO/open.xml" && chmod 666 "$E2E_TOPO/open.xml"
    set_plugstack "topology=$E2E_TOPO/open.xml"
    run runuser -u nobody -- env SLURM_CONF="$SLURM_CONF" srun --chdir=/tmp -n 1 --map-by-device=gpu true
    expect_rc 1 && expect_err "the file $E2E_TOPO/open.xml is writable by group or others (mode 0666)" || return 1
    node_idle
}

security_setup() {
    SEC_CACHE=$E2E_DIR/seccache
    SEC_CONF=$E2E_DIR/etc/sec.toml
    SEC_NOCACHE_CONF=$E2E_DIR/etc/sec-nocache.toml
    printf 'cache_dir = "%s"\n' "$SEC_CACHE" >"$SEC_CONF"
    printf 'cache = false\ndiscovery_timeout = 30\n' >"$SEC_NOCACHE_CONF"
    chmod 644 "$SEC_CONF" "$SEC_NOCACHE_CONF"
    set_plugstack "config=$SEC_CONF"
    # The race case needs a build that can pause; a package never has it.
    build_hooks_plugin || return 1
}

# --- Phases: "name|function" ----------------------------------------------------------

AFFINITY_CASES=(
    "srun/sbatch/salloc --help list --map-by-device|c_help"
    "gpu: task 0 on CPU 0 with GPU 0, task 1 on CPU 1 with GPU 1|c_gpu"
    "gpu:interleave|c_interleave"
    "gpu:bind=none names the GPU and keeps Slurm's CPUs|c_bind_none"
    "gpu:verbose prints one line per task on the terminal|c_verbose"
    "network: NCCL_IB_HCA and UCX_NET_DEVICES, CPU next to the HCA|c_network"
    "gpu:adapters: each task its GPU and the HCA beside it, shared pairs said in verbose|c_adapters"
    "slingshot: one NIC per task, never the management port; FI_CXI_DEVICE_NAME one value per node; gpu:adapters|c_slingshot"
    "ndev=2 with --cpus-per-task=2 and bind=core|c_ndev_cpus_per_task"
    "the plugin's mask wins over --cpu-bind (none/cores/map/mask, 20 runs each)|c_mask_wins"
    "closest picks the GPU next to Slurm's binding|c_closest"
    "a device named by its PMIx id or PCI bus id (ids with ':'), with qualifiers after it|c_ids_with_colons"
    "shared never stacks tasks on one core unless :overload|c_overload_refused"
    "ppr=2: consecutive tasks per GPU|c_ppr"
    "bind=split: two GPUs on one package get a core each; omp tells OpenMP, keeps the job's value|c_split_omp"
    "admin omp = true: OMP_* reach each mapped task; the job's own OMP_* values are kept; omp=false opts out|c_admin_omp"
    "reader: libgomp (gcc -fopenmp) runs gpu:omp tasks one thread per core, each bound to its own core of the task|c_reader_omp"
    "reader: UCX (ucx_info) reads every UCX_NET_DEVICES of network and gpu:adapters as written, device:port|c_reader_ucx"
    "plugstack default= applies when the job gives no spec|c_default_applies"
    "--map-by-device=none turns the default off|c_default_none"
    "a job's spec overrides the default|c_default_overridden"
    "config= TOML file, overridden by the plugstack line|c_default_from_config_file"
    "#SBATCH --map-by-device reaches the steps, not the batch script|c_sbatch"
    "salloc --map-by-device reaches its steps|c_salloc"
    "the environment form $OPTION_ENV|c_environment_form"
    "a bad spec fails in srun/sbatch/salloc before anything is created|c_bad_spec"
    "too many tasks fails the step once; the next step works|c_too_many_tasks"
    "bind=package above the locality fails the step; the next works|c_bind_above_locality"
    "a GPU without identity fails the step; the next works|c_no_identity"
    "HWLOC_XMLFILE in the job's environment is ignored (topology=)|c_hwloc_env_topology"
    "HWLOC_XMLFILE in the job's environment is ignored (live discovery)|c_hwloc_env_live"
    "an admin default is soft on a node without the device|c_soft_default"
    "a broken plugstack.conf fails submissions with its message|c_broken_config"
    "an unprivileged user's job is mapped|c_unprivileged_user"
)

CGROUP_CASES=(
    "cgroup: gpu binds each task inside the step's cpuset|c_cgroup_gpu"
    "cgroup: the plugin's mask wins over --cpu-bind (20 runs each)|c_cgroup_mask_wins"
    "cgroup: a step given one CPU is never bound outside it|c_step_cpus"
)

# task/affinity with slurm.conf describing the node as it is: Slurm enforces nothing, the
# plugin keeps to the step's allocated cores (S_STEP_ALLOC_CORES).
AFFINITY_REAL_CASES=(
    "affinity, real layout: a step given one CPU is never bound outside it|c_step_cpus"
    "launchers: mpirun (Open MPI) ranks under a default never share one GPU nor sit on another's|c_launch_ompi_default"
    "launchers: mpiexec.hydra -launcher slurm ranks under a default never share one GPU|c_launch_hydra_default"
    "launchers: torchrun-style workers of one srun task under a default never share one GPU|c_launch_torch_default"
    "launchers: map-by-device exec under mpirun maps each rank as srun maps its task|c_launch_ompi_exec"
    "launchers: map-by-device exec under mpiexec.hydra maps each rank as srun maps its task|c_launch_hydra_exec"
    "launchers: map-by-device exec in torchrun-style workers (LOCAL_RANK) maps each as srun does|c_launch_torch_exec"
)

# task/cgroup + ConstrainCores with two fake GPUs as GRES; GPUs named by driver files.
GRES_CASES=(
    "gres: -c1 --gres=gpu:1: bound inside the step, told the GPU Slurm gave it|c_gres_partial_step"
    "gres: two concurrent jobs with one GPU each stay on their own CPU and GPU|c_gres_two_jobs"
    "gres: a GPU local to another job's CPU is refused; bind=none keeps the step's CPU|c_gres_foreign_cpus"
    "gres: --gres=gpu:2 -n 2 gives each task its own GPU|c_gres_two_gpus_two_tasks"
    "gres: --gres=gpu:1 -n 2 is refused without shared, shared needs overload on one core|c_gres_one_gpu_two_tasks"
    "gres: --gpu-bind refuses a GPU mapping (once); none, one task, network are fine|c_gres_gpu_bind"
    "gres: the admin default steps aside for --gpu-bind|c_gres_gpu_bind_default"
    "gres: MIG instances (Slurm 26.05's MIG-<uuid>) are refused, never replaced; Slurm's value stays|c_gres_mig"
    "gres: env_uuid (Slurm names the step's GPUs by UUID) maps, and must agree with SLURM_STEP_GPUS|c_gres_env_uuid"
    "gres: a step without GPUs has none: refused (once), a default steps aside; require_step_gpus says otherwise|c_gres_no_gpus_requested"
    "gres: the default leaves --cpu-bind, --gpu-bind=none and -c above the locality alone; one task gets every GPU or none|c_gres_default_respects_the_job"
    "gres: a user's own SLURM_STEP_GPUS (no --gres, another --gres) is Slurm's to replace: only the allocation is mapped|c_gres_user_step_gpus"
    "gres: launchers: mpirun and mpiexec.hydra ranks under a default get both GPUs or Slurm's; exec maps as srun|c_gres_launch"
)

# task/affinity, GresTypes=gpu for the cluster, no GPU GRES on the node.
GRES_TYPES_CASES=(
    "gres types only: a node without GPU GRES gives a step none (require_step_gpus = false: all); a user's own SLURM_STEP_GPUS is removed|c_gres_types_user_step_gpus"
)

# The same with four fake GPUs (gres.conf: /dev/full, /dev/null, /dev/random, /dev/zero =
# Slurm's GPUs 0-3) on topologies/e2e-4gpu.xml: two per package, one CPU per package.
GRES4_CASES=(
    "gres, 4 GPUs: --gpus-per-task=2 -n 2 with ndev=auto gives each task exactly Slurm's two GPUs and their CPU|c_gres4_gpus_per_task"
)

# task/affinity, real layout, live discovery; slurmd starts with the plugin configured, so
# its init writes the topology cache.
CACHE_CASES=(
    "cache: slurmd writes it at its start, steps (root and nobody) use it|c_cache_used"
    "cache: a writable, foreign-owned, or unlocked cache is ignored|c_cache_tampered"
    "cache: a restarted slurmd rewrites it, a stopped one removes it|c_cache_slurmd_restart"
    "slurmd runs no spank prolog/epilog per job for the plugin; 25.05+: init failures are the job's|c_no_spank_job_scripts"
)

# task/affinity, real layout, live discovery; unprivileged users try to steer or stall root.
SECURITY_CASES=(
    "security: slurmd starts at once while a fake X server never answers|c_sec_fake_x_slurmd"
    "security: a live-discovery step ends at once while a fake X server never answers|c_sec_fake_x_step"
    "security: a discovery that never ends is cut at discovery_timeout: slurmd starts, the step fails in one line|c_sec_discovery_deadline"
    "security: cache_dir through a user's symlink is refused, its target untouched|c_sec_cache_symlink"
    "security: cache_dir swapped for a symlink after the check: slurmd (start and exit) stays in the directory it opened|c_sec_cache_race"
    "security: a 120 kB SLURM_STEP_GPUS from the job is ignored at once|c_sec_step_gpus_long"
    "security: a stale cache locked by a user is not trusted|c_sec_stale_cache_user_lock"
    "security: a newline in an XML UUID refuses the GPU and never reaches the terminal|c_sec_crafted_xml"
    "security: topology= in a user's directory, or writable by others, is refused|c_sec_untrusted_topology"
)

# --- Main --------------------------------------------------------------------------------

main() {
    local t0=$SECONDS
    e2e_require_root "tests/e2e/run.sh starts slurmd and slurmctld"
    e2e_install_packages "${E2E_READER_PACKAGES[@]}" "${E2E_LAUNCHER_PACKAGES[@]}" || abort "installing the Debian packages"
    e2e_build_plugin || abort "building the plugin"
    cases_fixtures
    # The GRES phase: Slurm's GPU index i is the fixture's i-th GPU in bus order; its UUID is
    # the one in that bus id's NVIDIA driver file (no identity in the XML itself).
    GRES_PROC=$E2E_ROOT/topologies/drivers/nvidia/proc
    GRES_BUS=(0000:17:00.0 0000:65:00.0)
    GRES_UUID=()
    for b in "${GRES_BUS[@]}"; do
        GRES_UUID+=("$(sed -n 's/^GPU UUID:[[:space:]]*//p' "$GRES_PROC/driver/nvidia/gpus/$b/information")")
    done
    [[ ${GRES_UUID[0]} == "$UUID0" && ${GRES_UUID[1]} == "$UUID1" ]] ||
        abort "the driver files' UUIDs (${GRES_UUID[*]}) are not e2e-2gpu.xml's ($UUID0 $UUID1)"

    FIX_4GPU=$E2E_ROOT/topologies/e2e-4gpu.xml
    mapfile -t G4 < <(grep -o 'name="NVIDIAUUID" value="[^"]*"' "$FIX_4GPU" | sed 's/.*value="//;s/"$//')
    ((${#G4[@]} == 4)) || abort "reading the four GPU UUIDs of $FIX_4GPU"
    cases_init
    # The plugin reads topology= only from root-only directories: the private copy (a
    # checkout under /tmp or in a user's home is not one).
    FIX_4GPU=$E2E_TOPO/${FIX_4GPU##*/}
    # The GRES phase's probe: also the step's cpuset (the task's cpuset cgroup) and the GPU
    # list Slurm gave the step; with HOLD set it then sleeps that long (a job that stays).
    GPROBE=$E2E_DIR/work/gprobe.sh
    cat >"$GPROBE" <<'EOF'
#!/bin/bash
cg=$(sed -n 's/^[0-9]*:cpuset:\(.*\)$/\1/p' /proc/self/cgroup)
step=$(cat "/sys/fs/cgroup/cpuset$cg/cpuset.cpus" 2>/dev/null || echo "?")
echo "task=$SLURM_LOCALID cpus=$(grep Cpus_allowed_list /proc/self/status | cut -f2) step=$step SLURM_STEP_GPUS=${SLURM_STEP_GPUS:--} CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:--}"
[[ -n ${HOLD:-} ]] && exec sleep "$HOLD"
exit 0
EOF
    chmod 755 "$GPROBE"
    # The reader cases' tasks. OMP_TASK: the task's mask, numactl's reading of it and its
    # OMP_* (read here: libgomp binds the initial thread to the first place as it loads), then
    # what libgomp made of them (tests/e2e/fixtures/omp_places.c, built with this gcc).
    OMP_TASK=$E2E_DIR/work/omp-task.sh
    gcc -fopenmp -O -Wall -o "$E2E_DIR/work/omp_places" "$HERE/fixtures/omp_places.c" ||
        abort "building tests/e2e/fixtures/omp_places.c with gcc -fopenmp"
    cat >"$OMP_TASK" <<EOF
#!/bin/bash
cpus=\$(grep Cpus_allowed_list /proc/self/status | cut -f2)
phys=\$(numactl --show | sed -n 's/^physcpubind: *//p' | xargs | tr ' ' ,)
hwloc=\$(hwloc-calc --physical-output --intersect pu "\$(hwloc-bind --get)")
echo "task=\$SLURM_LOCALID cpus=\$cpus physcpubind=\$phys hwloc=\$hwloc OMP_NUM_THREADS=\${OMP_NUM_THREADS:--} OMP_PLACES=\${OMP_PLACES:--} OMP_PROC_BIND=\${OMP_PROC_BIND:--}"
exec $E2E_DIR/work/omp_places
EOF
    # UCX_TASK: one line per task: UCX_NET_DEVICES as the plugin left it, as UCX's parser
    # read it (ucx_info -c prints the list it made, re-joined), ucx_info's exit status, and
    # what UCX said opening a context with it (-p): every line but the report's own ("#")
    # and the configuration's, without the time/host/source prefix and the list of this
    # machine's devices. One ucx_info: on sid (UCX 1.23) each start takes 0.4 s.
    UCX_TASK=$E2E_DIR/work/ucx-task.sh
    cat >"$UCX_TASK" <<'EOF'
#!/bin/bash
info=$(ucx_info -c -u t -p 2>&1)
rc=$?
conf=$(sed -n 's/^UCX_NET_DEVICES=//p' <<<"$info")
said=$(grep -v -e '^#' -e '^UCX_[A-Z0-9_]*=' <<<"$info" |
    sed -E 's/^\[[^]]*\] +\[[^]]*\] +[^ ]+ +//; s/, please use one or more of: .*//; s/ +/ /g' | paste -sd '|')
echo "task=${SLURM_LOCALID:--} UCX_NET_DEVICES=${UCX_NET_DEVICES-(unset)} config=$conf rc=$rc said=$said"
EOF
    chmod 755 "$OMP_TASK" "$UCX_TASK"
    FAKE_PLUGIN=$E2E_DIR/lib/fake_gpu_env.so
    gcc -shared -fPIC -Wall -o "$FAKE_PLUGIN" "$HERE/fixtures/fake_gpu_env.c" || abort "building the test plugin fake_gpu_env.so"
    # The launcher cases' ranks: the probe plus every other variable of the plugin's.
    launch_init "${PLUGIN_VARS[@]}"
    MBD_NODE_GPUS[$E2E_NODE]=$UUID0,$UUID1 MBD_NODE_GPU_CPUS[$E2E_NODE]=0-1
    MBD_GPU_NAME[$UUID0]=0 MBD_GPU_NAME[$UUID1]=1
    GRES_CONF=$E2E_DIR/etc/gres-plugin.toml
    printf 'proc_root = "%s"\n' "$GRES_PROC" >"$GRES_CONF"
    chmod 644 "$GRES_CONF"

    run_phase affinity - "${AFFINITY_CASES[@]}"
    run_phase affinity-real - "${AFFINITY_REAL_CASES[@]}"
    if e2e_cgroup_v1_available; then
        run_phase cgroup - "${CGROUP_CASES[@]}"
        run_phase gres - "${GRES_CASES[@]}"
        E2E_GRES_FILES="/dev/full /dev/null /dev/random /dev/zero" run_phase gres - "${GRES4_CASES[@]}"
    else
        SKIPS+=("task/cgroup and GRES cases: no cgroup v1 cpuset/freezer hierarchy mounted here")
    fi
    run_phase affinity-gres-types - "${GRES_TYPES_CASES[@]}"
    run_phase affinity-real cache_setup "${CACHE_CASES[@]}"
    run_phase affinity-real security_setup "${SECURITY_CASES[@]}"
    NOTES+=("e2e took $((SECONDS - t0)) s")
    summary
    ((FAILED == 0))
}

main "$@"
