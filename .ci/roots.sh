#!/usr/bin/env bash
# Fresh Debian roots for CI (.ci/run), one per suite: bookworm (Slurm 22.05), trixie (24.11),
# sid (26.05). Sourced by .ci/run; also usable by hand (as root):
#
#   .ci/roots.sh create SUITE DIR     debootstrap --variant=minbase SUITE into DIR
#   .ci/roots.sh copy DIR             a clone of this repository's HEAD into DIR/srv/map-by-device
#   .ci/roots.sh run DIR CMD...       mounts, runs CMD inside the root (cwd: the clone), unmounts
#                                     (the root is entered with pivot_root, not chroot: below)
#   .ci/roots.sh shell DIR            the same with an interactive bash
#   .ci/roots.sh cleanup DIR          stops what runs inside DIR, unmounts everything under it
#
# What a root gets from the host, and nothing else:
# - the root directory bound onto itself (so that "/" inside is a mount point, as iproute2's
#   network namespace commands need);
# - /proc, /sys and /dev (rbind + rslave: unmounting inside never reaches the host), a tmpfs
#   on /run, and a copy of the host's /etc/hosts (without the host's name in it, Slurm 24.11
#   stalls steps for 10 s and more resolving it);
# - the host's Rust toolchain, read-only: /root/.rustup and /root/.cargo (rustup's proxies),
#   because no rustup server is reachable here. CARGO_HOME is a writable directory of the
#   root, so crates still come from crates.io;
# - the host's CA bundle, read-only, for cargo's downloads (SSL_CERT_FILE, CARGO_HTTP_CAINFO):
#   where the network intercepts TLS, only the host's trust store knows the interceptor;
# - download caches (speed only): DIR/var/cache/apt/archives and CARGO_HOME/registry are bind
#   mounts of $MBD_CI_CACHE/apt/SUITE and $MBD_CI_CACHE/cargo-registry. Every package is still
#   installed inside the root, by the project's own scripts; the caches only spare downloads.
# A policy-rc.d keeps package scripts from starting daemons (the tests start their own).
# The root is entered with pivot_root in a private mount namespace (unshare --mount), not with
# chroot: the kernel refuses a new user namespace to a chrooted process, which Charliecloud
# (0.38 and later: "can't init user+mount namespaces") and Apptainer ("Running inside a weak
# chrooted environment") need for the container suite. What the commands mount inside stays
# in that namespace and goes with its last process; the host side is unmounted as before.
# sid's Release file may be past its Valid-Until date: apt ignores that date in sid roots.

