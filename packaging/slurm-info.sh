#!/bin/sh
# Facts about the installed Slurm that the packages are built against, read from the installed
# Slurm itself (never a constant), for packaging/debian/rules and packaging/rpm/map-by-device.spec:
#
#   slurm-info.sh version      22.05.8   SLURM_VERSION_NUMBER of <slurm/slurm_version.h>, the
#                                        number the plugin declares (spank/build.rs reads the same)
#   slurm-info.sh series       22.05     what Slurm compares when it loads a SPANK plugin
#   slurm-info.sh next-series  22.06     the first version outside that series (an upper bound)
#   slurm-info.sh plugin-dir   /usr/lib/x86_64-linux-gnu/slurm-wlm   where Slurm's own plugins are
#   slurm-info.sh deb-version  22.05.8-4+deb12u3   the Debian version of the package owning them
#   slurm-info.sh deb-package  slurm-wlm-basic-plugins                that package: Debian's, or
#                                        slurm-smd where SchedMD's own packages are installed
#                                        (built from the debian/ in their source; plugins in
#                                        /usr/lib/<multiarch>/slurm)
#   slurm-info.sh deb-other    slurm-smd   the other family's package, which the .deb's
#                                        Depends accepts as well (same release bounds)
#   slurm-info.sh bindgen-args -I.../spank/shim -I$SLURM_INCLUDE_DIR   for BINDGEN_EXTRA_CLANG_ARGS,
#                                        so that the slurm-spank crate's bindings come from the
#                                        same headers (empty for /usr/include; spank/build.rs)
#
# Overrides: SLURM_INCLUDE_DIR (default /usr/include, as in spank/build.rs), SLURM_PLUGIN_DIR.
set -eu

include=${SLURM_INCLUDE_DIR:-/usr/include}
header=$include/slurm/slurm_version.h

die() {
    echo "slurm-info.sh: $*" >&2
    exit 1
}

# The hex SLURM_VERSION_NUMBER (e.g. 160508).
version_hex() {
    [ -r "$header" ] || die "cannot read $header: install the Slurm headers (Debian: libslurm-dev, RHEL: slurm-devel) or set SLURM_INCLUDE_DIR"
    hex=$(sed -n 's/^#define[[:space:]]*SLURM_VERSION_NUMBER[[:space:]]*0[xX]\([0-9a-fA-F]*\).*/\1/p' "$header")
    [ -n "$hex" ] || die "no '#define SLURM_VERSION_NUMBER 0x...' in $header"
    echo "$hex"
}

# A file that every Slurm installs in its plugin directory.
MARKER=task_affinity.so

# The installed Debian package that owns Slurm's plugins: Debian's slurm-wlm-basic-plugins,
# or SchedMD's slurm-smd (the two conflict), or nothing.
deb_package() {
    command -v dpkg-query >/dev/null 2>&1 || return 0
    for p in slurm-wlm-basic-plugins slurm-smd; do
        if dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
            echo "$p"
            return
        fi
    done
}

plugin_dir() {
    if [ -n "${SLURM_PLUGIN_DIR:-}" ]; then
        echo "$SLURM_PLUGIN_DIR"
        return
    fi
    # dpkg: the directory of the installed package's own plugins.
    if command -v dpkg-query >/dev/null 2>&1; then
        p=$(dpkg-query -L "$(deb_package)" 2>/dev/null | grep "/$MARKER\$" | head -n 1 || true)
        if [ -n "$p" ]; then
            dirname "$p"
            return
        fi
    fi
    # rpm: the installed slurm package's plugins.
    if command -v rpm >/dev/null 2>&1; then
        p=$(rpm -ql slurm 2>/dev/null | grep "/$MARKER\$" | head -n 1 || true)
        if [ -n "$p" ]; then
            dirname "$p"
            return
        fi
    fi
    # Anything else (a source install): the usual places.
    for d in /usr/lib/x86_64-linux-gnu/slurm-wlm /usr/lib/x86_64-linux-gnu/slurm /usr/lib64/slurm /usr/lib/slurm /usr/local/lib/slurm /usr/local/lib64/slurm; do
        if [ -f "$d/$MARKER" ]; then
            echo "$d"
            return
        fi
    done
    die "cannot find Slurm's plugin directory (no $MARKER in the usual places): set SLURM_PLUGIN_DIR"
}

case ${1:-} in
version)
    n=$(version_hex)
    printf '%d.%02d.%d\n' $((0x$n >> 16)) $(((0x$n >> 8) & 255)) $((0x$n & 255))
    ;;
series)
    n=$(version_hex)
    printf '%d.%02d\n' $((0x$n >> 16)) $(((0x$n >> 8) & 255))
    ;;
next-series)
    n=$(version_hex)
    printf '%d.%02d\n' $((0x$n >> 16)) $((((0x$n >> 8) & 255) + 1))
    ;;
plugin-dir)
    plugin_dir
    ;;
deb-package)
    p=$(deb_package)
    echo "${p:-slurm-wlm-basic-plugins}"
    ;;
deb-other)
    if [ "$(deb_package)" = slurm-smd ]; then echo slurm-wlm-basic-plugins; else echo slurm-smd; fi
    ;;
deb-version)
    p=$(deb_package)
    [ -n "$p" ] || die "neither slurm-wlm-basic-plugins (Debian's Slurm: apt-get install slurm-wlm-basic-plugins libslurm-dev) nor slurm-smd (SchedMD's packages: slurm-smd slurm-smd-dev) is installed"
    dpkg-query -W -f='${Version}\n' "$p"
    ;;
bindgen-args)
    if [ "$include" != /usr/include ]; then
        shim=$(cd "$(dirname "$0")/../spank/shim" && pwd) || die "no spank/shim beside packaging/"
        echo "-I$shim -I$include"
    fi
    ;;
*)
    die "usage: slurm-info.sh version|series|next-series|plugin-dir|deb-version|deb-package|deb-other|bindgen-args"
    ;;
esac
