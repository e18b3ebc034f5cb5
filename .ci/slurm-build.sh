#!/usr/bin/env bash
# Slurm built from the source that Debian's archive serves (the slurm-wlm source package,
# whose orig tarball is SchedMD's release tarball unchanged, with SchedMD's own debian/ and
# slurm.spec in it), and cached on this machine (outside the clone), keyed by the tarball's
# sha256: a CI run reuses what an earlier run built here; a new machine, or a new tarball,
# builds again. Nothing is read from beside the repository: a release no package registry
# serves (25.05, 25.11, 26.11) cannot be built here. Sourced by .ci/run; also usable by
# hand (as root):
#
#   .ci/slurm-build.sh source RELEASE         the orig tarball of Debian's slurm-wlm source
#                                             package: RELEASE is a Debian version
#                                             (24.11.5-4+deb13u1) or a release series (24.11:
#                                             the newest version served); prints its path
#   .ci/slurm-build.sh prefix TARBALL         ./configure --prefix=... && make install, on this
#                                             machine; prints the prefix
#   .ci/slurm-build.sh smd TARBALL SUITE WORK SchedMD's own debian/ (the slurm-smd packages),
#                                             built in a fresh SUITE root under WORK; prints
#                                             the directory of the .deb files
#
# Each says on stderr where its source came from, whether it built or reused, and how long
# the build took ("slurm: 24.11.5 smd-trixie: built in 912 s" or "... reused, built in 912 s
# on DATE"), and adds the same line to $MBD_SLURM_BUILD_RECORD.
# The cache: $MBD_SLURM_CACHE/<sha256>/<kind>/ with a build.info written last (a build that
# stopped half way has none and is done again); the tarballs in $MBD_SLURM_CACHE/sources/.

# shellcheck source=.ci/roots.sh
source "$(dirname "${BASH_SOURCE[0]}")/roots.sh"
MBD_SLURM_CACHE=${MBD_SLURM_CACHE:-$MBD_CI_CACHE/slurm}
# The Debian suites whose source lists are searched for slurm-wlm (one deb-src line each).
MBD_SLURM_SOURCE_SUITES=${MBD_SLURM_SOURCE_SUITES:-"bookworm trixie forky sid"}
# What a plain ./configure of Slurm needs to build srun, slurmd and the plugins (munge for
# auth/munge; the rest of Slurm's optional features are left out where their libraries are).
SLURM_PREFIX_PACKAGES=(build-essential python3 pkg-config libmunge-dev libhwloc-dev)

slurm_log() { printf 'slurm: %s\n' "$*" >&2; }

# slurm_record_line LINE: LINE on stderr and in the CI run's record.
slurm_record_line() {
    slurm_log "$1"
    echo "$1" >>"${MBD_SLURM_BUILD_RECORD:-/dev/null}"
}

