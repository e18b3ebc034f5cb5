#!/usr/bin/env bash
# Where a step's cost goes with the plugin loaded (docs/plugin.md, "Where the time goes"):
# counts rather than times, so that a busy machine does not change them. For each setting,
# one `srun -n 1 true` on the local single-node Slurm (tests/e2e/lib.sh, task/affinity), in
# srun and in the step's slurmstepd:
#
#   empty       no plugin (the reference)
#   trivial     tests/e2e/fixtures/trivial-spank.c: what loading any plugin costs
#   trivialopt  the same with one option registered (tests/e2e/fixtures/trivial-option-spank.c):
#               what Slurm itself does for a plugin that offers users an option
#   unused      this plugin, no default, the job gives no spec
#   cache       this plugin mapping from slurmd's topology cache
#               (--map-by-device=network:shared:overload, as in bench.sh)
#
# and prints, per process: user-space instructions (valgrind's callgrind) in all, in the
# dynamic loader (ld.so: mapping and relocating every library) and in the plugin's own hooks
# (inclusive, per hook); system calls (strace -c); page faults (perf stat's software
# counter, the median of PROFILE_RUNS runs). slurmstepd is measured through a wrapper
# bind-mounted over the slurmstepd slurmd starts, in a private mount namespace; the whole run
# is in private network and mount namespaces (unshare), so it needs no machine-wide lock and
# changes nothing outside. The task hook (task_init) runs in the forked task, which callgrind
# follows until it runs `true`.
#
#   sudo tests/e2e/profile.sh                 # the table
#   PROFILE_KEEP=DIR sudo tests/e2e/profile.sh  # and keep the raw files in DIR
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

[[ $(id -u) == 0 ]] || { echo "profile.sh starts Slurm and mounts a wrapper: run it as root" >&2; exit 1; }

if [[ ${1:-} != --inside ]]; then
    # shellcheck source=tests/e2e/lib.sh
    source "$HERE/lib.sh"
    e2e_install_packages valgrind strace linux-perf iproute2 || exit 1
    e2e_build_plugin || exit 1
    exec unshare --net --mount --propagation private "$0" --inside
fi

# Inside the namespaces. Slurm binds an address from getaddrinfo(), which wants one that is
# not loopback's: give lo a second one.
ip link set lo up && ip addr add 10.99.0.1/32 dev lo || exit 1
# shellcheck source=tests/e2e/lib.sh
source "$HERE/lib.sh"
E2E_PLUGIN_BUILT=${CARGO_TARGET_DIR:-$E2E_ROOT/target}/release/libmap_by_device_spank.so
OUT=$(mktemp -d /run/mbd-profile.XXXXXX) || exit 1
cleanup() {
    e2e_cleanup
    if [[ -n ${PROFILE_KEEP:-} ]]; then
        mkdir -p "$PROFILE_KEEP" && cp -r "$OUT"/. "$PROFILE_KEEP"/
    fi
    rm -rf "$OUT"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The wrapper: what slurmd starts as slurmstepd runs under the tool $OUT/mode names.
STEPD=$(dirname "$(command -v slurmd)")/slurmstepd
[[ -x $STEPD ]] || STEPD=$(command -v slurmstepd)
[[ -x $STEPD ]] || { echo "no slurmstepd beside slurmd"; exit 1; }
cp "$STEPD" "$OUT/slurmstepd.real"
cat >"$OUT/stepd-wrapper" <<EOF
#!/bin/sh
case \$(cat $OUT/mode) in
    callgrind) exec valgrind -q --tool=callgrind --trace-children=yes --dump-before=execve \
        --callgrind-out-file=$OUT/stepd.%p.cg $OUT/slurmstepd.real "\$@" ;;
    strace) exec strace -f -c -o $OUT/stepd.\$\$.strace $OUT/slurmstepd.real "\$@" ;;
    perf) exec perf stat -x, -e page-faults -o $OUT/stepd.\$\$.perf $OUT/slurmstepd.real "\$@" ;;
    *) exec $OUT/slurmstepd.real "\$@" ;;
esac
EOF
chmod 755 "$OUT/stepd-wrapper"
echo none >"$OUT/mode"
mount --bind "$OUT/stepd-wrapper" "$STEPD" || exit 1

e2e_init || exit 1
CACHE_CONF=$E2E_DIR/etc/cache.toml
printf 'cache_dir = "%s"\n' "$E2E_DIR/cache" >"$CACHE_CONF"
chmod 644 "$CACHE_CONF"
for f in trivial trivial-option; do
    cc -shared -fPIC -O2 -o "$E2E_DIR/lib/$f.so" "$HERE/fixtures/$f-spank.c" || exit 1
