# shellcheck shell=bash
# Sourced by the package tests: `check DESCRIPTION COMMAND...` runs COMMAND, prints
# "ok   DESCRIPTION" or "FAIL DESCRIPTION", and remembers a failure in $fail; `checks_done`
# prints the counts in scripts/test-all.sh's convention ("N passed, N failed").
# shellcheck disable=SC2034 # read by the scripts that source this file
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
