# shellcheck shell=bash
# The helpers of the end-to-end suites on a local Slurm (run.sh, hardening.sh, and the
# multi-node suite multinode/run.sh): the case runner and its verdicts, the probe every task
# runs, and the fixtures' expected lines. Source tests/e2e/lib.sh first (or
# tests/e2e/multinode/lib.sh, which sources it). Then:
#
#   cases_fixtures                 # UUID0/UUID1, GPU_LINES, NET_LINES, ALL_CPUS, UNMAPPED_LINES, LIVE_*
#   cases_init                     # CLUSTER_INIT, the cleanup trap, FIX* in root-only copies, PROBE
#   run_phase MODE SETUP "name|function"...   # one cluster, the selected cases
#   summary                        # the failed cases, notes, skipped: lines (SKIPS), "N passed, N failed"
#   build_hooks_plugin             # HOOKS_PLUGIN: a build with the test-hooks feature
#
# What a suite may change (the multi-node suite does): CASE_CHECK, the check after every case
# (default node_up: the single node is still in service); CASE_WIDTH, the width of a case's
# name in its line; PROBE_SORT, how probe sorts the tasks' lines; DUMP_LOGS, what prints the
# daemons' logs when a case failed; CLUSTER_INIT and CLUSTER_CLEANUP, what makes the private
# cluster directory and what the exit trap runs (default e2e_init and e2e_cleanup).

FILTER=${1:-}
PASSED=0
FAILED=0
FAILED_NAMES=()
NOTES=()
# What could not run here and why: printed as "skipped: ..." lines, which scripts/test-all.sh counts.
SKIPS=()

FIX=$E2E_ROOT/topologies/e2e-2gpu.xml
FIX_DRM=$E2E_ROOT/topologies/e2e-2gpu-drm.xml
FIX_SNC=$E2E_ROOT/tests/e2e/fixtures/e2e-snc-2gpu.xml
# shellcheck disable=SC2034 # for the suites that source this file
OPTION_ENV=SLURM_SPANK__SLURM_SPANK_OPTION_map_by_device_map_by_device
CASE_CHECK=node_up
CASE_WIDTH=78
PROBE_SORT=(sort)
DUMP_LOGS=e2e_dump_logs
CLUSTER_INIT=e2e_init
CLUSTER_CLEANUP=e2e_cleanup

# --- Helpers -----------------------------------------------------------------------------

# run CMD...: runs it, keeping stdout in OUT, stderr in ERR, the exit status in RC and the
# time it took in SECS.
run() {
    local o e t0
    o=$(mktemp) e=$(mktemp)
    echo "+ $*"
    t0=$(date +%s.%N)
    "$@" >"$o" 2>"$e"
    RC=$?
    SECS=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
    OUT=$(<"$o") ERR=$(<"$e")
    rm -f "$o" "$e"
}

# probe SRUN-ARGS...: srun the probe; OUT holds one line per task, sorted by task.
probe() {
    run srun "$@" "$PROBE"
    OUT=$("${PROBE_SORT[@]}" <<<"$OUT")
}

