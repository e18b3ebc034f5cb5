#!/usr/bin/env bash
# Slurm releases that Debian does not ship, built from SchedMD's sources and cached on this
# machine (outside the clone), keyed by the tarball's sha256: a CI run reuses what an earlier
# run built here; a new machine, or a new tarball, builds again. Sourced by .ci/run; also
# usable by hand (as root):
#
#   .ci/slurm-build.sh prefix TARBALL         ./configure --prefix=... && make install, on this
#                                             machine; prints the prefix
#   .ci/slurm-build.sh smd TARBALL SUITE WORK SchedMD's own debian/ (the slurm-smd packages),
#                                             built in a fresh SUITE root under WORK; prints
#                                             the directory of the .deb files
#
# Each says on stderr whether it built or reused, and how long the build took
# ("slurm: 25.11.7 smd-trixie: built in 512 s" or "... reused, built in 512 s on DATE").
# The cache: $MBD_SLURM_CACHE/<sha256>/<kind>/ with a build.info written last (a build that
# stopped half way has none and is done again). The tarballs: ../shared/vendor/slurm/ here
# (SOURCES.md there names their commits); a site uses SchedMD's release tarballs the same way.

MBD_CI_CACHE=${MBD_CI_CACHE:-/var/cache/map-by-device-ci}
MBD_SLURM_CACHE=${MBD_SLURM_CACHE:-$MBD_CI_CACHE/slurm}
# What a plain ./configure of Slurm needs to build srun, slurmd and the plugins (munge for
# auth/munge; the rest of Slurm's optional features are left out where their libraries are).
SLURM_PREFIX_PACKAGES=(build-essential python3 pkg-config libmunge-dev libhwloc-dev xz-utils)

slurm_log() { printf 'slurm: %s\n' "$*" >&2; }

