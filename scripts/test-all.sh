#!/usr/bin/env bash
# README command 2: every test.
#
#   sudo scripts/test-all.sh              # every suite
#   sudo scripts/test-all.sh e2e unit     # only these suites (names as in SUITES below)
#   sudo TEST_ALL_SKIP="fuzz bench" scripts/test-all.sh   # all but these (each counted
#                                         # as skipped, with a line that says so)
#   sudo scripts/test-all.sh --prepare    # only install and build (no Slurm started): CI
#                                         # runs this before it takes the machine's lock
#   sudo scripts/test-all.sh --install    # only install (Debian packages, Rust): CI sets up
#                                         # the next roots this way while others run
#
# On Debian 12 (Slurm 22.05), 13 (24.11) or sid (26.05), as root: installs what is missing
# (Debian packages, Rust), then runs the suites listed in SUITES one after the other, all of
# them even when one fails, and exits 1 if any failed. CI (.ci/run) runs this script on the
# host and inside a fresh debootstrap root of each release, so a suite added to SUITES runs
# on every release without touching CI.
#
# Convention for a suite (how this script and .ci/run count it):
#   - its output ends with a line "N passed, N failed" (the last such line counts), or, for
#     cargo, has cargo's "test result: ... N passed; N failed; N ignored ..." lines (summed);
#   - a line starting with "skipped: " says that something could not run here and why (it is
#     counted, never silent); a line starting with "note: " is shown in the summary;
#   - a non-zero exit status without a failure counted is one failure.
# After each suite this script prints "suite NAME: N passed, N failed, N skipped (T s)", and
# at the end one line per suite again, a "release: ..." line (Debian, Slurm, hwloc) and the
# closing "N passed, N failed" of all suites together.
#
# Real Slurm runs (e2e, packages) start daemons on this machine: on a shared machine hold
# the machine-wide lock around the whole script (flock /tmp/mbd-slurm.lock scripts/test-all.sh).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=tests/e2e/lib.sh
source "$ROOT/tests/e2e/lib.sh"
cd "$ROOT" || exit 1

# NAME|COMMAND (run with bash -c from the repository root). Add new suites here.
# clippy: the lints Cargo.toml sets to warn that must never reach non-test code (an unwrap or
# expect on outside data, an unsafe block without its SAFETY note, a function over the 80
# lines of clippy.toml) fail the suite; tests allow unwrap/expect themselves (#![allow] at
# their top, cfg_attr(test) in the crates).
SUITES=(
    "fmt|cargo fmt --all --check && echo '1 passed, 0 failed'"
    "clippy|cargo clippy --workspace --all-targets --quiet -- -D clippy::undocumented_unsafe_blocks -D clippy::unwrap_used -D clippy::expect_used -D clippy::too_many_lines && echo '1 passed, 0 failed'"
    "unit|cargo test --workspace --no-fail-fast"
    "fuzz|fuzz/run.sh"
    "fixtures|python3 topologies/gen/generate.py --check"
    "shellcheck|check_shell"
    # The engine against NVIDIA's tools and CUDA on a real GPU: where there is none (CI), one
    # "skipped: " line at once; where there is one, it stages the release CLI first.
    "device|tests/device/run.sh --stage"
    "e2e|tests/e2e/run.sh"
    "hardening|tests/e2e/hardening.sh"
    "containers|tests/e2e/containers.sh"
    "multinode|tests/e2e/multinode/run.sh"
    "browser|tests/browser/run.sh"
    # The planner against PRRTE 5's own --map-by device= (Debian sid only; elsewhere one
    # "skipped: " line at once). Starts no Slurm.
    "prrte|tests/prrte/run.sh"
    "packages|tests/package/run.sh"
    "demo|scripts/demo.sh >/tmp/mbd-demo.out 2>&1; rc=\$?; cat /tmp/mbd-demo.out; check_demo /tmp/mbd-demo.out \$rc"
    "bench|tests/e2e/bench.sh"
)
# Packages the suites need beyond tests/e2e/lib.sh's E2E_PACKAGES (the build and the local
# Slurm): the fixture check runs hwloc's own tools; the package suite builds a .deb and an RPM;
# the e2e suite's reader cases run UCX and numactl in tasks (lib.sh's E2E_READER_PACKAGES), its
# launcher cases Open MPI and MPICH (E2E_LAUNCHER_PACKAGES); the check_shell suite below lints
# every shell script with shellcheck; the containers suite runs Charliecloud and (sid)
# Apptainer (lib.sh's E2E_CONTAINER_PACKAGES).
TEST_PACKAGES=(python3 hwloc-nox dpkg-dev debhelper rpm shellcheck "${E2E_READER_PACKAGES[@]}" "${E2E_LAUNCHER_PACKAGES[@]}" "${E2E_CONTAINER_PACKAGES[@]}")
# The prrte suite's PRRTE (tests/prrte/run.sh): 5.0 (libprrte-bin 5.0.0~rc1, its docs in
# prrte-common) is packaged in Debian sid only; Debian 12 and 13 have no PRRTE with
# --map-by device=, and the suite says it skipped there.
if grep -q '/sid' /etc/debian_version 2>/dev/null; then
    TEST_PACKAGES+=(libprrte-bin prrte-common)
