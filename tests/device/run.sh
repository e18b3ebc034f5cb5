#!/usr/bin/env bash
# The engine on a real NVIDIA GPU (issue 23), on a machine with no Slurm, no network and
# nothing to install: what map-by-device finds and plans, checked against NVIDIA's own tools.
#   a. `map-by-device devices` lists each GPU that `nvidia-smi --query-gpu` reports, at its
#      PCI bus id, with its UUID (and no GPU that nvidia-smi does not report);
#   b. `map-by-device plan -n 1 gpu` (and `-n N gpu` on N GPUs) binds each task inside the
#      "CPU Affinity" that `nvidia-smi topo -m` gives the task's GPU;
#   c. the CUDA driver itself (libcuda.so.1 through Python's ctypes: cuInit, cuDeviceGetCount,
#      cuDeviceGet, cuDeviceGetUuid_v2), run under the CUDA_VISIBLE_DEVICES=GPU-<uuid> the plan
#      gives the task, sees exactly one device, the one with that UUID.
#
#   tests/device/stage.sh        # on the build machine (Debian 12): the release CLI and the
#                                # libraries it needs beyond glibc, into .device/
#   bash tests/device/run.sh     # on the GPU machine, from the repository root, with .device
#   tests/device/run.sh --stage  # a machine that builds and runs both (scripts/test-all.sh's
#                                # suite "device"): stages first, only when a GPU is present
#   tests/device/selftest.sh     # every branch of this script, against fake nvidia-smi and
#                                # libcuda and the fixture topologies (no GPU needed)
#
# Prints "ok ..." or "FAIL ..." per check, "skipped: ..." for a check that could not run and
# why, and ends with "N passed, N failed" (scripts/test-all.sh's convention); exits 1 if any
# failed. Without an NVIDIA GPU (no nvidia-smi, or one that lists none or cannot reach its
# driver) nothing runs: one "skipped: " line, "0 passed, 0 failed", exit 0 (what CI prints,
# at once); without a loadable libcuda.so.1 only the c checks are skipped. With $OUT set,
# the whole output is also written to $OUT/device.log (the GPU machine's runner brings $OUT
# back). MBD_DEVICE_DIR names another staged folder (default .device). Needs python3 (else
# torch's, /opt/torch/.venv/bin/python3) for the JSON, the topo -m table and the CUDA calls
# (tests/device/helper.py), and coreutils' timeout.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE=$ROOT/tests/device
DEV=${MBD_DEVICE_DIR:-$ROOT/.device}
STAGE=0
[[ ${1:-} == --stage ]] && STAGE=1
passed=0 failed=0
ERR=$(mktemp /tmp/mbd-device.XXXXXX)
trap 'rm -f "$ERR"' EXIT

ok() { echo "ok $*"; passed=$((passed + 1)); }
fail() { echo "FAIL $*"; failed=$((failed + 1)); }
skip() { echo "skipped: $*"; }
# Detail for the log: indented, so that no line of a tool's output reads as a verdict.
show() { sed 's/^/    /'; }
finish() {
    echo "$passed passed, $failed failed"
    exit $((failed > 0))
}
# A hung nvidia-smi or cuInit (a VM without its device) must not hold the run: each call
# gets a deadline (and SIGKILL 5 s after it).
limit() {
    local s=$1
    shift
    if command -v timeout >/dev/null 2>&1; then timeout -k 5 "$s" "$@"; else "$@"; fi
}
# The staged CLI with the staged libraries only: LD_LIBRARY_PATH as stage.sh checked it.
mbd() { LD_LIBRARY_PATH=$DEV/lib limit 60 "$DEV/bin/map-by-device" "$@"; }
helper() { "$PY" "$HERE/helper.py" "$@"; }
# One line of a tool's message (whole: the engine's refusals are long and their end says what
# to do), bounded only against a runaway output.
first_line() { tr '\n' ' ' | sed 's/  */ /g; s/ $//' | cut -c1-2000; }

