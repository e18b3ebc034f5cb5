# shellcheck shell=bash
# Ranks that another launcher starts (issue 35), for the end-to-end suites (run.sh on one
# node, multinode/run.sh on three): Open MPI's mpirun, MPICH's mpiexec.hydra with its Slurm
# launcher, and workers started the way torchrun starts them, all from Debian's packages
# (lib.sh's E2E_LAUNCHER_PACKAGES), inside an allocation of the suite's Slurm. Each rank runs
# the suite's probe (PROBE) through RPROBE, which gives it the rank and local rank its
# launcher set, so a rank's line reads like an srun task's. Source after cases.sh, then:
#
#   launch_init [VAR...]        # RPROBE (the probe plus these variables), TORCH_LAUNCH, MBD
#                               # (the CLI, for `map-by-device exec`), the launchers'
#                               # versions, EXT_LAUNCHER (srun has --external-launcher)
#   launch KIND EXT N PROG...   # PROG as N ranks of KIND (ompi, hydra, torch), EXT "ext" to
#                               # start the launcher's daemons with srun --external-launcher;
#                               # LAUNCH_WHERE: salloc's (or, torch, srun's) node options
#   srun_ranks N SRUN-ARGS...   # the same ranks as srun's tasks (the reference)
#   expect_default_ranks N      # the default's rule for the ranks in OUT (below)
#   launch_note LABEL           # a "note: " line of what each rank in OUT got (the table)
#
# Open MPI starts one orted (4.1) or prted (5.0 and later) per node with srun, MPICH's hydra
# one hydra_pmi_proxy; torchrun is one agent per node that the job starts with srun. Each
# is a one-task step whose task forks the ranks, which inherit its CPU mask and variables.

# The launchers, by absolute path: both packages provide mpirun and mpiexec (alternatives).
OMPI_RUN=/usr/bin/mpirun.openmpi
HYDRA_RUN=/usr/bin/mpiexec.hydra
# Open MPI refuses root without these (4.1: OMPI_*; 5.0 and later read the same through
# PRRTE's schizo/ompi; --allow-run-as-root is the flag form).
OMPI_ROOT_ENV=(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1)
# Every variable of the plugin's table (src/env.rs VARIABLES).
PLUGIN_VARS=(CUDA_VISIBLE_DEVICES ROCR_VISIBLE_DEVICES ZE_AFFINITY_MASK ZE_FLAT_DEVICE_HIERARCHY NCCL_IB_HCA
    UCX_NET_DEVICES PSM3_NIC OMP_NUM_THREADS OMP_PLACES OMP_PROC_BIND PMIX_DEVICE_ID)
LAUNCH_WHERE=()
LAUNCH_OWN_VARS=""
# Set by the suite: MBD_NODE_GPUS[node]: "UUID,UUID" of the node's GPUs in bus order, and
# MBD_NODE_GPU_CPUS[node] the CPUs next to all of them (a node without GPUs: unset);
# MBD_GPU_NAME[UUID]: the short name the notes give it; MBD_NODE_SLURM_GPUS[node]: the
# GPU list Slurm itself sets where it manages the node's GPUs (a default that stepped aside
# leaves it).
declare -gA MBD_NODE_GPUS=() MBD_NODE_GPU_CPUS=() MBD_GPU_NAME=() MBD_NODE_SLURM_GPUS=()

# launch_init [VAR...]: RPROBE prints the probe's line with the launcher's rank and local
# rank in place of Slurm's, and each VAR the probe does not print; TORCH_LAUNCH; MBD.
launch_init() {
    local extra="$*"
    RPROBE=$E2E_DIR/work/rank-probe.sh
    cat >"$RPROBE" <<EOF
#!/bin/bash
# A rank of LAUNCH_KIND: the probe's line, with the rank and local rank that launcher gave it.
case \${LAUNCH_KIND:-} in
    ompi) r=\${OMPI_COMM_WORLD_RANK:-} l=\${OMPI_COMM_WORLD_LOCAL_RANK:-} ;;
    hydra) r=\${PMI_RANK:-} l=\${MPI_LOCALRANKID:-} ;;
    torch) r=\${RANK:-} l=\${LOCAL_RANK:-} ;;
    slurm) r=\${SLURM_PROCID:-} l=\${SLURM_LOCALID:-} ;;
esac
if [[ -z \${r:-} || -z \${l:-} ]]; then
    echo "a rank of \${LAUNCH_KIND:-no launcher} without its rank variables: \$(env | grep -E '^(OMPI_COMM_WORLD_|PMI_RANK|MPI_LOCAL|LOCAL_RANK|RANK|SLURM_PROCID|SLURM_LOCALID)' | sort | tr '\n' ' ')"
    exit 1
