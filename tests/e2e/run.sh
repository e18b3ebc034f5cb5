#!/usr/bin/env bash
# End-to-end suite: the plugin on a real single-node Slurm 22.05 that this script starts on
# localhost (tests/e2e/lib.sh), driven with real srun/sbatch/salloc, checked from inside the
# tasks (Cpus_allowed_list in /proc/self/status, env).
#
#   tests/e2e/run.sh              # every case (root; installs the Debian packages if missing)
#   tests/e2e/run.sh closest      # only the cases whose name contains "closest"
#   E2E_KEEP=1 tests/e2e/run.sh   # keep the private directory (configs, logs) afterwards
#
# Two phases: task/affinity (8 CPUs declared on the real 2, like the facts notes), then
# task/cgroup with ConstrainCores (cgroup v1; skipped with a note where v1 is not mounted).
# Topologies: topologies/e2e-2gpu.xml (two packages, one core, one GPU and one HCA each),
# its GPU-without-identity twin e2e-2gpu-drm.xml, and tests/e2e/fixtures/e2e-snc-2gpu.xml
# (one package, a device per core: bind=package is above the devices' locality).
#
# Prints one line per case, the failing case's commands and output, the daemons' logs if
# anything failed, and finally exactly "N passed, N failed"; exits 1 on any failure.

set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/e2e/lib.sh
source "$HERE/lib.sh"

FILTER=${1:-}
PASSED=0
FAILED=0
FAILED_NAMES=()
NOTES=()

FIX=$E2E_ROOT/topologies/e2e-2gpu.xml
FIX_DRM=$E2E_ROOT/topologies/e2e-2gpu-drm.xml
FIX_SNC=$HERE/fixtures/e2e-snc-2gpu.xml
OPTION_ENV=SLURM_SPANK__SLURM_SPANK_OPTION_map_by_device_map_by_device

# --- Helpers -----------------------------------------------------------------------------

# run CMD...: runs it, keeping stdout in OUT, stderr in ERR, the exit status in RC.
run() {
    local o e
    o=$(mktemp) e=$(mktemp)
    echo "+ $*"
    "$@" >"$o" 2>"$e"
    RC=$?
    OUT=$(<"$o") ERR=$(<"$e")
    rm -f "$o" "$e"
}

# probe SRUN-ARGS...: srun the probe; OUT holds one line per task, sorted by task.
probe() {
    run srun "$@" "$PROBE"
    OUT=$(sort <<<"$OUT")
}

show() {
    printf -- '--- exit %s\n--- stdout:\n%s\n--- stderr:\n%s\n' "$RC" "$OUT" "$ERR"
}

expect_rc() {
    [[ $RC == "$1" ]] && return 0
    echo "expected exit status $1, got $RC"
    show
    return 1
}

expect_fail() {
    [[ $RC != 0 ]] && return 0
    echo "expected a failure, got exit status 0"
    show
    return 1
}

expect_out() {
    [[ $OUT == "$1" ]] && return 0
    echo "unexpected task output (- expected, + got):"
    diff <(printf '%s\n' "$1") <(printf '%s\n' "$OUT") | sed -n '/^[<>]/s/^</-/;s/^>/+/p'
    show
    return 1
}

expect_err() {
    grep -qF -- "$1" <<<"$ERR" && return 0
    echo "stderr lacks: $1"
    show
    return 1
}

expect_no_err() {
    grep -qF -- "$1" <<<"$ERR" || return 0
    echo "stderr should not have: $1"
    show
    return 1
}

# The probe's line for a task: its CPUs and the variables the plugin may set ("-" = unset).
line() { # TASK CPUS CUDA NCCL UCX
    echo "task=$1 cpus=$2 CUDA_VISIBLE_DEVICES=$3 NCCL_IB_HCA=$4 UCX_NET_DEVICES=$5"
}

# Number of jobs slurmctld knows (any state), to prove a refusal created none.
job_count() { squeue -h -t all -o %i 2>/dev/null | wc -l; }

