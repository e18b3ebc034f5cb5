#!/bin/bash
# Builds the RPM with Debian's rpm (packaging/build-rpm.sh) and checks what it contains:
# its exact file list, its Slurm requirement, its config file and the files themselves.
#
#   tests/package/rpm-files.sh [RPM]     (without RPM, builds one into target/packages)
set -euo pipefail

# shellcheck source=tests/package/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

rpm=${1:-}
[[ -z $rpm || $rpm == /* ]] || rpm=$PWD/$rpm
if [[ -z $rpm ]]; then
    rpm=$("$repo/packaging/build-rpm.sh" | tail -n 1)
fi
echo "rpm-files: $rpm"

plugindir=/usr/lib64/slurm
slurm_version=$("$repo/packaging/slurm-info.sh" version)
slurm_next=$("$repo/packaging/slurm-info.sh" next-series)

# The expected file list: everything the spec installs, nothing else (build-id links aside).
expected=$(
    {
        printf '%s\n' /etc/slurm/plugstack.conf.d /etc/slurm/plugstack.conf.d/map-by-device.conf \
            /usr/bin/map-by-device "$plugindir/map_by_device.so" "$plugindir/map_by_device_discover.so" \
            /usr/share/doc/map-by-device /usr/share/doc/map-by-device/README.md \
            /usr/share/doc/map-by-device/examples \
            /usr/share/man/man1/map-by-device.1 /usr/share/man/man8/map-by-device.8 \
            /usr/share/map-by-device /usr/share/map-by-device/topologies
        for f in "$repo"/docs/*.md; do echo "/usr/share/doc/map-by-device/$(basename "$f")"; done
        echo /usr/share/doc/map-by-device/pictures
        for f in "$repo"/docs/pictures/*.svg; do echo "/usr/share/doc/map-by-device/pictures/$(basename "$f")"; done
        for f in "$repo"/topologies/*.xml; do echo "/usr/share/map-by-device/topologies/$(basename "$f")"; done
        for f in plugstack.conf.example map-by-device.toml.example; do
            if [[ -f $repo/$f ]]; then echo "/usr/share/doc/map-by-device/examples/$f"; fi
        done
    } | sort
)
actual=$(rpm -qlp "$rpm" | grep -v '^/usr/lib/\.build-id' | sed -E 's/\.(gz|bz2|xz|zst)$//' | sort)
# shellcheck disable=SC2317 # called through check
same_list() {
    if [[ $expected != "$actual" ]]; then
        diff <(echo "$expected") <(echo "$actual") | sed 's/^/     /'
        return 1
    fi
}
check "file list is exactly the spec's (< expected, > in the RPM)" same_list

requires=$(rpm -qp --requires "$rpm")
check "requires slurm >= $slurm_version (the release it was built against)" grep -qx "slurm >= $slurm_version" <<<"$requires"
check "requires slurm < $slurm_next (a SPANK plugin loads only into its own release)" grep -qx "slurm < $slurm_next" <<<"$requires"
check "requires libhwloc.so.15 (found by rpm from the ELF files)" grep -q '^libhwloc.so.15()' <<<"$requires"
check "the plugstack snippet is its only config file" test "$(rpm -qpc "$rpm")" = /etc/slurm/plugstack.conf.d/map-by-device.conf
check "release names the Slurm series" grep -q "\.slurm${slurm_version%.*}" <<<"$(rpm -qp --qf '%{RELEASE}' "$rpm")"

root=$(mktemp -d /tmp/mbd-rpmx.XXXXXX)
trap 'rm -rf "$root"' EXIT
rpm2archive - <"$rpm" | tar -xzf - -C "$root" # rpm2archive: part of rpm, no cpio needed
snippet=$root/etc/slurm/plugstack.conf.d/map-by-device.conf
check "the snippet is all comments (disabled until the admin enables it)" \
    bash -c "! grep -v -e '^[[:space:]]*#' -e '^[[:space:]]*\$' '$snippet'"
check "the snippet names $plugindir/map_by_device.so" grep -q "^#required $plugindir/map_by_device.so\$" "$snippet"
check "the snippet says which Slurm release" grep -q "built for Slurm ${slurm_version%.*}" "$snippet"
syms=$(nm -D --defined-only "$root$plugindir/map_by_device.so" 2>/dev/null || true)
for s in plugin_name plugin_type plugin_version slurm_spank_init slurm_spank_user_init slurm_spank_task_init; do
    check "the plugin exports $s" grep -qw "$s" <<<"$syms"
done
lib_syms=$(nm -D --defined-only "$root$plugindir/map_by_device_discover.so" 2>/dev/null || true)
check "the discovery library exports mbd_discover" grep -qw mbd_discover <<<"$lib_syms"
check "the tool runs and knows its version" grep -q "map-by-device $(sed -n 's/^Version:[[:space:]]*//p' "$repo/packaging/rpm/map-by-device.spec")" \
    <<<"$("$root/usr/bin/map-by-device" --version)"
# rpm 4.18 installs the man pages as written, 4.20 and later gzip them (brp-compress).
man8=$(ls "$root"/usr/share/man/man8/map-by-device.8* 2>/dev/null | head -n 1)
check "the man pages are roff (${man8##*/})" bash -c 'zcat -f "$1" | grep -q "^\.TH MAP-BY-DEVICE 8"' _ "$man8"

echo "rpm-files: rpm $(rpm --version | awk '{print $NF}'), $(basename "$rpm")"
((fail == 0)) && echo "rpm-files: all checks passed" || echo "rpm-files: FAILED"
checks_done
exit "$fail"
