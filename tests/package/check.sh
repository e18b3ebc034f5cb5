# Sourced by the package tests: `check DESCRIPTION COMMAND...` runs COMMAND, prints
# "ok   DESCRIPTION" or "FAIL DESCRIPTION", and remembers a failure in $fail.
fail=0
check() {
    local what=$1
    shift
    if "$@"; then
        echo "ok   $what"
    else
        echo "FAIL $what"
        fail=1
    fi
}