done
chmod 755 "$E2E_DIR"/lib/*.so
set_plugstack "config=$CACHE_CONF"
E2E_DECLARED_CPUS=64 cluster_start affinity || { e2e_dump_logs; exit 1; }
[[ -f $E2E_DIR/cache/topology.json ]] || { echo "slurmd wrote no topology cache"; exit 1; }

configure() {
    case $1 in
        empty) set_plugstack_empty; OPT=() ;;
        trivial) e2e_write_plugstack "required $E2E_DIR/lib/trivial.so"; OPT=() ;;
        trivialopt) e2e_write_plugstack "required $E2E_DIR/lib/trivial-option.so"; OPT=() ;;
        unused) set_plugstack ""; OPT=() ;;
        cache) set_plugstack "config=$CACHE_CONF"; OPT=(--map-by-device=network:shared:overload) ;;
    esac
}

# step MODE SETTING: one step with slurmstepd under MODE; srun itself runs under MODE too.
step() {
    local mode=$1 c=$2
    echo "$mode" >"$OUT/mode"
    case $mode in
        callgrind) valgrind -q --tool=callgrind --callgrind-out-file="$OUT/srun.$c.%p.cg" srun -n 1 "${OPT[@]}" true ;;
        strace) strace -f -c -o "$OUT/srun.$c.strace" srun -n 1 "${OPT[@]}" true ;;
        perf) perf stat -x, -e page-faults -o "$OUT/srun.$c.perf.$3" srun -n 1 "${OPT[@]}" true ;;
    esac || { echo "FAIL: srun under $mode, setting $c"; return 1; }
    # slurmstepd writes its files when it exits, after srun returned.
    local i
    for i in $(seq 50); do
        pgrep -f "$OUT/slurmstepd.real" >/dev/null || break
        sleep 0.1
    done
    echo none >"$OUT/mode"
    mkdir -p "$OUT/$c"
    mv "$OUT"/stepd.* "$OUT/$c/" 2>/dev/null
    [[ $mode == perf ]] && for f in "$OUT/$c"/stepd.*.perf; do mv "$f" "$OUT/$c/perf.$3.$(basename "$f")"; done
    return 0
}

# ir FILE...: total instructions of callgrind files; ir_obj PATTERN FILE...: of the objects
# matching PATTERN; ir_fn FUNCTION FILE...: inclusive instructions of a function.
ir() { cat "$@" | awk '/^summary:/ {s += $2} END {print s + 0}'; }
ir_obj() {
    local pat=$1
    shift
    for f in "$@"; do callgrind_annotate --threshold=100 "$f" 2>/dev/null; done |
        awk -v pat="$pat" '/^ *[0-9,]+ .*\[/ && $NF ~ pat {n = $1; gsub(/,/, "", n); s += n} END {print s + 0}'
}
ir_fn() {
    local fn=$1
    shift
    for f in "$@"; do callgrind_annotate --inclusive=yes --threshold=100 "$f" 2>/dev/null; done |
        awk -v fn="$fn" '/^ *[0-9,]+ / && index($0, ":" fn " [") {n = $1; gsub(/,/, "", n); s += n} END {print s + 0}'
}
# calls FILE...: the system calls of strace -c summaries (the total line: % time, seconds,
# usecs/call, calls, [errors], "total").
calls() { cat "$@" | awk '$NF == "total" {s += $4} END {print s + 0}'; }
faults() {
    for f in "$@"; do [[ -f $f ]] && awk -F, '$3 == "page-faults" {print $1}' "$f"; done | sort -n |
        awk '{a[NR] = $1} END {if (NR) print a[int((NR + 1) / 2)]; else print "-"}'
}

SETTINGS=(empty trivial trivialopt unused cache)
RUNS=${PROFILE_RUNS:-9}
# Debian's perf runs only with the tools of the running kernel's release: in a root of
# another release it may not, and the fault columns then say "-".
perf stat -e page-faults true >/dev/null 2>&1 || { echo "profile: perf does not run here: no page faults counted"; RUNS=0; }
for c in "${SETTINGS[@]}"; do
    configure "$c"
    srun -n 1 "${OPT[@]}" true || { echo "FAIL: setting $c: the step failed"; e2e_dump_logs; exit 1; }
    step callgrind "$c" || exit 1
    step strace "$c" || exit 1
    for ((r = 1; r <= RUNS; r++)); do step perf "$c" "$r" || exit 1; done
done

printf '\nprofile: one `srun -n 1 true` per setting (%s); instructions in thousands\n' "$(srun --version)"
printf '%-11s | %9s %7s %7s %8s %6s | %7s %7s %6s\n' setting "srun Ir" "ld.so" plugin syscalls faults \
    "ld.so" plugin faults
for c in "${SETTINGS[@]}"; do
    plug='(map_by_device|trivial)'
    stepd_cg=("$OUT/$c"/stepd.*.cg) srun_cg=("$OUT/srun.$c".*.cg)
    printf '%-11s | %9d %7d %7d %8d %6s | %7d %7d %6s\n' "$c" \
        $(($(ir "${srun_cg[@]}") / 1000)) $(($(ir_obj ld-linux "${srun_cg[@]}") / 1000)) \
        $(($(ir_obj "$plug" "${srun_cg[@]}") / 1000)) "$(calls "$OUT/srun.$c.strace")" \
        "$(faults "$OUT/srun.$c.perf".*)" \
        $(($(ir_obj ld-linux "${stepd_cg[@]}") / 1000)) \
        $(($(ir_obj "$plug" "${stepd_cg[@]}") / 1000)) \
        "$(faults "$OUT/$c"/perf.*)"
done
printf '\nthe plugin'"'"'s hooks, inclusive instructions in thousands (srun | slurmstepd and its task)\n'
printf '%-11s | %6s %9s | %6s %9s %9s %9s\n' setting init post_opt init post_opt user_init task_init
for c in unused cache; do
    stepd_cg=("$OUT/$c"/stepd.*.cg) srun_cg=("$OUT/srun.$c".*.cg)
    printf '%-11s | %6d %9d | %6d %9d %9d %9d\n' "$c" \
        $(($(ir_fn slurm_spank_init "${srun_cg[@]}") / 1000)) \
        $(($(ir_fn slurm_spank_init_post_opt "${srun_cg[@]}") / 1000)) \
        $(($(ir_fn slurm_spank_init "${stepd_cg[@]}") / 1000)) \
        $(($(ir_fn slurm_spank_init_post_opt "${stepd_cg[@]}") / 1000)) \
        $(($(ir_fn slurm_spank_user_init "${stepd_cg[@]}") / 1000)) \
        $(($(ir_fn slurm_spank_task_init "$OUT/$c"/stepd.*.cg.*) / 1000))
done
echo "profile: done"
