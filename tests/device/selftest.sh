#!/usr/bin/env bash
# tests/device/run.sh's every branch without a GPU: run.sh runs against a fake nvidia-smi
# (its --query-gpu lines and `topo -m` tables as drivers print them: 8-digit domains,
# uppercase hex, ANSI underline, tabs or spaces, N/A), a fake libcuda.so.1
# (fake_libcuda.c: the driver calls helper.py makes, filtered by CUDA_VISIBLE_DEVICES as
# the real driver does) and the staged CLI reading fixture topologies (a wrapper adds
# --topology, and --proc-root for the driver-file identities). Each case checks run.sh's
# verdict lines and its closing count: a GPU-less machine skips, a matching machine passes,
# a wrong UUID, bus id, binding or identity fails.
#
#   tests/device/selftest.sh     # after tests/device/stage.sh (run here if .device is
#                                # missing); a C compiler for the fake libcuda (else the
#                                # cases that need it are skipped); ends "N passed, N failed"
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE=$ROOT/tests/device
TOPO=$ROOT/topologies
passed=0 failed=0
T=$(mktemp -d /tmp/mbd-device-selftest.XXXXXX)
# MBD_SELFTEST_KEEP=1 keeps the cases' outputs ($T/NAME.out) to read.
[[ -n ${MBD_SELFTEST_KEEP:-} ]] || trap 'rm -rf "$T"' EXIT

ok() { echo "ok $*"; passed=$((passed + 1)); }
fail() { echo "FAIL $*"; failed=$((failed + 1)); }
skip() { echo "skipped: $*"; }

if [[ ! -x $ROOT/.device/bin/map-by-device ]]; then
    "$HERE/stage.sh" >"$T/stage.out" 2>&1 || { cat "$T/stage.out"; fail "tests/device/stage.sh"; }
fi

# The staged tree, its CLI wrapped to read a fixture instead of this machine.
mkdir -p "$T/dev/bin" "$T/smi-bin" "$T/cuda"
ln -s "$ROOT/.device/lib" "$T/dev/lib"
cat >"$T/dev/bin/map-by-device" <<EOF
#!/usr/bin/env bash
case \${1:-} in
devices | plan)
    cmd=\$1
    shift
    exec "$ROOT/.device/bin/map-by-device" "\$cmd" --topology "\$FAKE_TOPOLOGY" \${FAKE_PROC_ROOT:+--proc-root "\$FAKE_PROC_ROOT"} "\$@"
    ;;
esac
exec "$ROOT/.device/bin/map-by-device" "\$@"
EOF
# nvidia-smi answering from the case's files: query, versions, topo (and NAME.rc).
cat >"$T/smi-bin/nvidia-smi" <<'EOF'
#!/usr/bin/env bash
case "$*" in
*--query-gpu=index,uuid,pci.bus_id\ *) f=query ;;
*--query-gpu=*) f=versions ;;
"topo -m") f=topo ;;
*) echo "fake nvidia-smi: unexpected arguments: $*" >&2; exit 2 ;;
esac
cat "$FAKE_SMI/$f" 2>/dev/null
exit "$(cat "$FAKE_SMI/$f.rc" 2>/dev/null || echo 0)"
EOF
chmod +x "$T/dev/bin/map-by-device" "$T/smi-bin/nvidia-smi"
CC=$(command -v cc || command -v gcc || true)
if [[ -n $CC ]] && "$CC" -shared -fPIC -O1 -o "$T/cuda/libcuda.so.1" "$HERE/fake_libcuda.c"; then
    FAKE_CUDA=1
else
    FAKE_CUDA=0
    skip "the cases with a CUDA driver: no C compiler for tests/device/fake_libcuda.c"
fi

# The fixtures' GPUs (topologies/README.md) as nvidia-smi prints them.
H200=("GPU-0e18d434-10b9-d275-6665-5047cb2555fa" "GPU-6bb7ba9e-c922-3068-f03e-25190bb0ef6f"
    "GPU-96c8418c-4e47-1a38-d5cc-bf6f1363e911" "GPU-be387809-7d0f-8622-8b7d-e8b861781bdc")