# Why a GPU that nvidia-smi reports is not one map-by-device can map: what the kernel shows
# of it. Debian's hwloc has no NVML/CUDA backend, so the engine sees an NVIDIA GPU as its PCI
# function (with a DRM render node where nvidia-drm is loaded) and names it from the driver's
# information file.
diagnose_bus() {
    local sys=/sys/bus/pci/devices/$1 info=/proc/driver/nvidia/gpus/$1/information driver
    {
        if [[ -d $sys ]]; then
            driver=$(readlink "$sys/driver" 2>/dev/null)
            echo "$sys: class $(cat "$sys/class" 2>/dev/null), vendor $(cat "$sys/vendor" 2>/dev/null)," \
                "driver ${driver##*/}, drm: $(ls "$sys/drm" 2>/dev/null | first_line | grep . || echo none)"
        else
            echo "$sys: absent (this kernel's sysfs does not show the GPU at that bus id)"
        fi
        if [[ -r $info ]]; then echo "$info: $(grep -i 'uuid' "$info" | first_line)"; else echo "$info: absent"; fi
        echo "(map-by-device's hwloc lists an NVIDIA GPU as its PCI function, or its render node where" \
            "nvidia-drm runs, and names it from $info)"
    } | show
}

# GPU_BUS[i], GPU_UUID[i]: nvidia-smi's GPUs by index; AFF[i]: topo -m's CPU Affinity.
declare -a GPU_BUS=() GPU_UUID=()
declare -A AFF=()
TOPO_PROBLEM="" LIBCUDA="" CUDA_PROBLEM=""

index_of_bus() {
    local i
    for i in "${!GPU_BUS[@]}"; do [[ ${GPU_BUS[$i]} == "$1" ]] && { echo "$i"; return 0; }; done
    return 1
}

# The GPU machine's facts, printed before any check (the log must say what was tested).
versions() {
    echo "== versions"
    {
        limit 60 nvidia-smi --query-gpu=index,name,driver_version,pci.bus_id,uuid --format=csv,noheader 2>&1 |
            sed 's/^/nvidia-smi gpu: /'
        echo "map-by-device: $(mbd --version 2>&1 | first_line) ($DEV/bin/map-by-device)"
        [[ -r $DEV/MANIFEST ]] && sed 's/^/staged: /' "$DEV/MANIFEST"
        echo "system: $(. /etc/os-release 2>/dev/null && echo "${PRETTY_NAME:-unknown}"), kernel $(uname -r)," \
            "$(getconf GNU_LIBC_VERSION 2>/dev/null || echo 'glibc unknown'), $("$PY" --version 2>&1) ($PY)"
        echo "/proc/driver/nvidia/gpus: $(ls /proc/driver/nvidia/gpus 2>/dev/null | first_line | grep . || echo '(absent or empty)')"
        echo "CUDA_VISIBLE_DEVICES in this environment: ${CUDA_VISIBLE_DEVICES-(unset)}"
    } | show
}

# a. The device list against nvidia-smi's.
check_devices() {
    local json gpus rc i bus uuid row id name other extra=0
    echo "== a. map-by-device devices against nvidia-smi --query-gpu"
    mbd devices 2>/dev/null | show
    json=$(mbd devices --json 2>"$ERR")
    rc=$?
    if ((rc != 0)); then
        fail "(a) map-by-device devices exited $rc: $(first_line <"$ERR")"
        return
    fi
    if ! gpus=$(helper devices-gpus <<<"$json" 2>"$ERR"); then
        fail "(a) map-by-device devices --json: $(first_line <"$ERR")"
        return
    fi
    for i in "${!GPU_BUS[@]}"; do
        bus=${GPU_BUS[$i]} uuid=${GPU_UUID[$i]}
        row=$(awk -F'\t' -v b="$bus" '$1 == b' <<<"$gpus")
        id=$(cut -f2 <<<"$row") name=$(cut -f3 <<<"$row")
        if [[ -z $row ]]; then
            other=$(awk -F'\t' -v u="$uuid" '$2 == u {print $1}' <<<"$gpus")
            if [[ -n $other ]]; then
                fail "(a) GPU$i $uuid: nvidia-smi has it at $bus, map-by-device at $other"
            else
                fail "(a) GPU$i $bus ($uuid): map-by-device devices does not list a gpu at that bus id"
                diagnose_bus "$bus"
            fi
        elif [[ $id == - ]]; then
            # The tool's own reason: the refusal of a plan for that GPU names it.
            mbd plan -n 1 "$bus" >/dev/null 2>"$ERR"
            fail "(a) GPU$i $bus: map-by-device lists it ($name) without an identity: $(first_line <"$ERR")"
            diagnose_bus "$bus"
        elif [[ $id == "$uuid" ]]; then
            ok "(a) GPU$i $bus: map-by-device lists $name with $uuid, as nvidia-smi does"
        else
            fail "(a) GPU$i $bus: map-by-device names it $id, nvidia-smi $uuid"
        fi
    done
    while IFS=$'\t' read -r bus id name _; do
        [[ -z $bus ]] && continue
        if ! index_of_bus "$bus" >/dev/null; then
            fail "(a) map-by-device lists a gpu at $bus ($name, $id) that nvidia-smi does not report"
            extra=1
        fi
    done <<<"$gpus"
    ((extra)) || ok "(a) map-by-device lists no gpu that nvidia-smi does not report"
}

