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
