# shellcheck shell=bash
# The package tests' one preamble, sourced by each of them (run.sh, rpm-files.sh,
# deb-install.sh, cross-release.sh, build-and-load.sh) as
#
#   # shellcheck source=tests/package/lib.sh
#   source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
#
# It sets repo (the checkout's root), sources tests/e2e/lib.sh (e2e_install_packages,
# e2e_ensure_rust, the private Slurm: e2e_init, cluster_start, ...) and gives the checks:
#
#   check DESCRIPTION COMMAND...   runs COMMAND, prints "ok   DESCRIPTION" or "FAIL DESCRIPTION",
#                                  and remembers a failure in $fail
#   checks_done                    the counts in scripts/test-all.sh's convention ("N passed, N failed")
#   die MESSAGE                    "SCRIPT: MESSAGE" on stderr, one more failure, the counts, exit 1
#                                  (SCRIPT: the script's name without .sh)
#   mapped_as_planned TOOL TOPOLOGY  a 2-task mapped srun on the running private Slurm against
#                                  TOOL's plan of TOPOLOGY (both printed); 0 when they agree
# shellcheck disable=SC2034 # (the whole file) repo and fail are read by the scripts that source it

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=tests/e2e/lib.sh
source "$repo/tests/e2e/lib.sh"

fail=0
passed=0
failed=0
check() {
    local what=$1
    shift
    if "$@"; then
        echo "ok   $what"
        passed=$((passed + 1))
    else
        echo "FAIL $what"
        fail=1
        failed=$((failed + 1))
    fi
}
checks_done() {
    echo "$passed passed, $failed failed"
}
die() {
    local name=${0##*/}
    echo "${name%.sh}: $*" >&2
    failed=$((failed + 1))
    checks_done
    exit 1
}

# mapped_as_planned TOOL TOPOLOGY: `srun -n 2 --map-by-device=gpu:verbose` on the private Slurm
# (its plugstack.conf names TOPOLOGY), each task reporting its CPUs and CUDA_VISIBLE_DEVICES
# from inside, against `TOOL plan --topology TOPOLOGY -n 2 gpu`: what the plugin must do.
# Prints both; srun's stderr (the verbose lines) is left in $E2E_DIR/work/srun.err.
mapped_as_planned() {
    local tool=$1 topology=$2 want got
    want=$("$tool" plan --topology "$topology" -n 2 gpu |
        sed -E 's/^task ([0-9]+) on [^:]*: gpu [^;]*; cpus ([^;]*); CUDA_VISIBLE_DEVICES=([^ ]*).*/task \1 cpus \2 cuda \3/')
    got=$(srun -n 2 --map-by-device=gpu:verbose bash -c \
        'echo "task $SLURM_LOCALID cpus $(awk "/^Cpus_allowed_list/ {print \$2}" /proc/self/status) cuda $CUDA_VISIBLE_DEVICES"' \
        2>"$E2E_DIR/work/srun.err" | sort)
    echo "     srun:    ${got//$'\n'/ | }"
    echo "     planned: ${want//$'\n'/ | }"
    [[ -n $got && $got == "$want" ]]
}