# topo -m once, for every (b): AFF[index] or TOPO_PROBLEM.
read_topo() {
    local out rc parsed gpu aff raw
    echo "== nvidia-smi topo -m"
    out=$(limit 60 nvidia-smi topo -m 2>&1)
    rc=$?
    show <<<"$out"
    if ((rc != 0)); then
        TOPO_PROBLEM="nvidia-smi topo -m failed (exit $rc: $(first_line <<<"$out"))"
        return
    fi
    if ! parsed=$(helper topo-affinity <<<"$out" 2>"$ERR"); then
        TOPO_PROBLEM="nvidia-smi topo -m: $(first_line <"$ERR")"
        return
    fi
    while IFS=$'\t' read -r gpu aff raw; do
        [[ $gpu == GPU* ]] || continue
        if [[ $aff == "?" ]]; then AFF[${gpu#GPU}]="?$raw"; else AFF[${gpu#GPU}]=$aff; fi
    done <<<"$parsed"
}

# libcuda once: LIBCUDA, and what CUDA sees with no CUDA_VISIBLE_DEVICES (for the log).
find_cuda() {
    echo "== CUDA driver"
    if ! LIBCUDA=$(helper find-libcuda 2>"$ERR"); then
        CUDA_PROBLEM=$(first_line <"$ERR")
        LIBCUDA=""
        echo "$CUDA_PROBLEM" | show
        return
    fi
    echo "libcuda: $LIBCUDA; without CUDA_VISIBLE_DEVICES it sees:" | show
    (
        unset CUDA_VISIBLE_DEVICES
        limit 120 "$PY" "$HERE/helper.py" cuda "$LIBCUDA" 2>&1 | show
    )
}

# b. One task's CPUs against its GPU's CPU Affinity.
check_binding() {
    local label=$1 bus=$2 cpus=$3 i aff
    if [[ -n $TOPO_PROBLEM ]]; then
        skip "(b) $label: $TOPO_PROBLEM"
        return
    fi
    if ! i=$(index_of_bus "$bus"); then
        skip "(b) $label: nvidia-smi reports no GPU at $bus, so topo -m has no row for it"
        return
    fi
    aff=${AFF[$i]-}
    case $aff in
        "") skip "(b) $label: nvidia-smi topo -m has no row GPU$i" ;;
        N/A) skip "(b) $label: nvidia-smi topo -m gives GPU$i no CPU Affinity (N/A): nothing to compare with" ;;
        "?"*) skip "(b) $label: cannot read GPU$i's CPU Affinity in nvidia-smi topo -m's row: ${aff#\?}" ;;
        *)
            if helper subset "$cpus" "$aff" 2>"$ERR"; then
                ok "(b) $label: CPUs $cpus, inside GPU$i's CPU Affinity $aff"
            else
                fail "(b) $label: CPUs $cpus, not inside GPU$i's CPU Affinity $aff$(first_line <"$ERR" | sed 's/^./ (&)/')"
            fi
            ;;
    esac
}

# c. What the CUDA driver sees under the task's CUDA_VISIBLE_DEVICES.
check_cuda() {
    local label=$1 cvd=$2 out rc count devs
    if [[ -z $LIBCUDA ]]; then
        skip "(c) $label: $CUDA_PROBLEM"
        return
    fi
    if [[ $cvd != GPU-* ]]; then
        fail "(c) $label: the plan's CUDA_VISIBLE_DEVICES is '$cvd', not a GPU UUID"
        return
    fi
    out=$(CUDA_VISIBLE_DEVICES=$cvd limit 120 "$PY" "$HERE/helper.py" cuda "$LIBCUDA" 2>&1)
    rc=$?
    show <<<"$out"
    count=$(awk -F'\t' '$1 == "count" {print $2}' <<<"$out")
    devs=$(awk -F'\t' '$1 == "device" {print $3 " at " $4 " (" $5 ")"}' <<<"$out" | first_line)
    if ((rc == 0)) && [[ $count == 1 ]] && [[ $(awk -F'\t' '$1 == "device" {print $3}' <<<"$out") == "$cvd" ]]; then
        ok "(c) $label: under CUDA_VISIBLE_DEVICES=$cvd the CUDA driver sees one device, $devs"
    elif ((rc != 0)) && [[ -z $count ]]; then
        fail "(c) $label: under CUDA_VISIBLE_DEVICES=$cvd the CUDA driver sees no device: $(grep '^error: ' <<<"$out" | first_line)"
    else
        fail "(c) $label: under CUDA_VISIBLE_DEVICES=$cvd the CUDA driver sees ${count:-?} device(s): ${devs:-none}"
    fi
}