fi
# A launcher that forked the rank itself, outside any step (Open MPI where it takes the
# allocation's node for its own), would prove nothing about the daemon's step.
if [[ \${LAUNCH_KIND:-} != slurm && -z \${SLURM_STEP_ID:-} ]]; then
    echo "a rank of \$LAUNCH_KIND outside any Slurm step (rank \$r): the launcher did not start it through srun"
    exit 1
fi
line=\$(SLURM_PROCID=\$r SLURM_LOCALID=\$l "$PROBE")
for v in $extra; do
    [[ \$line == *" \$v="* ]] || line+=" \$v=\${!v:--}"
done
echo "\$line"
EOF
    # The way torchrun (torch.distributed.run) starts its workers: one agent per node forks
    # --nproc-per-node workers, each with LOCAL_RANK, RANK, GROUP_RANK, ROLE_RANK,
    # LOCAL_WORLD_SIZE, WORLD_SIZE, ROLE_WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
    # TORCHELASTIC_* in its environment, and OMP_NUM_THREADS=1 where the job set none and
    # there is more than one worker (PyTorch's docs, "torchrun (Elastic Launch)").
    TORCH_LAUNCH=$E2E_DIR/work/torch-launch.sh
    cat >"$TORCH_LAUNCH" <<'EOF'
#!/bin/bash
# torch-launch.sh NPROC PROG...: started by srun, one per node.
n=$1
shift
node=${SLURM_NODEID:-0} nnodes=${SLURM_NNODES:-1}
if ((n > 1)) && [[ -z ${OMP_NUM_THREADS:-} ]]; then export OMP_NUM_THREADS=1; fi
for ((i = 0; i < n; i++)); do
    LOCAL_RANK=$i RANK=$((node * n + i)) GROUP_RANK=$node ROLE_RANK=$((node * n + i)) \
        LOCAL_WORLD_SIZE=$n WORLD_SIZE=$((nnodes * n)) ROLE_WORLD_SIZE=$((nnodes * n)) ROLE_NAME=default \
        MASTER_ADDR=${SLURM_LAUNCH_NODE_IPADDR:-127.0.0.1} MASTER_PORT=29500 TORCHELASTIC_RUN_ID=none \
        TORCHELASTIC_RESTART_COUNT=0 TORCHELASTIC_MAX_RESTARTS=0 "$@" &
done
rc=0
for ((i = 0; i < n; i++)); do wait -n || rc=1; done
exit $rc
EOF
    chmod 755 "$RPROBE" "$TORCH_LAUNCH"
    MBD=${CARGO_TARGET_DIR:-$E2E_ROOT/target}/release/map-by-device
    OMPI_VERSION=$(dpkg-query -W -f='${Version}' openmpi-bin 2>/dev/null)
    MPICH_VERSION=$(dpkg-query -W -f='${Version}' mpich 2>/dev/null)
    SLURM_VERSION=${SLURM_VERSION:-$(slurmd -V | awk '{print $NF}')}
    # srun --external-launcher: Slurm 23.11 and later (srun --help does not list it).
    local major minor
    IFS=. read -r major minor _ <<<"${SLURM_VERSION:-0.0}"
    EXT_LAUNCHER=0
    ((10#${major:-0} * 100 + 10#${minor:-0} >= 2311)) && EXT_LAUNCHER=1
    NOTES+=("launchers: Open MPI ${OMPI_VERSION:-missing} ($OMPI_RUN), MPICH ${MPICH_VERSION:-missing} ($HYDRA_RUN -launcher slurm), srun --external-launcher: $( ((EXT_LAUNCHER)) && echo yes || echo "no (Slurm ${SLURM_VERSION:-?})")")
}

# launch_available KIND: whether KIND's launcher is installed; if not, one skipped: line says
# so (once per launcher) and the case passes without it.
launch_available() {
    case $1 in
        ompi) [[ -n ${OMPI_VERSION:-} ]] && return 0 ;;
        hydra) [[ -n ${MPICH_VERSION:-} ]] && return 0 ;;
        *) return 0 ;;
    esac
    if [[ " ${LAUNCH_SKIPPED:-} " != *" $1 "* ]]; then
        LAUNCH_SKIPPED+=" $1"
        local what="Open MPI (openmpi-bin)"
        [[ $1 == hydra ]] && what="MPICH's mpiexec.hydra (mpich)"
        SKIPS+=("the $1 launcher cases: $what is not installed${E2E_LAUNCHER_MISSING_WHY:+ ($E2E_LAUNCHER_MISSING_WHY)}")
    fi
    return 1
}