fi

# check_demo OUTPUT RC: README command 1 did what the README shows (each task on its GPU's
# CPU with its UUID, the network mapping, the refusals of a second task on one GPU and of a
# GPU step that asked Slurm for none).
check_demo() {
    local out=$1 rc=$2 want ok=0 bad=0
    for want in "task 0: CPUs 0, CUDA_VISIBLE_DEVICES=GPU-2fa8685e-6ae2-c4f4-39df-551ea6a96245" \
        "task 1: CPUs 1, CUDA_VISIBLE_DEVICES=GPU-1bc1cea7-7fd4-5fb3-299e-bdaf9d7efe54" \
        "task 1: CPUs 1, CUDA_VISIBLE_DEVICES=(unset), NCCL_IB_HCA==mlx5_0,mlx5_1" \
        "2 tasks with ndev=1 need 2 gpu devices" \
        "the step has no GPUs on"; do
        if grep -qF -- "$want" "$out"; then ok=$((ok + 1)); else echo "demo output lacks: $want"; bad=$((bad + 1)); fi
    done
    ((rc == 0)) || { echo "scripts/demo.sh exited $rc"; bad=$((bad + 1)); }
    rm -f "$out"
    echo "$ok passed, $bad failed"
}
export -f check_demo

# check_shell: every shell script of the repository passes shellcheck at severity warning
# (sources followed: -x), one count per file.
check_shell() {
    local files f ok=0 bad=0
    mapfile -t files < <(find . \( -path ./target -o -path ./fuzz/target -o -name '.[!c]*' \) -prune \
        -o -type f \( -name '*.sh' -o -path ./.ci/run \) -print | sort)
    for f in "${files[@]}"; do
        if shellcheck -x -S warning "$f"; then ok=$((ok + 1)); else bad=$((bad + 1)); fi
    done
    ((ok + bad > 0)) || { echo "no shell script found"; bad=1; }
    echo "$ok passed, $bad failed"
}
export -f check_shell

if [[ $(id -u) != 0 ]]; then
    echo "scripts/test-all.sh installs packages and starts slurmctld/slurmd: run it as root (sudo)" >&2
    echo "0 passed, 1 failed"
    exit 1
fi

# count_suite LOG RC: prints "PASSED FAILED SKIPPED" for a suite's output (cargo's lines here,
# the "N passed, N failed" line by lib.sh's e2e_counts, the one parser of it).
count_suite() {
    local log=$1 rc=$2 passed=0 failed=0 skipped
    if grep -q '^test result: ' "$log"; then
        read -r passed failed < <(sed -n 's/^test result: [A-Za-z]*\. \([0-9]*\) passed; \([0-9]*\) failed.*/\1 \2/p' "$log" |
            awk '{p += $1; f += $2} END {print p + 0, f + 0}')
        # A test binary that did not build or crashed has no result line.
        if grep -qE '^error(\[E[0-9]+\])?: ' "$log" && ((rc != 0 && failed == 0)); then failed=1; fi
    else
        read -r passed failed < <(e2e_counts "$log" "$rc")
    fi
    ((rc != 0 && failed == 0)) && failed=1
    # (libtest may have printed "test NAME ... " in front of a test's own line)
    skipped=$(grep -cE '^(test .* \.\.\. )?skipped: ' "$log")
    echo "$passed $failed $skipped"
}

