#!/usr/bin/env bash
# Stages what tests/device/run.sh runs on a GPU machine that can install nothing: the release
# map-by-device CLI and every shared library it needs beyond glibc (libhwloc.so.15 and what it
# pulls in), into .device/ at the repository root (ignored by git), then proves the staged
# tree enough on its own:
#   - the binary runs from an empty environment with LD_LIBRARY_PATH=.device/lib only;
#   - ldd resolves every library outside glibc from .device/lib;
#   - as root: `map-by-device devices` in a root that holds nothing but glibc's loader, libc,
#     libm, .device, /proc and /sys (no hwloc plugins, no /etc, no /usr) prints what it
#     prints here;
#   - the whole tree stays under 32 MiB (the GPU machine's runner carries at most 64 MiB).
# Writes .device/MANIFEST (where and from what it was built, the glibc it needs, the files).
#
#   tests/device/stage.sh        # Debian 12 with the build dependencies (scripts/test-all.sh
#                                # --prepare installs them); ends "N passed, N failed"
#
# Then, on the GPU machine: bash tests/device/run.sh (from the repository root, with .device).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DEV=${MBD_DEVICE_DIR:-$ROOT/.device}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
MAX_BYTES=$((32 * 1024 * 1024))
# glibc's own libraries: every Linux the binary may land on has them, in the version its
# loader expects; carrying them would pair a foreign loader with this libc.
GLIBC='^(linux-vdso\.so|ld-linux-x86-64\.so|libc\.so|libm\.so|libmvec\.so|libpthread\.so|libdl\.so|librt\.so|libresolv\.so|libutil\.so|libanl\.so)'
passed=0 failed=0
ok() { echo "ok $*"; passed=$((passed + 1)); }
fail() { echo "FAIL $*"; failed=$((failed + 1)); }
skip() { echo "skipped: $*"; }
finish() {
    echo "$passed passed, $failed failed"
    exit $((failed > 0))
}

cd "$ROOT" || exit 1
echo "== cargo build --release --locked -p map-by-device"
if ! cargo build --release --locked --quiet -p map-by-device; then
    fail "cargo build --release -p map-by-device"
    finish
fi
rm -rf "$DEV"
mkdir -p "$DEV/bin" "$DEV/lib" || exit 1
cp "$TARGET/release/map-by-device" "$DEV/bin/" || exit 1
BIN=$DEV/bin/map-by-device

# ldd lists the whole closure (libhwloc's own libudev too); "not found" is a broken build host.
missing=$(ldd "$BIN" | grep 'not found')
if [[ -n $missing ]]; then
    fail "ldd $BIN: $missing"
    finish
fi
while read -r soname path; do
    [[ $soname =~ $GLIBC ]] && continue
    cp -L "$path" "$DEV/lib/$soname" || fail "copy $path"
done < <(ldd "$BIN" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}')
echo "staged libraries: $(ls "$DEV/lib" | tr '\n' ' ')"

# The newest glibc symbol version any staged file needs: the GPU machine's glibc must be at
# least that (run.sh prints its own).
need_glibc=$(for f in "$BIN" "$DEV"/lib/*; do readelf -V -W "$f"; done 2>/dev/null |
    grep -oE 'GLIBC_[0-9]+\.[0-9]+(\.[0-9]+)?' | sed 's/GLIBC_//' | sort -uV | tail -n 1)
{
    echo "built $(date -u +%Y-%m-%dT%H:%MZ) on $(. /etc/os-release && echo "$PRETTY_NAME"), $(uname -m)," \
        "commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!.device' || echo ' (with uncommitted changes)')"
    echo "hwloc $(dpkg-query -W -f='${Version}' libhwloc15 2>/dev/null || echo unknown), libudev" \
        "$(dpkg-query -W -f='${Version}' libudev1 2>/dev/null || echo unknown); needs glibc >= ${need_glibc:-?}"
    (cd "$DEV" && find bin lib -type f -printf '%p %s bytes\n' | sort)
} >"$DEV/MANIFEST"
sed 's/^/    /' "$DEV/MANIFEST"

if out=$(env -i LD_LIBRARY_PATH="$DEV/lib" "$BIN" --version 2>&1); then
    ok "env -i LD_LIBRARY_PATH=$DEV/lib map-by-device --version: $out"
else
    fail "env -i LD_LIBRARY_PATH=$DEV/lib map-by-device --version: $out"
fi

# Every library outside glibc must come from .device/lib, none from the system.
elsewhere=$(env -i LD_LIBRARY_PATH="$DEV/lib" ldd "$BIN" | awk '$2 == "=>" {print $1, $3}' |
    grep -vE "$GLIBC" | grep -v " $DEV/lib/")
if [[ -z $elsewhere ]]; then
    ok "ldd with LD_LIBRARY_PATH=$DEV/lib: every library outside glibc resolves from $DEV/lib"
else
    fail "ldd with LD_LIBRARY_PATH=$DEV/lib: $(tr '\n' ';' <<<"$elsewhere")"
fi

# A root with glibc and the staged tree only: what a foreign Linux offers at least. Root only
# (a private mount namespace for /proc and /sys); the run compares the device lists.
check_bare_root() {
    local root here there rc
    if [[ $(id -u) != 0 ]] || ! command -v unshare >/dev/null || ! command -v chroot >/dev/null; then
        skip "the bare-root run: needs root, unshare and chroot"
        return
    fi
    root=$(mktemp -d /tmp/mbd-bare.XXXXXX)
    mkdir -p "$root/lib64" "$root/lib/x86_64-linux-gnu" "$root/proc" "$root/sys" "$root/mbd"
    cp -L /lib64/ld-linux-x86-64.so.2 "$root/lib64/"
    cp -L /lib/x86_64-linux-gnu/libc.so.6 /lib/x86_64-linux-gnu/libm.so.6 "$root/lib/x86_64-linux-gnu/"
    cp -a "$DEV/bin" "$DEV/lib" "$root/mbd/"
    here=$(env -i LD_LIBRARY_PATH="$DEV/lib" "$BIN" devices 2>&1)
    there=$(env -i LD_LIBRARY_PATH=/mbd/lib unshare -m sh -c \
        'mount --bind /proc "$1/proc" && mount --rbind /sys "$1/sys" && exec chroot "$1" /mbd/bin/map-by-device devices' \
        sh "$root" 2>&1)
    rc=$?
    rm -rf "$root"
    if ((rc == 0)) && [[ $there == "$here" ]]; then
        ok "map-by-device devices in a root of glibc and the staged tree only: the same $(wc -l <<<"$there") lines as here"
    else
        fail "map-by-device devices in a root of glibc and the staged tree only (exit $rc): $(tr '\n' ';' <<<"$there")"
    fi
}
check_bare_root

size=$(du -sb "$DEV" | cut -f1)
if ((size < MAX_BYTES)); then
    ok "staged tree $DEV: $((size / 1024)) KiB, under $((MAX_BYTES / 1024 / 1024)) MiB"
else
    fail "staged tree $DEV: $((size / 1024)) KiB, over $((MAX_BYTES / 1024 / 1024)) MiB"
fi
finish