# slurm_version_of TARBALL: "24.11.5" from slurm-wlm_24.11.5.orig.tar.gz
slurm_version_of() {
    local name
    name=$(basename "$1")
    name=${name#slurm-wlm_}
    echo "${name%.orig.tar.*}"
}

# slurm_apt ARGS...: apt-get or apt-cache (the first word) with a private list of deb-src
# lines and private index files under $MBD_SLURM_CACHE/apt, so that this machine's own apt
# configuration is neither read nor changed. The indexes are authenticated by the archive's
# signature (debian-archive-keyring), as any apt source.
slurm_apt() {
    local tool=$1 dir=$MBD_SLURM_CACHE/apt
    shift
    "$tool" -o Dir::Etc::SourceList="$dir/sources.list" -o Dir::Etc::SourceParts=/dev/null \
        -o Dir::State::Lists="$dir/lists" -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache= \
        -o APT::Sandbox::User=root -o Acquire::Check-Valid-Until=false "$@"
}

# slurm_source RELEASE: the orig tarball of slurm-wlm RELEASE (a Debian version, or a series
# such as 24.11 for the newest version of it that the lists hold), downloaded with apt-get
# source (or reused from the cache) and checked against the sha256 of the authenticated
# Sources entry. A .dsc or .debian.tar.xz that the archive does not serve does not matter:
# only the orig tarball is used. Prints its path; says in one line where it came from.
slurm_source() {
    local release=$1 dir=$MBD_SLURM_CACHE/sources suite version file sha have
    mkdir -p "$MBD_SLURM_CACHE/apt/lists/partial" "$dir/download"
    for suite in $MBD_SLURM_SOURCE_SUITES; do
        echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $MBD_CI_MIRROR $suite main"
    done >"$MBD_SLURM_CACHE/apt/sources.list"
    slurm_install_missing apt debian-archive-keyring || return 1
    # One download at a time (CI fetches from the host while a root is being set up).
    exec {lock}>"$dir/.lock"
    flock "$lock"
    slurm_apt apt-get update -qq >/dev/null 2>&1 || slurm_apt apt-get update -qq >&2 ||
        { slurm_log "cannot read Debian's source lists ($MBD_SLURM_SOURCE_SUITES)"; exec {lock}>&-; return 1; }
    # "VERSION SHA256 FILE" of each slurm-wlm orig tarball in the lists.
    read -r version sha file < <(slurm_apt apt-cache showsrc slurm-wlm 2>/dev/null |
        awk '/^Version:/ {v = $2} /^Checksums-Sha256:/ {on = 1; next} /^[A-Za-z-]+:/ {on = 0}
             on && $3 ~ /\.orig\.tar\./ {print v, $1, $3}' |
        awk -v r="$release" '$1 == r || index($1, r ".") == 1' |
        sort -k1,1 -V | tail -n 1)
    if [[ -z ${file:-} ]]; then
        slurm_log "Debian's lists ($MBD_SLURM_SOURCE_SUITES) hold no slurm-wlm source of $release"
        exec {lock}>&-
        return 1
    fi
    if [[ -f $dir/$file ]] && [[ $(sha256sum "$dir/$file" | cut -c1-64) == "$sha" ]]; then
        have=reused
    else
        rm -f "$dir/download"/*
        # Exits non-zero when the .dsc or the .debian.tar.xz is not served: the orig tarball is
        # checked below whatever it says.
        (cd "$dir/download" && slurm_apt apt-get source --download-only -qq "slurm-wlm=$version") >&2 ||
            slurm_log "apt-get source slurm-wlm=$version did not fetch every file; checking the orig tarball"
        if [[ ! -f $dir/download/$file || $(sha256sum "$dir/download/$file" | cut -c1-64) != "$sha" ]]; then
            slurm_log "$file of slurm-wlm $version: not downloaded, or its sha256 is not the Sources entry's ($sha)"
            exec {lock}>&-
            return 1
        fi
        mv -f "$dir/download/$file" "$dir/$file"
        have=downloaded
    fi
    exec {lock}>&-
    slurm_record_line "source $(slurm_version_of "$file"): $file from Debian's source package slurm-wlm $version ($have, sha256 $sha as in the Sources entry)"
    echo "$dir/$file"
}

# slurm_cached DIR WHAT: 0 (and says so) when DIR holds a finished build.
slurm_cached() {
    local dir=$1 what=$2 built_s built_on
    [[ -f $dir/build.info ]] || return 1
    built_s=$(sed -n 's/^built_s=//p' "$dir/build.info")
    built_on=$(sed -n 's/^built_on=//p' "$dir/build.info")
    slurm_record_line "$what: reused, built in ${built_s:-?} s on ${built_on:-?} ($dir)"
    return 0
}

# slurm_record DIR WHAT SECONDS
slurm_record() {
    printf 'built_s=%s\nbuilt_on=%s\n' "$3" "$(date -u +%Y-%m-%dT%H:%MZ)" >"$1/build.info"
    slurm_record_line "$2: built in $3 s ($1)"
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
    tar -xf "$tarball" -C "$MBD_SLURM_CACHE/$sha/src" || return 1
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
    slurm_install_missing debootstrap || return 1
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
    tar -xf "$tarball" -C "$root/srv/build" || return 1
    # (the tarball's one top directory: slurm-slurm-24-11-5-1/ in Debian's orig tarball)
    src=$(cd "$root" && find srv/build -mindepth 1 -maxdepth 1 -type d | head -n 1)
    src=/$src
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
    source) slurm_source "$2" ;;
    prefix) slurm_prefix "$2" ;;
    smd) slurm_smd "$2" "$3" "$4" ;;
    *)
        sed -n '2,/^$/s/^# \{0,1\}//p' "$0" >&2
        exit 2
        ;;
    esac
fi