# launch_build_cli: the release CLI that `map-by-device exec` runs (test-all.sh --prepare
# builds it; built here where it is missing).
launch_build_cli() {
    [[ -x $MBD ]] && return 0
    e2e_log "building the CLI (cargo build --release -p map-by-device)"
    (cd "$E2E_ROOT" && cargo build --quiet --release -p map-by-device) && [[ -x $MBD ]]
}

# launch KIND EXT N PROG...: OUT holds one line per rank, sorted.
#   ompi   salloc -n N mpirun -n N --bind-to none PROG     (Open MPI's plm/slurm: srun per node)
#   hydra  salloc -n N mpiexec.hydra -launcher slurm -n N PROG
#   torch  srun -n 1 -c N torch-launch.sh N PROG            (LAUNCH_WHERE: srun's node options)
# EXT "ext": the launcher's srun gets --external-launcher (Open MPI's plm_slurm_args, hydra's
# HYDRA_LAUNCHER_EXTRA_ARGS), as sites configure it.
launch() {
    local kind=$1 ext=$2 n=$3 env=(LAUNCH_KIND="$1")
    # A launcher whose srun failed may wait for its daemons for ever (mpiexec.hydra does):
    # the case fails with exit status 124 instead of holding the suite. Inside the
    # allocation: salloc itself may be a shell function (multinode runs it in the hub's
    # network namespace), which `timeout salloc` would bypass.
    : "${LAUNCH_TIMEOUT:=60}"
    shift 3
    # What the launcher itself sets in its ranks, never the plugin's doing (torchrun: OMP_NUM_THREADS=1).
    LAUNCH_OWN_VARS=""
    [[ $kind == torch ]] && LAUNCH_OWN_VARS=OMP_NUM_THREADS
    # salloc 23.11 and later sets the launchers' srun arguments to --external-launcher itself
    # (src/common/env.c, set_env_from_opts): a plain run removes them, so that both kinds of
    # daemon step are tried.
    local unset=()
    [[ $ext != ext ]] && unset=(-u OMPI_MCA_plm_slurm_args -u PRTE_MCA_plm_slurm_args -u HYDRA_LAUNCHER_EXTRA_ARGS -u I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS)
    case $kind in
        ompi)
            env+=("${OMPI_ROOT_ENV[@]}")
            [[ $ext == ext ]] && env+=(OMPI_MCA_plm_slurm_args=--external-launcher PRTE_MCA_plm_slurm_args=--external-launcher)
            run salloc -Q -n "$n" "${LAUNCH_WHERE[@]}" timeout -k 5 "$LAUNCH_TIMEOUT" env "${unset[@]}" "${env[@]}" "$OMPI_RUN" --allow-run-as-root -n "$n" --bind-to none "$@"
            ;;
        hydra)
            [[ $ext == ext ]] && env+=(HYDRA_LAUNCHER_EXTRA_ARGS=--external-launcher)
            run salloc -Q -n "$n" "${LAUNCH_WHERE[@]}" timeout -k 5 "$LAUNCH_TIMEOUT" env "${unset[@]}" "${env[@]}" "$HYDRA_RUN" -launcher slurm -n "$n" "$@"
            ;;
        torch)
            run srun -n 1 -c "$n" "${LAUNCH_WHERE[@]}" env "${env[@]}" "$TORCH_LAUNCH" "$n" "$@"
            ;;
        *)
            echo "launch: unknown launcher $kind"
            return 1
            ;;
    esac
    OUT=$("${PROBE_SORT[@]}" <<<"$OUT")
}

# srun_ranks N SRUN-ARGS...: RPROBE as srun's N tasks, the reference for `exec`.
srun_ranks() {
    local n=$1
    shift
    run srun -n "$n" "$@" env LAUNCH_KIND=slurm "$RPROBE"
    OUT=$("${PROBE_SORT[@]}" <<<"$OUT")
}

# field LINE NAME: the value of NAME= in a probe line.
field() {
    sed -n "s/.* $2=\\([^ ]*\\).*/\\1/p" <<<" $1"
}

