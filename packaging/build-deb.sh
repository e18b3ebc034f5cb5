#!/bin/bash
# Builds the Debian package: packaging/build-deb.sh [OUTDIR]   (default OUTDIR: target/packages)
#
# Copies the working tree (without target/ and .git/) to a temporary directory, puts
# packaging/debian there as ./debian, and runs `dpkg-buildpackage -b -us -uc` in it, so the
# source tree is never written to. Cargo builds into $CARGO_TARGET_DIR (default the
# repository's target/, shared with packaging/build-rpm.sh and the e2e suite's release build,
# so the dependencies are compiled once). The package is for the installed Slurm's release:
# map-by-device_VERSION+slurm<series>_ARCH.deb (see packaging/debian/rules).
#
# Needs: dpkg-dev and debhelper, the Build-Depends of packaging/debian/control
# (libslurm-dev slurm-wlm-basic-plugins libhwloc-dev libudev-dev libclang-dev pkg-config),
# and cargo >= 1.85 on PATH. Prints the path of the .deb on its last line.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
outdir=${1:-$repo/target/packages}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$repo/target}

die() {
    echo "build-deb.sh: $*" >&2
    exit 1
}

command -v dpkg-buildpackage >/dev/null || die "dpkg-buildpackage not found: apt-get install dpkg-dev debhelper"
command -v cargo >/dev/null || die "cargo not found on PATH (install Rust >= 1.85 with rustup)"

# The package version follows Cargo.toml.
crate_version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/Cargo.toml" | head -n 1)
deb_version=$(dpkg-parsechangelog -l "$repo/packaging/debian/changelog" -S Version)
[[ ${deb_version%-*} == "$crate_version" ]] ||
    die "packaging/debian/changelog says $deb_version but Cargo.toml says $crate_version: add a changelog entry (dch -v $crate_version-1)"

work=$(mktemp -d /tmp/mbd-deb.XXXXXX)
trap 'rm -rf "$work"' EXIT
src=$work/map-by-device-$crate_version
mkdir -p "$src" "$outdir"
tar -C "$repo" --exclude=./target --exclude=./.git --exclude='./debian' -cf - . | tar -C "$src" -xf -
cp -a "$repo/packaging/debian" "$src/debian"

start=$(date +%s)
(cd "$src" && dpkg-buildpackage -b -us -uc) >"$work/build.log" 2>&1 || {
    tail -n 60 "$work/build.log" >&2
    die "dpkg-buildpackage failed (log above)"
}
deb=$(ls "$work"/map-by-device_*.deb)
cp "$deb" "$work"/*.buildinfo "$work"/*.changes "$outdir"/ 2>/dev/null || cp "$deb" "$outdir"/
echo "build-deb.sh: built $(basename "$deb") in $(($(date +%s) - start)) s" >&2
echo "$outdir/$(basename "$deb")"
