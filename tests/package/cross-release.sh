#!/bin/bash
# A plugin built for another Slurm release, on this node: `map-by-device check` must refuse it
# (not ready, naming both releases and the fix) and Slurm itself must refuse to load it (srun
# fails), so the check says beforehand what Slurm does. A package built for this node's own
# release is the control: check finds nothing wrong with it and srun runs.
#
#   tests/package/cross-release.sh DEB...     (root; the .debs of other releases' builds)
#
# .ci/run runs this in each release's root with the packages every root built. The packages
# are only unpacked (dpkg-deb -x), never installed. Ends with "N passed, N failed".
set -uo pipefail

# shellcheck source=tests/package/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[[ $(id -u) == 0 ]] || die "run as root: this test starts slurmctld and slurmd"
(($#)) || die "usage: tests/package/cross-release.sh DEB..."
e2e_install_packages dpkg-dev || die "cannot install the Slurm packages"
e2e_ensure_rust || die "no cargo"
(cd "$repo" && cargo build --quiet --release -p map-by-device) || die "cannot build the map-by-device tool"
tool=${CARGO_TARGET_DIR:-$repo/target}/release/map-by-device
mine=$("$repo/packaging/slurm-info.sh" series)
work=$(mktemp -d /tmp/mbd-cross.XXXXXX)
chmod 755 "$work"

# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
    [[ -n ${E2E_DIR:-} ]] && e2e_cleanup
    rm -rf "$work"
}
trap cleanup EXIT

e2e_init || die "e2e_init failed"
cluster_start affinity || die "the local Slurm did not start"
for deb in "$@"; do
    version=$(dpkg-deb -f "$deb" Version) || { check "$deb is a package" false; continue; }
    built=${version##*+slurm}
    x=$work/$(basename "$deb" .deb)
    dpkg-deb -x "$deb" "$x" || { check "unpack $deb" false; continue; }
    so=$(find "$x" -name map_by_device.so | head -n 1)
    [[ -n $so ]] || { check "$deb holds map_by_device.so" false; continue; }
    E2E_PLUGIN=$so
    set_plugstack "topology=$E2E_TOPO/e2e-2gpu.xml"
    out=$("$tool" check --plugstack "$E2E_DIR/etc/plugstack.conf" 2>&1)
    status=$?
    err=$(srun -n 1 true 2>&1)
    srun_status=$?
    echo "cross-release: $(basename "$deb") (built for Slurm $built) on Slurm $mine: check exit $status, srun exit $srun_status"
    if [[ $built == "$mine" ]]; then
        check "check: the $built build is this node's release (no release problem)" \
            bash -c '[[ $1 == *"    built for Slurm $2 ("* && $1 != *Incompatible* ]]' _ "$out" "$built"
        check "srun runs with the $built build" test "$srun_status" = 0
    else
        check "check refuses the $built build on Slurm $mine: not ready, both releases named" \
            bash -c '[[ $1 != 0 && $2 == *"was built for Slurm $3"* && $2 == *"but this node runs Slurm $4."* ]]' \
            _ "$status" "$out" "$built" "$mine"
        check "Slurm refuses the $built build too: srun fails with \"Incompatible\"" \
            bash -c '[[ $1 != 0 && $2 == *Incompatible* ]]' _ "$srun_status" "$err"
        echo "     srun: ${err//$'\n'/ | }"
    fi
done
cluster_stop
checks_done
exit "$fail"