# expect_default_ranks N: OUT has ranks 0..N-1, once each, and each follows the rule of a
# default for ranks another launcher starts (issue 35): its node's GPU variable lists every
# GPU of the node, and its CPUs are the CPUs next to them (the default gave the launcher's
# one-task daemon the whole share), or the plugin set nothing for it at all (the default
# stepped aside). Never a single GPU of several: two ranks would share it, or a rank would
# be confined to another rank's GPU. The node is the line's node= (one node: node1).
expect_default_ranks() {
    local n=$1 l i rank node gpus have cpus v bad=0 seen=" "
    while read -r l; do
        [[ -n $l ]] || continue
        rank=$(field "$l" rank)
        [[ -n $rank ]] || rank=$(field "$l" task)
        node=$(field "$l" node)
        [[ -n $node ]] || node=$E2E_NODE
        [[ $seen == *" $rank "* ]] && { echo "rank $rank reported twice"; bad=1; }
        seen+="$rank "
        cpus=$(field "$l" cpus)
        have=$(field "$l" CUDA_VISIBLE_DEVICES)
        [[ $have == - || -z $have ]] && have=$(field "$l" ROCR_VISIBLE_DEVICES)
        gpus=${MBD_NODE_GPUS[$node]:-}
        if [[ $have == - || -z $have || $have == "${MBD_NODE_SLURM_GPUS[$node]:-}" ]]; then
            # Stepped aside: no variable of the plugin's at all (Slurm's own GPU list stays).
            for v in "${PLUGIN_VARS[@]}"; do
                [[ $v == CUDA_VISIBLE_DEVICES || $v == ROCR_VISIBLE_DEVICES || " $LAUNCH_OWN_VARS " == *" $v "* ]] && continue
                local val
                val=$(field "$l" "$v")
                # Slurm's own GPU list (its gres/gpu sets ZE_AFFINITY_MASK too) is no mapping.
                [[ -n $val && $val == "${MBD_NODE_SLURM_GPUS[$node]:-}" ]] && continue
                [[ -z $val || $val == - ]] || { echo "rank $rank: no GPU variable but $v=$val (a partial mapping)"; bad=1; }
            done
        elif [[ -n $gpus && $(tr , '\n' <<<"$have" | sort | paste -sd,) == $(tr , '\n' <<<"$gpus" | sort | paste -sd,) ]]; then
            [[ $cpus == "${MBD_NODE_GPU_CPUS[$node]}" ]] ||
                { echo "rank $rank on $node: every GPU, but CPUs $cpus, not those next to them (${MBD_NODE_GPU_CPUS[$node]})"; bad=1; }
        else
            echo "rank $rank on $node: told GPUs $have, not every GPU of the node ($gpus) nor none"
            bad=1
        fi
    done <<<"$OUT"
    for ((i = 0; i < n; i++)); do
        [[ $seen == *" $i "* ]] || { echo "rank $i did not report"; bad=1; }
    done
    ((bad == 0)) && return 0
    show
    return 1
}

# expect_same_ranks REF: OUT (the launcher's ranks) is REF (srun's tasks) line for line.
expect_same_ranks() {
    local v
    # What the launcher sets itself (torchrun: OMP_NUM_THREADS=1) where srun's task has nothing.
    for v in $LAUNCH_OWN_VARS; do
        [[ $1 == *" $v=-"* ]] && OUT=$(sed "s/ $v=[^ ]*/ $v=-/g" <<<"$OUT")
    done
    # The comparison and its diff are cases.sh's (- srun's tasks, + the launcher's ranks).
    expect_out "$1"
}

# launch_note LABEL: a note line (CI's log keeps it) of each rank in OUT: its node, GPUs (by
# MBD_GPU_NAME) and CPUs, e.g. "r0 node1 gpu 0,1 cpus 0-1".
launch_note() {
    local l rank node have cpus row=() g names
    while read -r l; do
        [[ -n $l ]] || continue
        rank=$(field "$l" rank)
        [[ -n $rank ]] || rank=$(field "$l" task)
        node=$(field "$l" node)
        cpus=$(field "$l" cpus)
        have=$(field "$l" CUDA_VISIBLE_DEVICES)
        [[ $have == - || -z $have ]] && have=$(field "$l" ROCR_VISIBLE_DEVICES)
        names=()
        if [[ $have == - || -z $have ]]; then
            names=(none)
        elif [[ $have == "${MBD_NODE_SLURM_GPUS[${node:-$E2E_NODE}]:-}" ]]; then
            names=("Slurm's $have")
        else
            for g in ${have//,/ }; do names+=("${MBD_GPU_NAME[$g]:-$g}"); done
        fi
        row+=("r$rank${node:+ $node} gpu $(
            IFS=,
            echo "${names[*]}"
        ) cpus $cpus")
    done <<<"$OUT"
    local joined
    joined=$(printf '%s; ' "${row[@]}")
    NOTES+=("launchers: $1: ${joined%; }")
}

# launch_label KIND EXT: how a note names the launcher.
launch_label() {
    local l
    case $1 in
        ompi) l="mpirun --bind-to none (Open MPI $OMPI_VERSION)" ;;
        hydra) l="mpiexec.hydra -launcher slurm (MPICH $MPICH_VERSION)" ;;
        torch) l="srun -n 1 + 2 torchrun-style workers" ;;
    esac
    [[ $2 == ext ]] && l+=" --external-launcher"
    echo "$l"
}