MBD_CI_MIRROR=${MBD_CI_MIRROR:-http://deb.debian.org/debian}
MBD_CI_CACHE=${MBD_CI_CACHE:-/var/cache/map-by-device-ci}
# Where the clone lives inside a root: world-readable (the unprivileged-user e2e case runs
# from it), not under /root (mode 700).
MBD_CI_SRC=/srv/map-by-device
MBD_CI_CARGO_HOME=/var/lib/map-by-device-ci/cargo
MBD_CI_CA_FILE=${MBD_CI_CA_FILE:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}
MBD_CI_CA_IN_ROOT=/etc/map-by-device-ci/host-ca.crt
# The mount namespaces roots_exec entered the root in (on the root's /run tmpfs).
MBD_CI_MNTNS_FILE=/run/map-by-device-ci-mntns

roots_log() { printf 'ci: %s\n' "$*" >&2; }

# roots_create SUITE DIR: a minimal root of SUITE (DIR must not exist yet).
roots_create() {
    local suite=$1 dir=$2
    [[ ! -e $dir ]] || { roots_log "$dir exists already"; return 1; }
    mkdir -p "$MBD_CI_CACHE/apt/$suite" "$(dirname "$dir")"
    debootstrap --variant=minbase --cache-dir="$MBD_CI_CACHE/apt/$suite" "$suite" "$dir" "$MBD_CI_MIRROR" \
        >"$dir.debootstrap.log" 2>&1 || {
        tail -n 20 "$dir.debootstrap.log" >&2
        roots_log "debootstrap $suite failed (log: $dir.debootstrap.log)"
        return 1
    }
    rm -f "$dir.debootstrap.log"
    printf '#!/bin/sh\nexit 101\n' >"$dir/usr/sbin/policy-rc.d"
    chmod 755 "$dir/usr/sbin/policy-rc.d"
    if [[ $suite == sid || $suite == unstable ]]; then
        printf 'Acquire::Check-Valid-Until "false";\n' >"$dir/etc/apt/apt.conf.d/99map-by-device-ci"
    fi
    # Keep what apt downloads (into the bind-mounted cache).
    printf 'APT::Keep-Downloaded-Packages "true";\nBinary::apt::APT::Keep-Downloaded-Packages "true";\n' \
        >>"$dir/etc/apt/apt.conf.d/99map-by-device-ci"
    echo "$suite" >"$dir/etc/map-by-device-ci-suite"
    chmod 755 "$dir"
}

# roots_copy DIR: a clone of this repository at its HEAD commit (tracked files only: what a
# user who clones the project gets), in DIR$MBD_CI_SRC. A root used by hand keeps its clone
# (and its target/): the clone is moved to the new HEAD instead.
roots_copy() {
    local dir=$1 repo head dst
    repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
    head=$(git -C "$repo" rev-parse HEAD) || return 1
    dst=$dir$MBD_CI_SRC
    if [[ -d $dst/.git ]]; then
        git -C "$dst" fetch --quiet "$repo" "$head" && git -C "$dst" checkout --quiet --detach "$head" || return 1
    else
        mkdir -p "$(dirname "$dst")"
        git clone --quiet --no-checkout "$repo" "$dst" && git -C "$dst" checkout --quiet --detach "$head" || return 1
    fi
    chmod 755 "$dst"
}

# roots_mount DIR: the mounts listed at the top of this file.
roots_mount() {
    local dir=$1 suite
    suite=$(cat "$dir/etc/map-by-device-ci-suite" 2>/dev/null || echo unknown)
    # The root is a mount point of its own (private): iproute2's `ip -n NS` and `ip netns
    # exec` remount "/" as a slave, which fails (EINVAL) when "/" is not a mount point, as in
    # a plain chroot; the multi-node suite runs every command in a network namespace that way.
    if ! mountpoint -q "$dir"; then
        mount --bind "$dir" "$dir" && mount --make-private "$dir" || return 1
    fi
    mountpoint -q "$dir/proc" || mount -t proc proc "$dir/proc" || return 1
    local d
    for d in sys dev; do
        if ! mountpoint -q "$dir/$d"; then
            mount --rbind "/$d" "$dir/$d" && mount --make-rslave "$dir/$d" || return 1
        fi
    done
    mountpoint -q "$dir/run" || mount -t tmpfs -o mode=755 tmpfs "$dir/run" || return 1
    cp /etc/hosts "$dir/etc/hosts"
    mkdir -p "$MBD_CI_CACHE/apt/$suite" "$MBD_CI_CACHE/cargo-registry" "$dir/var/cache/apt/archives" \
        "$dir$MBD_CI_CARGO_HOME/registry" "$dir/root/.rustup" "$dir/root/.cargo"
    roots_bind "$MBD_CI_CACHE/apt/$suite" "$dir/var/cache/apt/archives" rw || return 1
    roots_bind "$MBD_CI_CACHE/cargo-registry" "$dir$MBD_CI_CARGO_HOME/registry" rw || return 1
    roots_bind "$HOME/.rustup" "$dir/root/.rustup" ro || return 1
    roots_bind "$HOME/.cargo" "$dir/root/.cargo" ro || return 1
    if [[ -f $MBD_CI_CA_FILE ]]; then
        mkdir -p "$(dirname "$dir$MBD_CI_CA_IN_ROOT")"
        touch "$dir$MBD_CI_CA_IN_ROOT"
        roots_bind "$MBD_CI_CA_FILE" "$dir$MBD_CI_CA_IN_ROOT" ro || return 1
    fi
}

# roots_bind SRC DST rw|ro
roots_bind() {
    mountpoint -q "$2" && return 0
    mount --bind "$1" "$2" || return 1
    if [[ $3 == ro ]]; then
        mount -o remount,bind,ro "$2" || return 1
    fi
}

# roots_stop_processes DIR: every process started inside DIR, TERM then KILL, by pid: those
# in the mount namespaces roots_exec made for it (recorded in DIR/run, whose tmpfs is the
# host's), and those whose root directory is DIR (a chroot into it).
roots_stop_processes() {
    local dir sig p pids i ns=()
    dir=$(realpath "$1")
    [[ -r $dir$MBD_CI_MNTNS_FILE ]] && mapfile -t ns <"$dir$MBD_CI_MNTNS_FILE"
    for sig in TERM KILL; do
        pids=()
        for p in /proc/[0-9]*; do
            if [[ $(readlink "$p/root" 2>/dev/null) == "$dir" ]] ||
                { ((${#ns[@]})) && printf '%s\n' "${ns[@]}" | grep -qxF -- "$(readlink "$p/ns/mnt" 2>/dev/null)"; }; then
                pids+=("${p#/proc/}")
            fi
        done
        ((${#pids[@]})) || return 0
        roots_log "stopping ${#pids[@]} processes left in $dir ($sig): ${pids[*]}"
        kill -"$sig" "${pids[@]}" 2>/dev/null
        for ((i = 0; i < 50; i++)); do
            sleep 0.1
            local left=0
            for p in "${pids[@]}"; do [[ -d /proc/$p ]] && left=1; done
            ((left)) || return 0
        done
    done
}

# roots_umount DIR: everything mounted under DIR, deepest first.
roots_umount() {
    local dir m
    dir=$(realpath "$1")
    # /proc/self/mounts escapes blanks as \040; the roots' paths have none.
    while read -r m; do
        umount "$m" 2>/dev/null || umount -l "$m" || roots_log "cannot unmount $m"
    done < <(awk -v d="$dir" '$2 == d || index($2, d "/") == 1 {print $2}' /proc/self/mounts | sort -r)
}

roots_cleanup() {
    roots_stop_processes "$1"
    roots_umount "$1"
}

# roots_exec DIR CMD...: runs CMD inside the (mounted) root with a clean environment, entered
# with pivot_root (see the top of this file): in a private mount namespace, DIR (a mount point
# of its own: roots_mount) becomes "/" and the host's root is detached. The namespace's id is
# appended to DIR/run/ (roots_stop_processes).
roots_exec() {
    local dir=$1 ca=()
    shift
    [[ -s $dir$MBD_CI_CA_IN_ROOT ]] && ca=(SSL_CERT_FILE="$MBD_CI_CA_IN_ROOT" CARGO_HTTP_CAINFO="$MBD_CI_CA_IN_ROOT")
    # shellcheck disable=SC2016 # expanded by the inner shell
    unshare --mount --propagation private /bin/bash -c '
        set -e
        readlink /proc/self/ns/mnt >>"$1$2"
        cd "$1"
        mkdir -p .ci-old-root
        pivot_root . .ci-old-root
        cd /
        umount -l /.ci-old-root
        rmdir /.ci-old-root
        shift 2
        exec "$@"' roots-pivot "$dir" "$MBD_CI_MNTNS_FILE" /usr/bin/env -i "${ca[@]}" \
        HOME=/root USER=root LOGNAME=root TERM="${TERM:-dumb}" LANG=C.UTF-8 \
        PATH=/root/.cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        CARGO_HOME="$MBD_CI_CARGO_HOME" CARGO_TERM_COLOR=never \
        /bin/bash -c 'cd "$0" 2>/dev/null || cd /; exec "$@"' "$MBD_CI_SRC" "$@"
}

# roots_run DIR CMD...: mounts, runs CMD, cleans up (also when CMD fails or is interrupted).
roots_run() {
    local dir=$1 rc=0
    shift
    roots_mount "$dir" || { roots_cleanup "$dir"; return 1; }
    roots_exec "$dir" "$@" || rc=$?
    roots_cleanup "$dir"
    return "$rc"
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
    set -uo pipefail
    [[ $(id -u) == 0 ]] || { echo ".ci/roots.sh: run as root (debootstrap, mount, pivot_root)" >&2; exit 1; }
    cmd=${1:-}
    shift || true
    case $cmd in
        create) roots_create "$@" ;;
        copy) roots_copy "$@" ;;
        run) dir=$1; trap 'roots_cleanup "$dir"' EXIT; roots_run "$@" ;;
        shell) dir=$1; trap 'roots_cleanup "$dir"' EXIT; roots_run "$dir" /bin/bash -i ;;
        cleanup) roots_cleanup "$@" ;;
        *) echo "usage: .ci/roots.sh create SUITE DIR | copy DIR | run DIR CMD... | shell DIR | cleanup DIR" >&2; exit 2 ;;
    esac
fi