# run_case NAME FUNCTION: one line per case; the function's output only when it fails.
run_case() {
    local name=$1 fn=$2 out t0 tenths
    out=$(mktemp)
    t0=$(date +%s%N)
    if "$fn" >"$out" 2>&1; then
        PASSED=$((PASSED + 1))
        tenths=$((($(date +%s%N) - t0) / 100000000))
        printf 'ok    %-78s %4d.%ds\n' "$name" $((tenths / 10)) $((tenths % 10))
    else
        FAILED=$((FAILED + 1))
        FAILED_NAMES+=("$name")
        tenths=$((($(date +%s%N) - t0) / 100000000))
        printf 'FAIL  %-78s %4d.%ds\n' "$name" $((tenths / 10)) $((tenths % 10))
        sed 's/^/      /' "$out"
    fi
    rm -f "$out"
}

# --- Cases: task/affinity ----------------------------------------------------------------

c_help() {
    local cmd
    set_plugstack "topology=$FIX"
    for cmd in srun sbatch salloc; do
        run "$cmd" --help
        expect_rc 0 || return 1
        grep -q -- '--map-by-device=spec' <<<"$OUT" || { echo "$cmd --help does not list --map-by-device"; return 1; }
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
        expect_err "map-by-device: $E2E_NODE, task 0 (global 0): cuda0 0000:17:00.0 $UUID0; CPUs 0 set; CUDA_VISIBLE_DEVICES=$UUID0" &&
        expect_err "map-by-device: $E2E_NODE, task 1 (global 1): cuda1 0000:65:00.0 $UUID1; CPUs 1 set; CUDA_VISIBLE_DEVICES=$UUID1"
}

c_network() {
    set_plugstack "topology=$FIX"
    probe -n 2 --map-by-device=network
    expect_rc 0 && expect_out "$NET_LINES"
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
    local script=$E2E_DIR/work/batch.sh out=$E2E_DIR/work/batch.out
    cat >"$script" <<EOF
#!/bin/bash
#SBATCH --map-by-device=network
#SBATCH --ntasks=2
#SBATCH --output=$out
echo "script cpus=\$(grep Cpus_allowed_list /proc/self/status | cut -f2) NCCL_IB_HCA=\${NCCL_IB_HCA:--}"
srun $PROBE | sort
srun --map-by-device=gpu $PROBE | sort
EOF
    rm -f "$out"
    run sbatch --wait "$script"
    expect_rc 0 || return 1
    OUT=$(<"$out")
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
    [[ $(job_count) == "$before" ]] || { echo "a refused submission created a job"; squeue -t all; return 1; }
}

c_too_many_tasks() {
    set_plugstack "topology=$FIX"
    probe -n 3 --map-by-device=gpu
    expect_rc 1 && expect_err "3 tasks with ndev=1 need 3 gpu devices, but 2 are available" || return 1
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
        NOTES+=("skipped the live HWLOC_XMLFILE case: this machine has GPUs, it needs one without")
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
        NOTES+=("skipped the soft-default case: this machine has GPUs, it needs one without")
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
    # The GPU whose CPUs the step does not have: refused, never bound outside the step.
    probe -n 1 --map-by-device=gpu:ndev=1
    if [[ $held == 0 ]]; then
        expect_rc 1 && expect_err "none of which are allocated to this step (allowed CPUs: $free)" || ok=1
    else
        expect_rc 0 && expect_out "$(line 0 0 "$UUID0" - -)" || ok=1
    fi
    # The device next to the step's CPU: bound to it.
    if ((ok == 0)); then
        probe -n 1 --map-by-device="$dev"
        expect_rc 0 && expect_out "$(line 0 "$free" - "=$dev" "$dev:1")" || ok=1
    fi
    # bind=none keeps Slurm's binding (the step's CPU) and still names the device.
    if ((ok == 0)); then
        probe -n 1 --map-by-device=gpu:bind=none
        expect_rc 0 && expect_out "$(line 0 "$free" "$UUID0" - -)" || ok=1
    fi
    scancel --quiet --name=bash >/dev/null 2>&1
    kill "$holder" 2>/dev/null
    wait "$holder" 2>/dev/null
    return $ok
}

# --- Phases: "name|function" ----------------------------------------------------------

AFFINITY_CASES=(
    "srun/sbatch/salloc --help list --map-by-device|c_help"
    "gpu: task 0 on CPU 0 with GPU 0, task 1 on CPU 1 with GPU 1|c_gpu"
    "gpu:interleave|c_interleave"
    "gpu:bind=none names the GPU and keeps Slurm's CPUs|c_bind_none"
    "gpu:verbose prints one line per task on the terminal|c_verbose"
    "network: NCCL_IB_HCA and UCX_NET_DEVICES, CPU next to the HCA|c_network"
    "ndev=2 with --cpus-per-task=2 and bind=core|c_ndev_cpus_per_task"
    "the plugin's mask wins over --cpu-bind (none/cores/map/mask, 20 runs each)|c_mask_wins"
    "closest picks the GPU next to Slurm's binding|c_closest"
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
)

