#!/bin/bash
# Builds the binary RPM: packaging/build-rpm.sh [OUTDIR]   (default OUTDIR: target/packages)
#
# Makes map-by-device-VERSION.tar.gz from the working tree (without target/ and .git/) and
# runs `rpmbuild -bb packaging/rpm/map-by-device.spec` in a temporary _topdir. On a RHEL-family
# build host this is the real build. On Debian (rpm package), it builds the same RPM against
# Debian's Slurm headers and libraries, with --nodeps since Debian's rpm database is empty:
# good for checking the spec and its file list (tests/package/rpm-files.sh), not for
# installing on RHEL. Cargo builds into $CARGO_TARGET_DIR (default the repository's target/,
# shared with packaging/build-deb.sh and the e2e suite's release build). Prints the path of
# the .rpm on its last line.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
outdir=${1:-$repo/target/packages}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$repo/target}

die() {
    echo "build-rpm.sh: $*" >&2
    exit 1
}

command -v rpmbuild >/dev/null || die "rpmbuild not found (Debian: apt-get install rpm; RHEL: dnf install rpm-build)"
command -v cargo >/dev/null || die "cargo not found on PATH (install Rust >= 1.85)"

spec=$repo/packaging/rpm/map-by-device.spec
version=$(sed -n 's/^Version:[[:space:]]*//p' "$spec")
crate_version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/Cargo.toml" | head -n 1)
[[ $version == "$crate_version" ]] || die "the spec says Version: $version but Cargo.toml says $crate_version"

work=$(mktemp -d /tmp/mbd-rpm.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work"/{SOURCES,SPECS,BUILD,RPMS,SRPMS} "$outdir"
tar -C "$repo" --exclude=./target --exclude=./.git --exclude=./debian \
    --transform "s|^\./|map-by-device-$version/|" -czf "$work/SOURCES/map-by-device-$version.tar.gz" .

nodeps=()
if [[ -f /etc/debian_version ]]; then
    nodeps=(--nodeps) # BuildRequires name RHEL packages, unknown to Debian's empty rpm database
fi
start=$(date +%s)
rpmbuild -bb "${nodeps[@]}" --define "_topdir $work" "$spec" >"$work/build.log" 2>&1 || {
    tail -n 60 "$work/build.log" >&2
    die "rpmbuild failed (log above)"
}
rpm=$(find "$work/RPMS" -name 'map-by-device-*.rpm' | head -n 1)
[[ -n $rpm ]] || die "rpmbuild made no map-by-device RPM"
cp "$rpm" "$outdir"/
echo "build-rpm.sh: built $(basename "$rpm") in $(($(date +%s) - start)) s" >&2
echo "$outdir/$(basename "$rpm")"