# The release this runs on, for the summary.
release_line() {
    local debian slurm hwloc p v
    debian=$(. /etc/os-release 2>/dev/null && echo "${PRETTY_NAME:-unknown}")
    slurm="not installed"
    # Debian's slurmd, or SchedMD's own package of it (slurm-smd-slurmd).
    for p in slurmd slurm-smd-slurmd; do
        v=$(dpkg-query -W -f='${Status}|${Version}' "$p" 2>/dev/null) || continue
        [[ $v == "install ok installed|"* ]] || continue
        slurm=${v#*|}
        [[ $p == slurm-smd-* ]] && slurm+=" (SchedMD's slurm-smd)"
        break
    done
    hwloc=$(pkg-config --modversion hwloc 2>/dev/null || echo "unknown")
    echo "release: $debian, Slurm $slurm, hwloc $hwloc, $(rustc --version 2>/dev/null || echo 'no rustc')"
}

# --prepare: what the suites build, built ahead (the debug test binaries and the CLI, the
# release plugin the e2e, package and bench suites load), so that the part that needs the
# machine's lock is short. Only a speed-up: every suite builds what it needs anyway.
# The test binaries are left out when TEST_ALL_SKIP skips both suites that build them.
prepare() {
    local skip=" ${TEST_ALL_SKIP:-} "
    if [[ $skip == *" unit "* && $skip == *" clippy "* ]]; then
        echo "== prepare: cargo build --release -p map-by-device-spank -p map-by-device-discover -p map-by-device (unit and clippy skipped)"
    else
        echo "== prepare: cargo test --workspace --no-run; cargo build --release -p map-by-device-spank -p map-by-device-discover -p map-by-device"
        cargo test --workspace --no-run --quiet || return 1
    fi
    cargo build --release --locked --quiet -p map-by-device-spank -p map-by-device-discover -p map-by-device
}

main() {
    local t0=$SECONDS wanted=("$@") entry name cmd log rc start counts p f s
    local total_p=0 total_f=0 total_s=0 summary=() notes=()
    e2e_install_packages "${TEST_PACKAGES[@]}" || { echo "0 passed, 1 failed"; exit 1; }
    e2e_ensure_rust || { echo "0 passed, 1 failed"; exit 1; }
    release_line
    [[ ${1:-} == --install ]] && return
    if [[ ${1:-} == --prepare ]]; then
        prepare && echo "prepared in $((SECONDS - t0)) s"
        return
    fi
    log=$(mktemp /tmp/mbd-test-all.XXXXXX)
    TEST_ALL_LOG=$log
    trap 'rm -f "$TEST_ALL_LOG"' EXIT
    for entry in "${SUITES[@]}"; do
        name=${entry%%|*} cmd=${entry#*|}
        if ((${#wanted[@]})) && ! printf '%s\n' "${wanted[@]}" | grep -qx "$name"; then
            continue
        fi
        if [[ " ${TEST_ALL_SKIP:-} " == *" $name "* ]]; then
            summary+=("suite $name: 0 passed, 0 failed, 1 skipped (TEST_ALL_SKIP)")
            notes+=("$name: skipped: suite $name (TEST_ALL_SKIP=\"$TEST_ALL_SKIP\")")
            echo "skipped: suite $name (TEST_ALL_SKIP)"
            total_s=$((total_s + 1))
            continue
        fi
        echo
        echo "== suite $name: $cmd"
        start=$SECONDS
        bash -c "$cmd" 2>&1 | tee "$log"
        rc=${PIPESTATUS[0]}
        counts=$(count_suite "$log" "$rc")
        read -r p f s <<<"$counts"
        summary+=("suite $name: $p passed, $f failed, $s skipped ($((SECONDS - start)) s)")
        echo "${summary[-1]}"
        mapfile -t -O "${#notes[@]}" notes < <(grep -E '^(test .* \.\.\. )?(skipped|note): ' "$log" |
            sed -E "s/^test .* \.\.\. //; s/^/$name: /")
        total_p=$((total_p + p)) total_f=$((total_f + f)) total_s=$((total_s + s))
    done
    echo
    echo "== summary ($((SECONDS - t0)) s)"
    printf '%s\n' "${notes[@]}" | sort -u | grep . || true
    release_line
    printf '%s\n' "${summary[@]}"
    echo "$total_p passed, $total_f failed"
    ((total_f == 0))
}

main "$@"
