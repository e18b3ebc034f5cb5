#!/bin/bash
# The package tests, run by scripts/test-all.sh after the end-to-end suite (root; Debian 12, 13
# or sid, each building its own release's packages):
#   1. builds the RPM with Debian's rpm and checks its file list   (rpm-files.sh)
#   2. builds the .deb, installs it, runs a mapped srun through the installed plugin on a
#      private single-node Slurm, and purges it                     (deb-install.sh)
# Installs the packaging tools it needs (debhelper, rpm) if they are missing. Ends with the
# checks of both counted together ("N passed, N failed"; a script that stops early counts
# as one failure).
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
need=(debhelper dpkg-dev rpm)
missing=()
for p in "${need[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    [[ $(id -u) == 0 ]] || { echo "package tests: missing ${missing[*]} (run as root)" >&2; exit 1; }
    echo "package tests: installing ${missing[*]}" >&2
    DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
        exit 1
fi
# Building needs the Slurm and library headers too (the e2e suite installed them; make sure).
# shellcheck source=tests/e2e/lib.sh
source "$repo/tests/e2e/lib.sh"
e2e_install_packages || exit 1

status=0
total_p=0 total_f=0
log=$(mktemp /tmp/mbd-pkg.XXXXXX)
trap 'rm -f "$log"' EXIT
for t in rpm-files deb-install; do
    start=$(date +%s)
    echo "=== tests/package/$t.sh"
    rc=0
    "$repo/tests/package/$t.sh" 2>&1 | tee "$log" || rc=1
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$log" | tail -n 1)
    p=${line%% passed*} f=${line#* passed, } f=${f%% failed}
    [[ -n $line ]] || p=0 f=0
    ((rc != 0 && f == 0)) && f=1
    ((rc != 0)) && status=1
    total_p=$((total_p + p)) total_f=$((total_f + f))
    echo "=== tests/package/$t.sh: $p passed, $f failed, $(($(date +%s) - start)) s"
done
echo "$total_p passed, $total_f failed"
exit "$status"