# run_phase MODE "name|function"...: starts the cluster in MODE if any case is selected.
run_phase() {
    local mode=$1 entry wanted=()
    shift
    for entry in "$@"; do
        [[ -z $FILTER || ${entry%%|*} == *"$FILTER"* ]] && wanted+=("$entry")
    done
    ((${#wanted[@]})) || return 0
    cluster_start "$mode" || abort "starting the cluster ($mode mode)"
    for entry in "${wanted[@]}"; do
        run_case "${entry%%|*}" "${entry##*|}"
    done
    cluster_stop
}

# --- Main --------------------------------------------------------------------------------

summary() {
    if ((FAILED > 0)); then
        printf '\nfailed: %s\n' "${FAILED_NAMES[@]}"
        [[ -n ${E2E_DIR:-} ]] && e2e_dump_logs
    fi
    local n
    for n in "${NOTES[@]}"; do printf 'note: %s\n' "$n"; done
    echo "$PASSED passed, $FAILED failed"
}

abort() {
    FAILED=$((FAILED + 1))
    FAILED_NAMES+=("$1")
    printf 'FAIL  %s\n' "$1"
    summary
    exit 1
}

main() {
    local t0=$SECONDS
    if [[ $(id -u) != 0 ]]; then
        echo "tests/e2e/run.sh starts slurmd and slurmctld: run it as root" >&2
        echo "0 passed, 1 failed"
        exit 1
    fi
    e2e_install_packages || abort "installing the Debian packages"
    e2e_build_plugin || abort "building the plugin"
    for f in "$FIX" "$FIX_DRM" "$FIX_SNC"; do
        [[ -r $f ]] || abort "fixture $f missing"
    done
    # The fixture's GPU identities, in tree order (GPU 0000:17:00.0 near PU0, then 0000:65:00.0).
    mapfile -t UUIDS < <(grep -o 'name="NVIDIAUUID" value="[^"]*"' "$FIX" | sed 's/.*value="//;s/"$//')
    ((${#UUIDS[@]} == 2)) || abort "expected 2 NVIDIAUUIDs in $FIX, found ${#UUIDS[@]}"
    UUID0=${UUIDS[0]} UUID1=${UUIDS[1]}
    GPU_LINES=$(line 0 0 "$UUID0" - -; line 1 1 "$UUID1" - -)
    NET_LINES=$(line 0 0 - =mlx5_0 mlx5_0:1; line 1 1 - =mlx5_1 mlx5_1:1)
    # Unbound tasks get slurmd's CPUs: this machine's, as this shell sees them.
    ALL_CPUS=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)
    UNMAPPED_LINES=$(line 0 "$ALL_CPUS" - - -; line 1 "$ALL_CPUS" - - -)
    LIVE_GPUS=$( (cd "$E2E_ROOT" && cargo run --quiet --bin map-by-device -- devices 2>/dev/null) | grep -c '^gpu ')

    e2e_init || abort "creating the private cluster directory"
    trap e2e_cleanup EXIT
    trap 'exit 130' INT TERM
    PROBE=$E2E_DIR/work/probe.sh
    cat >"$PROBE" <<'EOF'
#!/bin/bash
# One line per task: its CPUs and the device variables ("-" when unset).
out="task=$SLURM_LOCALID cpus=$(grep Cpus_allowed_list /proc/self/status | cut -f2)"
for v in CUDA_VISIBLE_DEVICES NCCL_IB_HCA UCX_NET_DEVICES; do
    val=$(env | sed -n "s/^$v=//p")
    out+=" $v=${val:--}"
done
echo "$out"
EOF
    chmod 755 "$PROBE"

    run_phase affinity "${AFFINITY_CASES[@]}"
    run_phase affinity-real "${AFFINITY_REAL_CASES[@]}"
    if e2e_cgroup_v1_available; then
        run_phase cgroup "${CGROUP_CASES[@]}"
    else
        NOTES+=("task/cgroup cases skipped: no cgroup v1 cpuset/freezer hierarchy mounted here")
    fi
    NOTES+=("e2e took $((SECONDS - t0)) s")
    summary
    ((FAILED == 0))
}

main "$@"