# b and c for every task of `plan -n N gpu`.
check_plan() {
    local n=$1 json tasks rc task bus cpus cvd distinct
    echo "== b, c. map-by-device plan -n $n gpu"
    mbd plan -n "$n" gpu 2>/dev/null | show
    json=$(mbd plan -n "$n" gpu --json 2>"$ERR")
    rc=$?
    if ((rc != 0)); then
        fail "(b) plan -n $n gpu: refused (exit $rc): $(first_line <"$ERR")"
        return
    fi
    if ! tasks=$(helper plan-tasks <<<"$json" 2>"$ERR"); then
        fail "(b) plan -n $n gpu --json: $(first_line <"$ERR")"
        return
    fi
    if ((n > 1)); then
        distinct=$(cut -f2 <<<"$tasks" | sort -u | grep -vc '^-$')
        if ((distinct == n)); then
            ok "(b) plan -n $n gpu: each task has its own GPU"
        else
            fail "(b) plan -n $n gpu: $n tasks on $distinct distinct GPUs: $(tr '\t\n' ' ;' <<<"$tasks")"
        fi
    fi
    while IFS=$'\t' read -r task bus cpus cvd; do
        [[ -z $task ]] && continue
        check_binding "plan -n $n gpu, task $task on $bus" "$bus" "$cpus"
        check_cuda "plan -n $n gpu, task $task on $bus" "$cvd"
    done <<<"$tasks"
}

main() {
    local smi rc parsed i uuid bus
    echo "== tests/device/run.sh on $(hostname 2>/dev/null || cat /proc/sys/kernel/hostname)"
    # The cheap tests first: on a machine without a GPU (CI) this is all that runs.
    if ! command -v nvidia-smi >/dev/null 2>&1; then
        skip "device checks: no nvidia-smi on PATH, so no NVIDIA GPU here; they need one (tests/device/run.sh)"
        finish
    fi
    smi=$(limit 60 nvidia-smi --query-gpu=index,uuid,pci.bus_id --format=csv,noheader 2>&1)
    rc=$?
    if ((rc != 0)) || ! grep -q . <<<"$smi"; then
        skip "device checks: nvidia-smi lists no GPU it can use (exit $rc: $(first_line <<<"$smi"))"
        finish
    fi
    if ((STAGE)); then
        echo "== tests/device/stage.sh"
        "$HERE/stage.sh" 2>&1 | show
        ((PIPESTATUS[0] == 0)) || { fail "tests/device/stage.sh failed"; finish; }
    fi
    PY=$(command -v python3 || true)
    [[ -z $PY && -x /opt/torch/.venv/bin/python3 ]] && PY=/opt/torch/.venv/bin/python3
    if [[ -z $PY ]]; then
        fail "no python3 here (nor /opt/torch/.venv/bin/python3): the checks read JSON and call CUDA with it"
        finish
    fi
    if [[ ! -x $DEV/bin/map-by-device ]]; then
        fail "no staged CLI at $DEV/bin/map-by-device: run tests/device/stage.sh on the build machine and carry .device"
        finish
    fi
    versions
    if ! mbd --version >/dev/null 2>"$ERR"; then
        fail "the staged map-by-device does not run here with $DEV/lib: $(first_line <"$ERR")"
        finish
    fi
    if ! parsed=$(helper smi-gpus <<<"$smi" 2>"$ERR"); then
        fail "nvidia-smi --query-gpu: $(first_line <"$ERR")"
        finish
    fi
    while IFS=$'\t' read -r i uuid bus; do
        GPU_UUID[$i]=$uuid GPU_BUS[$i]=$bus
    done <<<"$parsed"
    check_devices
    read_topo
    find_cuda
    check_plan 1
    ((${#GPU_BUS[@]} > 1)) && check_plan "${#GPU_BUS[@]}"
    finish
}

if [[ -n ${OUT:-} ]] && mkdir -p "$OUT"; then
    main 2>&1 | tee "$OUT/device.log"
    exit "${PIPESTATUS[0]}"
fi
main
