#!/bin/bash
# The package tests, run by scripts/test-all.sh after the end-to-end suite (root; Debian 12, 13
# or sid, each building its own release's packages):
#   1. builds the RPM with Debian's rpm and checks its file list   (rpm-files.sh)
#   2. builds the .deb, installs it, runs a mapped srun through the installed plugin on a
#      private single-node Slurm, upgrades it to a rebuilt package (slurmd restarted, a
#      mapped srun), removes and purges it                          (deb-install.sh)
# Installs the packaging tools it needs (debhelper, rpm) if they are missing. Ends with the
# checks of both counted together ("N passed, N failed"; a script that stops early counts
# as one failure).
set -uo pipefail

# shellcheck source=tests/package/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# The packaging tools, and the Slurm and library headers the builds need (the e2e suite
# installed those; make sure).
e2e_install_packages debhelper dpkg-dev rpm || exit 1

status=0
total_p=0 total_f=0
log=$(mktemp /tmp/mbd-pkg.XXXXXX)
trap 'rm -f "$log"' EXIT
for t in rpm-files deb-install; do
    start=$(date +%s)
    echo "=== tests/package/$t.sh"
    rc=0
    "$repo/tests/package/$t.sh" 2>&1 | tee "$log" || rc=1
    read -r p f < <(e2e_counts "$log" "$rc")
    ((rc != 0)) && status=1
    total_p=$((total_p + p)) total_f=$((total_f + f))
    echo "=== tests/package/$t.sh: $p passed, $f failed, $(($(date +%s) - start)) s"
done
echo "$total_p passed, $total_f failed"
exit "$status"