show() {
    printf -- '--- exit %s (%s s)\n--- stdout:\n%s\n--- stderr:\n%s\n' "$RC" "$SECS" "$OUT" "$ERR"
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
    diff <(printf '%s\n' "$1") <(printf '%s\n' "$OUT") | sed -n 's/^</-/p;s/^>/+/p'
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

# node_up: the node is still in service (a refusal fails the job or the step, never the node):
# not drained, down or failing, as slurmctld sees it after the case.
node_up() {
    local state
    state=$(sinfo -h -n "$E2E_NODE" -o '%T' 2>&1)
    [[ -n $state && $state != *drain* && $state != *down* && $state != *fail* && $state != *DRAIN* ]] && return 0
    echo "node $E2E_NODE is $state after the case: $(sinfo -h -n "$E2E_NODE" -o '%E' 2>&1)"
    scontrol update nodename="$E2E_NODE" state=resume >/dev/null 2>&1 || true
    return 1
}

# run_case NAME FUNCTION: one line per case; the function's output only when it fails. Every
# case also runs CASE_CHECK afterwards (node_up: the node is still in service).
run_case() {
    local name=$1 fn=$2 out t0 tenths
    out=$(mktemp)
    t0=$(date +%s%N)
    if "$fn" >"$out" 2>&1 && "$CASE_CHECK" >>"$out" 2>&1; then
        PASSED=$((PASSED + 1))
        tenths=$((($(date +%s%N) - t0) / 100000000))
        printf 'ok    %-*s %4d.%ds\n' "$CASE_WIDTH" "$name" $((tenths / 10)) $((tenths % 10))
    else
        FAILED=$((FAILED + 1))
        FAILED_NAMES+=("$name")
        tenths=$((($(date +%s%N) - t0) / 100000000))
        printf 'FAIL  %-*s %4d.%ds\n' "$CASE_WIDTH" "$name" $((tenths / 10)) $((tenths % 10))
        sed 's/^/      /' "$out"
    fi
    rm -f "$out"
}

# log_mark: remembers slurmd.log's length; log_has PATTERN: the pattern is in what came after
# (waiting up to 5 s: srun can return before slurmstepd's last lines reach the log).
log_mark() { LOG_MARK=$(wc -l <"$E2E_DIR/log/slurmd.log"); }
log_has() { log_file_has "$E2E_DIR/log/slurmd.log" "$LOG_MARK" "$1"; }

# log_file_has FILE FROM TEXT: FILE has TEXT after its line FROM (within 5 s).
log_file_has() {
    local i
    for ((i = 0; i < 50; i++)); do
        tail -n +"$(($2 + 1))" "$1" | grep -qF -- "$3" && return 0
        sleep 0.1
    done
    echo "${1##*/} lacks (since line $2): $3"
    tail -n +"$(($2 + 1))" "$1" | grep map-by-device | tail -n 5
    return 1
}

# node_idle: the node is idle again (never drained by a refusal).
node_idle() {
    e2e_wait_for "[[ \$(sinfo -h -n $E2E_NODE -o %t) == idle ]]" 15 && return 0
    echo "node $E2E_NODE is not idle: $(sinfo -h -n "$E2E_NODE" -o '%t %E')"
    return 1
}

expect_out_has() {
    grep -qF -- "$1" <<<"$OUT" && return 0
    echo "stdout lacks: $1"
    show
    return 1
}

# run_phase MODE SETUP "name|function"...: runs SETUP (a function, or "-") and starts the
# cluster in MODE if any case is selected.
run_phase() {
    local mode=$1 setup=$2 entry wanted=()
    shift 2
    for entry in "$@"; do
        [[ -z $FILTER || ${entry%%|*} == *"$FILTER"* ]] && wanted+=("$entry")
    done
    ((${#wanted[@]})) || return 0
    if [[ $setup != - ]]; then
        "$setup" || abort "setting up the $mode phase"
    else
        set_plugstack_empty
    fi
    cluster_start "$mode" || abort "starting the cluster ($mode mode)"
    for entry in "${wanted[@]}"; do
        run_case "${entry%%|*}" "${entry##*|}"
    done
    cluster_stop
}

summary() {
    if ((FAILED > 0)); then
        printf '\nfailed: %s\n' "${FAILED_NAMES[@]}"
        [[ -n ${E2E_DIR:-} ]] && "$DUMP_LOGS"
    fi
    local n
    for n in "${NOTES[@]}"; do printf 'note: %s\n' "$n"; done
    for n in "${SKIPS[@]}"; do printf 'skipped: %s\n' "$n"; done
    echo "$PASSED passed, $FAILED failed"
}

abort() {
    FAILED=$((FAILED + 1))
    FAILED_NAMES+=("$1")
    printf 'FAIL  %s\n' "$1"
    summary
    exit 1
}

# expand LIST: "0-2,5" -> "0 1 2 5".
expand() {
    local part out=() i
    local -a parts
    IFS=, read -ra parts <<<"$1"
    for part in "${parts[@]}"; do
        if [[ $part == - ]]; then
            continue
        elif [[ $part == *-* ]]; then
            for ((i = ${part%-*}; i <= ${part#*-}; i++)); do out+=("$i"); done
        else
            out+=("$part")
        fi
    done
    echo "${out[*]}"
}

# The fixtures' expected probe lines, and what live discovery finds here.
# shellcheck disable=SC2034 # its globals are for the suites that source this file
cases_fixtures() {
    for f in "$FIX" "$FIX_DRM" "$FIX_SNC"; do
        [[ -r $f ]] || abort "fixture $f missing"
    done
    # The fixture's GPU identities, in tree order (GPU 0000:17:00.0 near PU0, then 0000:65:00.0).
    mapfile -t UUIDS < <(grep -o 'name="NVIDIAUUID" value="[^"]*"' "$FIX" | sed 's/.*value="//;s/"$//')
    ((${#UUIDS[@]} == 2)) || abort "expected 2 NVIDIAUUIDs in $FIX, found ${#UUIDS[@]}"
    UUID0=${UUIDS[0]} UUID1=${UUIDS[1]}
    GPU_LINES=$(line 0 0 "$UUID0" - -; line 1 1 "$UUID1" - -)
    NET_LINES=$(line 0 0 - =mlx5_0,mlx5_1 mlx5_0:1; line 1 1 - =mlx5_0,mlx5_1 mlx5_1:1)
    # Unbound tasks get slurmd's CPUs: this machine's, as this shell sees them.
    ALL_CPUS=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)
    UNMAPPED_LINES=$(line 0 "$ALL_CPUS" - - -; line 1 "$ALL_CPUS" - - -)
    # What differs between the Slurm releases (docs/admin-guide.md, "Slurm releases").
    SLURM_VERSION=$(slurmd -V | awk '{print $NF}')
    if [[ $(printf '%s\n%s\n' 23.11 "$SLURM_VERSION" | sort -V | head -n1) == 23.11 ]]; then
        TRES_GPU=gres/gpu: # 23.11 made --gpu-bind an alias of --tres-bind=gres/gpu:
        NONE_STEP_GPUS=0,1 # --gpu-bind=none keeps SLURM_STEP_GPUS (measured on 24.11 and 26.05)
    else
        TRES_GPU=gpu:
        NONE_STEP_GPUS=- # 22.05 unsets it in each task
    fi
    NOTES+=("Slurm $SLURM_VERSION: GPU binding spelled ${TRES_GPU}..., --gpu-bind=none leaves SLURM_STEP_GPUS=$NONE_STEP_GPUS")
    LIVE_DEVICES=$(cd "$E2E_ROOT" && cargo run --quiet --bin map-by-device -- devices 2>/dev/null)
    LIVE_GPUS=$(grep -c '^gpu ' <<<"$LIVE_DEVICES")
    LIVE_NET=$(grep -c '^network ' <<<"$LIVE_DEVICES")
}

# The private cluster directory (CLUSTER_INIT; CLUSTER_CLEANUP at exit removes it), the
# fixtures' root-only copies, the probe.
cases_init() {
    "$CLUSTER_INIT" || abort "creating the private cluster directory"
    trap '"$CLUSTER_CLEANUP"' EXIT
    # The plugin reads topology= only from root-only directories: the private copies.
    FIX=$E2E_TOPO/${FIX##*/} FIX_DRM=$E2E_TOPO/${FIX_DRM##*/} FIX_SNC=$E2E_TOPO/${FIX_SNC##*/}
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
}

# HOOKS_PLUGIN: the plugin built with the test-hooks feature (pauses, forced panics), in the
# private lib directory; a package never has it. Call after cases_init.
build_hooks_plugin() {
    if [[ -z ${HOOKS_PLUGIN:-} ]]; then
        e2e_log "building the plugin with test hooks"
        local both=(-p map-by-device-spank -p map-by-device-discover)
        (cd "$E2E_ROOT" && cargo build --quiet --release "${both[@]}" \
            --features map-by-device-spank/test-hooks,map-by-device-discover/test-hooks) || return 1
        # In a directory of its own, with its own discovery library (the live-discovery pause).
        mkdir -p "$E2E_DIR/lib/hooks" && chmod 755 "$E2E_DIR/lib/hooks"
        HOOKS_PLUGIN=$E2E_DIR/lib/hooks/map_by_device.so
        cp "$E2E_PLUGIN_BUILT" "$HOOKS_PLUGIN"
        cp "$(e2e_discover_of "$E2E_PLUGIN_BUILT")" "$E2E_DIR/lib/hooks/map_by_device_discover.so"
        # Back to the normal build for everything after this suite (packages included).
        (cd "$E2E_ROOT" && cargo build --quiet --release "${both[@]}") || return 1
    fi
}