E2E=("GPU-2fa8685e-6ae2-c4f4-39df-551ea6a96245" "GPU-1bc1cea7-7fd4-5fb3-299e-bdaf9d7efe54")
E=$'\e'

# nvidia-smi's answers for a case: fake NAME QUERY TOPO [QUERY_RC [TOPO_RC]]
fake() {
    mkdir -p "$T/s/$1"
    printf '%s\n' "$2" >"$T/s/$1/query"
    printf '%s\n' "$3" >"$T/s/$1/topo"
    echo "${4:-0}" >"$T/s/$1/query.rc"
    echo "${5:-0}" >"$T/s/$1/topo.rc"
    echo "0, Fake GPU, 550.54.15" >"$T/s/$1/versions"
}

# run_case NAME TOPOLOGY [VAR=VALUE...]: run.sh on the case, its output in $T/NAME.out.
run_case() {
    local name=$1 topology=$2 cuda=()
    shift 2
    # The CUDA driver knows the two GPUs of e2e-2gpu*.xml unless the case says otherwise.
    ((FAKE_CUDA)) && cuda=(LD_LIBRARY_PATH="$T/cuda" FAKE_CUDA_DEVICES="${E2E[0]}@0000:17:00.0,${E2E[1]}@0000:65:00.0")
    CASE=$name
    env -u OUT -u CUDA_VISIBLE_DEVICES PATH="$T/smi-bin:$PATH" FAKE_SMI="$T/s/$name" FAKE_TOPOLOGY="$TOPO/$topology" \
        MBD_DEVICE_DIR="$T/dev" "${cuda[@]}" "$@" bash "$HERE/run.sh" >"$T/$name.out" 2>&1
    RC=$?
}
# has TEXT: run.sh's output for the case has a line that starts with TEXT.
has() {
    if grep -qF -- "$1" <(grep -F -- "$1" "$T/$CASE.out" | cut -c1-${#1}); then
        ok "$CASE: $1"
    else
        fail "$CASE: no line starts with: $1"
        sed 's/^/    | /' "$T/$CASE.out"
    fi
}
# ends "N passed, N failed" RC: the closing line and the exit status.
ends() {
    local last
    last=$(tail -n 1 "$T/$CASE.out")
    if [[ $last == "$1" && $RC == "$2" ]]; then
        ok "$CASE: ends '$1', exit $2"
    else
        fail "$CASE: ends '$last', exit $RC (want '$1', exit $2)"
        sed 's/^/    | /' "$T/$CASE.out"
    fi
}

# --- helper.py alone: bus ids and topo -m tables the cases below do not show.
out=$(printf '0, %s, 00000000:E6:00.0\n1, %s, 0001:3B:00.0\n2, %s, 10000:01:1f.7\n' "${H200[@]:0:3}" |
    python3 "$HERE/helper.py" smi-gpus | cut -f3 | tr '\n' ' ')
[[ $out == "0000:e6:00.0 0001:3b:00.0 10000:01:1f.7 " ]] && ok "helper smi-gpus: bus ids as sysfs writes them" ||
    fail "helper smi-gpus: bus ids $out"
out=$(printf '\tGPU0\tCPU Affinity\tNUMA Affinity\nGPU0\t X \t0-7,16-23\t0\n' | python3 "$HERE/helper.py" topo-affinity)
[[ $out == $'GPU0\t0-7,16-23' ]] && ok "helper topo-affinity: tab-aligned table" || fail "helper topo-affinity (tabs): $out"
out=$(printf 'nonsense\n' | python3 "$HERE/helper.py" topo-affinity 2>&1)
[[ $out == "error: no 'CPU Affinity' column in nvidia-smi topo -m" ]] && ok "helper topo-affinity: no column" ||
    fail "helper topo-affinity (no column): $out"
python3 "$HERE/helper.py" subset 0-3,8 0-8 && ! python3 "$HERE/helper.py" subset 0-3,9 0-8 &&
    ok "helper subset" || fail "helper subset"

# --- no GPU: the skip CI prints, then nvidia-smi without a GPU or without its driver.
if ! PATH=/usr/bin:/bin command -v nvidia-smi >/dev/null; then
    CASE=no-nvidia-smi
    env -u OUT PATH=/usr/bin:/bin bash "$HERE/run.sh" >"$T/$CASE.out" 2>&1
    RC=$?
    has "skipped: device checks: no nvidia-smi on PATH"
    ends "0 passed, 0 failed" 0
else
    skip "case no-nvidia-smi: this machine has /usr/bin/nvidia-smi"
fi
fake no-gpu "No devices were found" "" 6
run_case no-gpu e2e-2gpu.xml
has "skipped: device checks: nvidia-smi lists no GPU it can use (exit 6: No devices were found)"
ends "0 passed, 0 failed" 0
fake no-driver "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver." "" 9
run_case no-driver e2e-2gpu.xml
has "skipped: device checks: nvidia-smi lists no GPU it can use (exit 9: NVIDIA-SMI has failed"
ends "0 passed, 0 failed" 0

# --- the real thing, matching: four H200s (turin-h200.xml), topo -m as driver 550 prints it.
fake h200 "0, ${H200[0]}, 00000000:06:00.0
1, ${H200[1]}, 00000000:16:00.0
2, ${H200[2]}, 00000000:96:00.0
3, ${H200[3]}, 00000000:E6:00.0" "	${E}[4mGPU0	GPU1	GPU2	GPU3	NIC0	CPU Affinity	NUMA Affinity	GPU NUMA ID${E}[0m
GPU0	 X 	NV18	NV18	NV18	SYS	16-31,144-159	1		N/A
GPU1	NV18	 X 	NV18	NV18	SYS	32-47,160-175	2		N/A
GPU2	NV18	NV18	 X 	NV18	SYS	96-111,224-239	6		N/A
GPU3	NV18	NV18	NV18	 X 	SYS	112-127,240-255	7		N/A
NIC0	SYS	SYS	SYS	SYS	 X 				

Legend:

  X    = Self
  NV#  = Connection traversing a bonded set of # NVLinks

NIC Legend:

  NIC0: mlx5_0"
if ((FAKE_CUDA)); then
    devices=$(printf '%s@00000000:%s:00.0,' "${H200[0]}" 06 "${H200[1]}" 16 "${H200[2]}" 96 "${H200[3]}" E6)
    run_case h200 turin-h200.xml FAKE_CUDA_DEVICES="$devices" OUT="$T/h200-out"
    has "ok (a) GPU3 0000:e6:00.0: map-by-device lists cuda3 with ${H200[3]}, as nvidia-smi does"
    has "ok (a) map-by-device lists no gpu that nvidia-smi does not report"
    has "ok (b) plan -n 1 gpu, task 0 on 0000:06:00.0: CPUs 16-31,144-159, inside GPU0's CPU Affinity 16-31,144-159"
    has "ok (c) plan -n 1 gpu, task 0 on 0000:06:00.0: under CUDA_VISIBLE_DEVICES=${H200[0]} the CUDA driver sees one device, ${H200[0]} at 0000:06:00.0"
    has "ok (b) plan -n 4 gpu: each task has its own GPU"
    has "ok (b) plan -n 4 gpu, task 3 on 0000:e6:00.0: CPUs 112-127,240-255, inside GPU3's CPU Affinity"
    has "ok (c) plan -n 4 gpu, task 2 on 0000:96:00.0: under CUDA_VISIBLE_DEVICES=${H200[2]} the CUDA driver sees one device"
    ends "16 passed, 0 failed" 0
    if [[ $(tail -n 1 "$T/h200-out/device.log" 2>/dev/null) == "16 passed, 0 failed" ]] &&
        cmp -s "$T/h200-out/device.log" "$T/h200.out"; then
        ok "h200: \$OUT/device.log holds the whole output"
    else
        fail "h200: \$OUT/device.log missing or not the whole output"
    fi
fi

# --- no libcuda (none on this machine's dlopen path nor the driver mounts): c skipped only.
if ! python3 "$HERE/helper.py" find-libcuda >/dev/null 2>&1; then
    CASE=no-libcuda
    cp -r "$T/s/h200" "$T/s/$CASE"
    env -u OUT -u LD_LIBRARY_PATH PATH="$T/smi-bin:$PATH" FAKE_SMI="$T/s/$CASE" FAKE_TOPOLOGY="$TOPO/turin-h200.xml" \
        MBD_DEVICE_DIR="$T/dev" bash "$HERE/run.sh" >"$T/$CASE.out" 2>&1
    RC=$?
    has "skipped: (c) plan -n 1 gpu, task 0 on 0000:06:00.0: error: no loadable libcuda.so.1"
    has "ok (b) plan -n 4 gpu, task 1 on 0000:16:00.0: CPUs 32-47,160-175, inside GPU1's CPU Affinity"
    ends "11 passed, 0 failed" 0
else
    skip "case no-libcuda: this machine has a libcuda.so.1"
fi

# --- a UUID that differs from nvidia-smi's: (a) fails, and CUDA finds no device under the
# plan's CUDA_VISIBLE_DEVICES. topo -m with spaces instead of tabs.
BAD=GPU-1bc1cea7-7fd4-5fb3-299e-bdaf9d7efe55
fake mismatch "0, ${E2E[0]}, 00000000:17:00.0
1, $BAD, 00000000:65:00.0" "        GPU0    GPU1    CPU Affinity    NUMA Affinity
GPU0     X      PHB     0       0
GPU1    PHB      X      1       1"
if ((FAKE_CUDA)); then
    run_case mismatch e2e-2gpu.xml FAKE_CUDA_DEVICES="${E2E[0]}@00000000:17:00.0,$BAD@00000000:65:00.0"
    has "ok (a) GPU0 0000:17:00.0: map-by-device lists cuda0 with ${E2E[0]}"
    has "FAIL (a) GPU1 0000:65:00.0: map-by-device names it ${E2E[1]}, nvidia-smi $BAD"
    has "ok (b) plan -n 2 gpu, task 1 on 0000:65:00.0: CPUs 1, inside GPU1's CPU Affinity 1"
    has "FAIL (c) plan -n 2 gpu, task 1 on 0000:65:00.0: under CUDA_VISIBLE_DEVICES=${E2E[1]} the CUDA driver sees no device: error: cuInit: CUDA_ERROR_NO_DEVICE (100)"
    ends "8 passed, 2 failed" 1
fi

# --- identities from the driver's files (Debian's hwloc: render nodes only), CPU Affinity N/A.
fake driver-files "0, ${E2E[0]}, 00000000:17:00.0
1, ${E2E[1]}, 00000000:65:00.0" "	GPU0	GPU1	CPU Affinity	NUMA Affinity	GPU NUMA ID
GPU0	 X 	SYS	N/A	N/A		N/A
GPU1	SYS	 X 	N/A	N/A		N/A"
if ((FAKE_CUDA)); then
    run_case driver-files e2e-2gpu-drm.xml FAKE_PROC_ROOT="$TOPO/drivers/nvidia/proc"
    has "ok (a) GPU1 0000:65:00.0: map-by-device lists renderD129 with ${E2E[1]}"
    has "skipped: (b) plan -n 1 gpu, task 0 on 0000:17:00.0: nvidia-smi topo -m gives GPU0 no CPU Affinity (N/A)"
    has "ok (c) plan -n 2 gpu, task 1 on 0000:65:00.0: under CUDA_VISIBLE_DEVICES=${E2E[1]} the CUDA driver sees one device"
    ends "7 passed, 0 failed" 0
fi

# --- the same GPUs without the driver files: listed without identity, the tool's reason.
cp -r "$T/s/driver-files" "$T/s/no-identity"
run_case no-identity e2e-2gpu-drm.xml
has "FAIL (a) GPU0 0000:17:00.0: map-by-device lists it (renderD128) without an identity: map-by-device: error: GPU renderD128 at 0000:17:00.0"
has "    /proc/driver/nvidia/gpus/0000:17:00.0/information: "
has "FAIL (b) plan -n 1 gpu: refused (exit 2): map-by-device: error: GPU renderD128"
ends "1 passed, 4 failed" 1

# --- a GPU hwloc does not show at all (no render node, no vendor backend).
fake not-listed "0, ${E2E[0]}, 00000000:17:00.0" "	GPU0	CPU Affinity
GPU0	 X 	0-1"
run_case not-listed e2e-nogpu.xml
has "FAIL (a) GPU0 0000:17:00.0 (${E2E[0]}): map-by-device devices does not list a gpu at that bus id"
has "FAIL (b) plan -n 1 gpu: refused (exit 2): map-by-device: error: node e2e-nogpu has no gpu devices"
ends "1 passed, 2 failed" 1

# --- nvidia-smi reports fewer GPUs, at another bus id: extra GPUs fail, the UUID is found.
fake moved "0, ${E2E[0]}, 00000000:18:00.0" "	GPU0	CPU Affinity
GPU0	 X 	0-1"
run_case moved e2e-2gpu.xml
has "FAIL (a) GPU0 ${E2E[0]}: nvidia-smi has it at 0000:18:00.0, map-by-device at 0000:17:00.0"
has "FAIL (a) map-by-device lists a gpu at 0000:65:00.0 (cuda1, ${E2E[1]}) that nvidia-smi does not report"
has "skipped: (b) plan -n 1 gpu, task 0 on 0000:17:00.0: nvidia-smi reports no GPU at 0000:17:00.0"
# (the totals count the CUDA driver's checks: with the fake libcuda only)
((FAKE_CUDA)) && ends "1 passed, 3 failed" 1

# --- binding outside the affinity, an unreadable cell, and topo -m failing or columnless.
fake outside "0, ${E2E[0]}, 00000000:17:00.0
1, ${E2E[1]}, 00000000:65:00.0" "	GPU0	GPU1	CPU Affinity	NUMA Affinity
GPU0	 X 	SYS	8-15	0
GPU1	SYS	 X 	weird	1"
run_case outside e2e-2gpu.xml
has "FAIL (b) plan -n 1 gpu, task 0 on 0000:17:00.0: CPUs 0, not inside GPU0's CPU Affinity 8-15"
has "skipped: (b) plan -n 2 gpu, task 1 on 0000:65:00.0: cannot read GPU1's CPU Affinity in nvidia-smi topo -m's row: GPU1 SYS X weird 1"
((FAKE_CUDA)) && ends "7 passed, 2 failed" 1
fake topo-fails "0, ${E2E[0]}, 00000000:17:00.0" "topo: operation not supported" 0 3
run_case topo-fails e2e-2gpu.xml
has "skipped: (b) plan -n 1 gpu, task 0 on 0000:17:00.0: nvidia-smi topo -m failed (exit 3: topo: operation not supported)"
((FAKE_CUDA)) && ends "2 passed, 1 failed" 1
fake no-column "0, ${E2E[0]}, 00000000:17:00.0" "	GPU0
GPU0	 X "
run_case no-column e2e-2gpu.xml
has "skipped: (b) plan -n 1 gpu, task 0 on 0000:17:00.0: nvidia-smi topo -m: error: no 'CPU Affinity' column"
((FAKE_CUDA)) && ends "2 passed, 1 failed" 1

# --- a GPU present and nothing staged: a failure that says what to do.
cp -r "$T/s/moved" "$T/s/not-staged"
CASE=not-staged
env -u OUT PATH="$T/smi-bin:$PATH" FAKE_SMI="$T/s/$CASE" MBD_DEVICE_DIR="$T/nothing" bash "$HERE/run.sh" >"$T/$CASE.out" 2>&1
RC=$?
has "FAIL no staged CLI at $T/nothing/bin/map-by-device: run tests/device/stage.sh"
ends "0 passed, 1 failed" 1

echo "$passed passed, $failed failed"
((failed == 0))