# slurm_version_of TARBALL: "25.11.7" from slurm-25.11.7.tar.xz
slurm_version_of() {
    local name
    name=$(basename "$1")
    name=${name#slurm-}
    echo "${name%.tar.*}"
}

# slurm_cached DIR WHAT: 0 (and says so) when DIR holds a finished build.
slurm_cached() {
    local dir=$1 what=$2 built_s built_on
    [[ -f $dir/build.info ]] || return 1
    built_s=$(sed -n 's/^built_s=//p' "$dir/build.info")
    built_on=$(sed -n 's/^built_on=//p' "$dir/build.info")
    slurm_log "$what: reused, built in ${built_s:-?} s on ${built_on:-?} ($dir)"
    echo "reused $what (built in ${built_s:-?} s)" >>"${MBD_SLURM_BUILD_RECORD:-/dev/null}"
    return 0
}

# slurm_record DIR WHAT SECONDS
slurm_record() {
    printf 'built_s=%s\nbuilt_on=%s\n' "$3" "$(date -u +%Y-%m-%dT%H:%MZ)" >"$1/build.info"
    slurm_log "$2: built in $3 s ($1)"
    echo "built $2 in $3 s" >>"${MBD_SLURM_BUILD_RECORD:-/dev/null}"
}

# slurm_install_missing PKG...: Debian packages this machine lacks.
slurm_install_missing() {
    local missing=() p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    ((${#missing[@]})) || return 0
    slurm_log "installing ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# slurm_prefix TARBALL: the release built and installed under a prefix in the cache, for this
# machine's Debian (the prefix's programs link this machine's libraries). Prints the prefix.
slurm_prefix() {
    local tarball=$1 sha version codename dir src start log
    sha=$(sha256sum "$tarball" | cut -c1-64) || return 1
    version=$(slurm_version_of "$tarball")
    codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-unknown}")
    dir=$MBD_SLURM_CACHE/$sha/prefix-$codename
    if slurm_cached "$dir" "$version prefix-$codename"; then
        echo "$dir"
        return 0
    fi
    slurm_install_missing "${SLURM_PREFIX_PACKAGES[@]}" || return 1
    rm -rf "$dir" "$MBD_SLURM_CACHE/$sha/src"
    mkdir -p "$dir" "$MBD_SLURM_CACHE/$sha/src"
    log=$MBD_SLURM_CACHE/$sha/prefix-$codename.log
    start=$SECONDS
    slurm_log "$version prefix-$codename: building (./configure --prefix=$dir && make install; log $log)"
    tar -xJf "$tarball" -C "$MBD_SLURM_CACHE/$sha/src" || return 1
    src=$(find "$MBD_SLURM_CACHE/$sha/src" -mindepth 1 -maxdepth 1 -type d | head -n 1)
    if ! (cd "$src" && ./configure --prefix="$dir" --sysconfdir="$dir/etc" --disable-debug &&
        make -j"$(nproc)" && make install) >"$log" 2>&1; then
        tail -n 30 "$log" >&2
        slurm_log "$version: the build failed (log $log)"
        return 1
    fi
    rm -rf "$MBD_SLURM_CACHE/$sha/src"
    slurm_record "$dir" "$version prefix-$codename" $((SECONDS - start))
    echo "$dir"
}

# slurm_smd TARBALL SUITE WORK: SchedMD's slurm-smd packages of the release, as a site builds
# them (dpkg-buildpackage with the source's own debian/), in a fresh SUITE root made under WORK
# (removed afterwards). Prints the directory of the .deb files.
slurm_smd() {
    local tarball=$1 suite=$2 work=$3 sha version dir root start log src
    sha=$(sha256sum "$tarball" | cut -c1-64) || return 1
    version=$(slurm_version_of "$tarball")
    dir=$MBD_SLURM_CACHE/$sha/smd-$suite
    if slurm_cached "$dir" "$version smd-$suite"; then
        echo "$dir"
        return 0
    fi
    # shellcheck source=.ci/roots.sh
    source "$(dirname "${BASH_SOURCE[0]}")/roots.sh"
    rm -rf "$dir"
    mkdir -p "$dir" "$work"
    root=$work/smd-build-$suite
    log=$MBD_SLURM_CACHE/$sha/smd-$suite.log
    start=$SECONDS
    slurm_log "$version smd-$suite: building SchedMD's debian/ in a fresh $suite root (log $log)"
    if ! roots_create "$suite" "$root" >"$log" 2>&1; then
        slurm_log "$version: could not make the $suite build root (log $log)"
        return 1
    fi
    mkdir -p "$root/srv/build"
    tar -xJf "$tarball" -C "$root/srv/build" || return 1
    src=/srv/build/slurm-$version
    # The build dependencies, as debian/control lists them (apt-get satisfy takes the list).
    # shellcheck disable=SC2016
    if ! roots_run "$root" bash -c '
        set -e
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends dpkg-dev build-essential fakeroot >/dev/null
        deps=$(awk "/^Build-Depends:/ {on=1; sub(/^Build-Depends:/, \"\")} on && /^[A-Z][A-Za-z-]*:/ && !/^Build-Depends:/ {on=0} on" "$1/debian/control" | tr -d "\n")
        apt-get satisfy -y -qq --no-install-recommends "$deps" >/dev/null
        cd "$1"
        DEB_BUILD_OPTIONS="parallel=$(nproc) nocheck" dpkg-buildpackage -b -uc -us
    ' _ "$src" >>"$log" 2>&1; then
        rm -rf "$root"
        tail -n 30 "$log" >&2
        slurm_log "$version: SchedMD's debian/ did not build (log $log)"
        return 1
    fi
    cp "$root"/srv/build/*.deb "$dir/"
    rm -rf "$root"
    slurm_record "$dir" "$version smd-$suite" $((SECONDS - start))
    echo "$dir"
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
    set -uo pipefail
    case ${1:-} in
    prefix) slurm_prefix "$2" ;;
    smd) slurm_smd "$2" "$3" "$4" ;;
    *)
        sed -n '2,/^$/s/^# \{0,1\}//p' "$0" >&2
        exit 2
        ;;
    esac
fi
