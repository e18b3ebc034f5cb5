#!/usr/bin/env bash
# Hardening suite (issue 12): the plugin under load, against hostile job users, through
# faults, and with forced panics, on the same private single-node Slurm as tests/e2e/run.sh
# (lib.sh; the case helpers are cases.sh's).
#
#   tests/e2e/hardening.sh              # every case (root)
#   tests/e2e/hardening.sh load         # only the cases whose name contains "load"
#   HARDENING_STEPS=50 tests/e2e/hardening.sh load   # fewer consecutive steps (default 200)
#
# Phases:
# - load (task/affinity, 8 CPUs declared on the real 2, live discovery with slurmd's cache):
#   HARDENING_STEPS consecutive mapped steps, then 20 concurrent sruns (mapped, unmapped,
#   refused on the node, refused in srun); every outcome checked; slurmd's RSS and open file
#   descriptors and the cache directory's files printed before and after, and required flat;
#   a mapped step's planning time under a flood of 100,000 POSIX locks of another user, with
#   slurmd hidden from the job's user by a hidepid=2 /proc (issue 27), a daemonizing slurmd,
#   and slurmd in another pid namespace that shares the machine's /proc (a killed one's cache
#   must not pass for live through another process at its pid);
# - hostile users (nobody): HWLOC_* and the option's environment form at the largest size
#   execve passes, with newlines, ndev=18446744073709551616; a spec in #SBATCH and in the
#   environment form; a megabyte #SBATCH line; a NUL in a script; a world-writable cache_dir
#   with symlinks planted in it; newlines forged into slurmd.log through the option's
#   slurmstepd-side environment form, a CUDA_VISIBLE_DEVICES id and SLURMD_NODENAME
#   (GresTypes=gpu, so that the plugin reads Slurm's *_VISIBLE_DEVICES);
# - faults: slurmd restarted (and killed) while steps run; the cache truncated, replaced or
#   made unreadable between steps; topology= removed after slurmd started; devices that
#   vanish from topology= or from the cache (and, with GRES, from under Slurm's GPU list); a
#   GPU topology= still lists whose driver file is gone;
# - panics: a build with the test-hooks feature panics in each hook and in the option
#   callback; each must be an error with a message, never an abort of srun or slurmstepd.
#
# Messages are matched on the plugin's own words ("map-by-device: ..."), never on Slurm's
# prefix (`slurmstepd-NODE: error:` up to 24.11, `[timestamp] error:` on 26.05).
# Prints one line per case, then exactly "N passed, N failed"; exits 1 on any failure.

set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/e2e/lib.sh
source "$HERE/lib.sh"
# shellcheck source=tests/e2e/cases.sh
source "$HERE/cases.sh"

STEPS=${HARDENING_STEPS:-200}
CONCURRENT=20

# --- Helpers -------------------------------------------------------------------------------


# hprobe SRUN-ARGS...: srun the hardening probe; OUT sorted by task.
hprobe() {
    run srun "$@" "$HPROBE"
    OUT=$(sort <<<"$OUT")
}

# expect_live N: OUT is N tasks mapped to the live device: each told LIVE_PMIX and bound to
# CPUs inside the device's locality (LIVE_CPUS; which of them depends on the cores Slurm
# allocated).
expect_live() {
    local n=$1 t l cpus c
    (($(grep -c . <<<"$OUT") == n)) || { echo "expected $n task lines"; show; return 1; }
    for ((t = 0; t < n; t++)); do
        l=$(grep "^task=$t " <<<"$OUT")
        [[ $l == "task=$t cpus="*" CUDA_VISIBLE_DEVICES=- PMIX_DEVICE_ID=$LIVE_PMIX" ]] ||
            { echo "task $t is not mapped to $LIVE_TARGET $LIVE_PMIX"; show; return 1; }
        cpus=$(sed -n 's/.* cpus=\([^ ]*\) .*/\1/p' <<<"$l")
        [[ -n $(expand "$cpus") ]] || { echo "task $t has no CPUs"; show; return 1; }
        for c in $(expand "$cpus"); do
            [[ " $(expand "$LIVE_CPUS") " == *" $c "* ]] ||
                { echo "task $t: CPU $c is outside $LIVE_TARGET's locality $LIVE_CPUS"; show; return 1; }
        done
    done
}

# expect_unmapped: OUT is one task the plugin left alone: no variable (its CPUs are Slurm's).
expect_unmapped() {
    [[ $OUT == "task=0 cpus="*" CUDA_VISIBLE_DEVICES=- PMIX_DEVICE_ID=-" ]] && return 0
    echo "expected one unmapped task"
    show
    return 1
}

# as_nobody CMD...: CMD as the unprivileged user, with this cluster's config.
as_nobody() { runuser -u nobody -- env SLURM_CONF="$SLURM_CONF" "$@"; }

# one_line_error WORDS: ERR has exactly one line with the plugin's WORDS, it is short, and no
# line of ERR starts with text the input smuggled after a newline ("injected").
one_line_error() {
    local n
    n=$(grep -cF -- "$1" <<<"$ERR")
    ((n == 1)) || { echo "expected one line with: $1 (found $n)"; show | cut -c1-400; return 1; }
    (($(grep -F -- "$1" <<<"$ERR" | wc -c) < 800)) || { echo "the message is not short"; show | cut -c1-400; return 1; }
    ! grep -q '^injected' <<<"$ERR" || { echo "a newline of the input reached the terminal"; show; return 1; }
}

# no_abort: srun was not killed by a signal, and nothing aborted in slurmd's log since the mark.
no_abort() {
    # A shell reports a death by signal N as 128+N (srun's own "exit(-1)" is 255).
    ((RC <= 128 || RC > 128 + 64)) || { echo "srun ended by signal $((RC - 128))"; show; return 1; }
    ! grep -q "panicked at" <<<"$ERR" || { echo "Rust's panic message reached the terminal"; show; return 1; }
    if tail -n +"$((LOG_MARK + 1))" "$E2E_DIR/log/slurmd.log" | grep -Ei 'aborted|cannot unwind|core dumped|SIGABRT|SIGSEGV|signal (6|11)\b'; then
        echo "something aborted (slurmd.log above)"
        return 1
    fi
}

# footprint: slurmd's RSS (kB) and open descriptors, the cache directory's files, once no
# step is left (slurmstepd ends shortly after srun returns).
footprint() {
    local pid=${E2E_PIDS[slurmd]}
    e2e_wait_for "[[ -z \$(e2e_running_stepds) ]]" 30 || echo "(a slurmstepd is still running)"
    FOOT_RSS=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status")
    FOOT_FDS=$(find "/proc/$pid/fd" -mindepth 1 -maxdepth 1 | wc -l)
    FOOT_FILES=$(find "$CACHE_DIR" -mindepth 1 -printf '%f:%i ' | tr ' ' '\n' | sort | tr '\n' ' ')
    FOOT_CHILDREN=$(pgrep -c -P "$pid")
    # A slurmstepd left over, or a discovery child of one (it is named slurmstepd too); not
    # one that has exited and waits to be reaped.
    FOOT_STEPDS=$(e2e_running_stepds | wc -l)
}

# flat WHAT: the footprint now against FOOT_BEFORE_* (saved by mark_footprint); prints both.
mark_footprint() {
    footprint
    FOOT_BEFORE_RSS=$FOOT_RSS FOOT_BEFORE_FDS=$FOOT_FDS FOOT_BEFORE_FILES=$FOOT_FILES
}
flat() {
    footprint
    local line
    line="$1: slurmd RSS ${FOOT_BEFORE_RSS} kB -> ${FOOT_RSS} kB, open fds ${FOOT_BEFORE_FDS} -> ${FOOT_FDS},"
    line+=" cache files [${FOOT_BEFORE_FILES% }] -> [${FOOT_FILES% }], slurmd children left ${FOOT_CHILDREN},"
    line+=" slurmstepd processes left ${FOOT_STEPDS}"
    echo "$line"
    FIGURES+=("$line")
    local ok=0
    ((FOOT_FDS == FOOT_BEFORE_FDS)) || { echo "slurmd's open descriptors changed"; ok=1; }
    [[ $FOOT_FILES == "$FOOT_BEFORE_FILES" ]] || { echo "the cache directory changed"; ok=1; }
    # slurmd's own bookkeeping (credentials, job records) may take a little; a leak per step
    # would be far more over hundreds of steps.
    ((FOOT_RSS - FOOT_BEFORE_RSS < RSS_SLACK_KB)) || { echo "slurmd grew by $((FOOT_RSS - FOOT_BEFORE_RSS)) kB"; ok=1; }
    ((FOOT_CHILDREN == 0)) || { echo "slurmd has children left: $(pgrep -a -P "${E2E_PIDS[slurmd]}")"; ok=1; }
    ((FOOT_STEPDS == 0)) || { echo "slurmstepd processes left: $(e2e_running_stepds | tr '\n' ' ')"; ok=1; }
    return $ok
}
RSS_SLACK_KB=4096

# big FILE SIZE PREFIX: writes PREFIX then 'v' up to SIZE bytes into FILE (readable by nobody).
big() {
    { printf '%s' "$3"; head -c "$(($2 - ${#3}))" /dev/zero | tr '\0' v; } >"$1"
    chmod 644 "$1"
}

# --- Cases: load ---------------------------------------------------------------------------

load_setup() {
    CACHE_DIR=$E2E_DIR/cache
    LOAD_CONF=$E2E_DIR/etc/load.toml
    printf 'cache_dir = "%s"\n' "$CACHE_DIR" >"$LOAD_CONF"
    LIVE_CONF=$E2E_DIR/etc/live.toml
    printf 'cache = false\n' >"$LIVE_CONF"
    chmod 644 "$LOAD_CONF" "$LIVE_CONF"
    # slurmd's init writes the cache: in plugstack.conf before it starts.
    set_plugstack "config=$LOAD_CONF"
}

c_load_consecutive() {
    [[ -f $CACHE_DIR/topology.json ]] || { echo "slurmd wrote no cache"; return 1; }
    mark_footprint
    log_mark
    local i t0=$SECONDS bad=0
    for ((i = 1; i <= STEPS; i++)); do
        if ((i % 2)); then
            hprobe -n 1 --map-by-device="$LIVE_TARGET"
            expect_rc 0 && expect_live 1 || bad=$((bad + 1))
        else
            hprobe -n 2 --map-by-device="$LIVE_TARGET:shared"
            expect_rc 0 && expect_live 2 || bad=$((bad + 1))
        fi
        ((bad < 3)) || { echo "stopping after $i steps"; break; }
    done
    local took=$((SECONDS - t0)) used
    used=$(tail -n +"$((LOG_MARK + 1))" "$E2E_DIR/log/slurmd.log" | grep -c "topology from slurmd's cache")
    FIGURES+=("load: $STEPS consecutive mapped steps ($LIVE_TARGET, 1 and 2 tasks) in $took s, $bad failed, $used read slurmd's cache")
    echo "${FIGURES[-1]}"
    ((bad == 0)) || return 1
    ((used == STEPS)) || { echo "$used of $STEPS steps used the cache"; return 1; }
    flat "load: after $STEPS consecutive steps"
}

c_load_concurrent() {
    mark_footprint
    local dir=$E2E_DIR/work/concurrent i kind args pids=() bad=0
    rm -rf "$dir" && mkdir -p "$dir"
    local t0=$SECONDS
    for ((i = 0; i < CONCURRENT; i++)); do
        case $((i % 4)) in
            0) kind=mapped args=(-n 1 --map-by-device="$LIVE_TARGET") ;;
            1) kind=unmapped args=(-n 1) ;;
            2) kind=refused-on-node args=(-n 1 --map-by-device="$LIVE_TARGET:ndev=64") ;;
            3) kind=refused-in-srun args=(-n 1 --map-by-device="$LIVE_TARGET:bogus") ;;
        esac
        echo "$kind" >"$dir/$i.kind"
        (srun "${args[@]}" "$HPROBE" >"$dir/$i.out" 2>"$dir/$i.err"; echo $? >"$dir/$i.rc") &
        pids+=($!)
    done
    wait "${pids[@]}"
    local took=$((SECONDS - t0))
    for ((i = 0; i < CONCURRENT; i++)); do
        RC=$(<"$dir/$i.rc") OUT=$(<"$dir/$i.out") ERR=$(<"$dir/$i.err")
        case $(<"$dir/$i.kind") in
            mapped) expect_rc 0 && expect_live 1 ;;
            unmapped) expect_rc 0 && expect_unmapped ;;
            refused-on-node) expect_rc 1 && expect_err "ndev=64 asks for more $LIVE_TARGET devices per task" ;;
            refused-in-srun) expect_rc 1 && expect_err "map-by-device: invalid --map-by-device=$LIVE_TARGET:bogus" ;;
        esac || { echo "(srun $i, $(<"$dir/$i.kind"))"; bad=$((bad + 1)); }
    done
    FIGURES+=("load: $CONCURRENT concurrent sruns (5 mapped, 5 unmapped, 5 refused on the node, 5 refused in srun) in $took s, $bad unexpected")
    echo "${FIGURES[-1]}"
    ((bad == 0)) || return 1
    node_idle && flat "load: after $CONCURRENT concurrent sruns"
}

# step_side SRUN-ARGS...: runs FPROBE in one task; STEP_HWM, STEP_RSS, STEP_FDS are its
# slurmstepd's (the task's parent) peak RSS, RSS (kB) and open descriptors, once the plugin's
# user_init and task_init are done; STEP_LINKS what those descriptors are.
step_side() {
    run srun -n 1 "$@" "$FPROBE"
    expect_rc 0 || return 1
    [[ $OUT =~ ^comm=slurmstepd\ hwm=([0-9]+)\ rss=([0-9]+)\ fds=([0-9]+)\ links=(.*)$ ]] ||
        { echo "the task's parent is not a slurmstepd"; show; return 1; }
    # shellcheck disable=SC2034 # STEP_RSS: measured with the others, for a case to read
    STEP_HWM=${BASH_REMATCH[1]} STEP_RSS=${BASH_REMATCH[2]} STEP_FDS=${BASH_REMATCH[3]} STEP_LINKS=${BASH_REMATCH[4]}
}

c_load_step_footprint() {
    # The plugin's side in each step: slurmstepd's peak RSS and open descriptors with a mapping
    # from the cache, with live discovery in the step, and without the plugin's work (no spec).
    # Peak RSS: the most of 5 steps. Descriptors: the fewest (slurmstepd opens some for a moment,
    # for I/O and messages; one the plugin kept would be open in every step).
    local kind i hwm fds max_hwm min_fds line="load: slurmstepd peak RSS (VmHWM, most of 5 steps) / open fds (fewest):"
    declare -A HWM FDS LINKS
    for kind in unmapped cache live; do
        max_hwm=0 min_fds=100000
        for ((i = 0; i < 5; i++)); do
            case $kind in
                unmapped) set_plugstack "config=$LOAD_CONF"; step_side ;;
                cache) set_plugstack "config=$LOAD_CONF"; step_side --map-by-device="$LIVE_TARGET" ;;
                live) set_plugstack "config=$LIVE_CONF"; step_side --map-by-device="$LIVE_TARGET" ;;
            esac || { echo "($kind)"; return 1; }
            hwm=$STEP_HWM fds=$STEP_FDS
            ((hwm > max_hwm)) && max_hwm=$hwm
            ((fds < min_fds)) && min_fds=$fds LINKS[$kind]=$STEP_LINKS
        done
        HWM[$kind]=$max_hwm FDS[$kind]=$min_fds
        line+=" $kind ${max_hwm} kB / ${min_fds} fds,"
    done
    set_plugstack "config=$LOAD_CONF"
    FIGURES+=("${line%,}")
    echo "${FIGURES[-1]}"
    local ok=0
    # The mapping costs little memory in the step (the engine, one plan), and keeps no descriptor.
    for kind in cache live; do
        ((HWM[$kind] - HWM[unmapped] < STEP_HWM_SLACK_KB)) ||
            { echo "a $kind-mapped step's slurmstepd peaks $((HWM[$kind] - HWM[unmapped])) kB above an unmapped one"; ok=1; }
        ((FDS[$kind] == FDS[unmapped])) || {
            echo "a $kind-mapped step's slurmstepd has ${FDS[$kind]} descriptors open, an unmapped one ${FDS[unmapped]}"
            echo "  $kind: ${LINKS[$kind]}"
            echo "  unmapped: ${LINKS[unmapped]}"
            ok=1
        }
    done
    node_idle || ok=1
    return $ok
}
STEP_HWM_SLACK_KB=16384

c_load_live_discovery() {
    # Live discovery in every step (cache = false): the forked, bounded discovery under load.
    set_plugstack "config=$LIVE_CONF"
    mark_footprint
    log_mark
    local i t0=$SECONDS bad=0 n=$LIVE_STEPS dir=$E2E_DIR/work/live pids=()
    for ((i = 1; i <= n; i++)); do
        hprobe -n 1 --map-by-device="$LIVE_TARGET"
        expect_rc 0 && expect_live 1 || bad=$((bad + 1))
        ((bad < 3)) || { echo "stopping after $i steps"; break; }
    done
    rm -rf "$dir" && mkdir -p "$dir"
    for ((i = 0; i < LIVE_CONCURRENT; i++)); do
        (srun -n 1 --map-by-device="$LIVE_TARGET" "$HPROBE" >"$dir/$i.out" 2>"$dir/$i.err"; echo $? >"$dir/$i.rc") &
        pids+=($!)
    done
    wait "${pids[@]}"
    for ((i = 0; i < LIVE_CONCURRENT; i++)); do
        RC=$(<"$dir/$i.rc") OUT=$(<"$dir/$i.out") ERR=$(<"$dir/$i.err")
        expect_rc 0 && expect_live 1 || { echo "(concurrent srun $i)"; bad=$((bad + 1)); }
    done
    local took=$((SECONDS - t0)) live
    live=$(tail -n +"$((LOG_MARK + 1))" "$E2E_DIR/log/slurmd.log" | grep -c "live discovery (cache = false)")
    FIGURES+=("load: $n consecutive and $LIVE_CONCURRENT concurrent steps with live discovery (cache = false) in $took s, $bad failed, $live discovered live")
    echo "${FIGURES[-1]}"
    set_plugstack "config=$LOAD_CONF"
    ((bad == 0)) || return 1
    ((live == n + LIVE_CONCURRENT)) || { echo "$live of $((n + LIVE_CONCURRENT)) steps said they discovered the node live"; return 1; }
    node_idle && flat "load: after $((n + LIVE_CONCURRENT)) live-discovery steps"
}
LIVE_STEPS=20
LIVE_CONCURRENT=4

# slurmd_start_as CMD...: slurmd -D -N NODE started through CMD (which must exec it, so that
# $! is slurmd's pid), waited for as e2e_slurmd_start waits.
slurmd_start_as() {
    local log=$E2E_DIR/log/slurmd.log mark
    mark=$(wc -l <"$log")
    "$@" slurmd -D -N "$E2E_NODE" >>"$E2E_DIR/log/slurmd.out" 2>&1 &
    E2E_PIDS[slurmd]=$!
    e2e_wait_for "tail -n +$((mark + 1)) '$log' | grep -q 'slurmd started on'" 60 &&
        e2e_wait_for "[[ \$(sinfo -h -n $E2E_NODE -o %t) == idle ]]" 60
}

# with_hidepid CMD...: CMD in a mount namespace of its own whose /proc is mounted hidepid=2
# (Linux 5.8+: each procfs mount has its own options; the machine's /proc is not touched).
with_hidepid() { unshare -m --propagation private sh -c 'mount -t proc -o hidepid=2 proc /proc && exec "$@"' - "$@"; }

# planning_ms N SPEC: N one-task mapped steps as nobody; PLAN_MS is the planning times
# user_init logged ("planned 1 tasks for SPEC in X ms", slurmd's cache included), sorted.
planning_ms() {
    local i
    log_mark
    for ((i = 0; i < $1; i++)); do
        run as_nobody srun --chdir=/tmp -n 1 --map-by-device="$2" "$HPROBE"
        expect_rc 0 && expect_live 1 || return 1
    done
    e2e_wait_for "(( \$(tail -n +$((LOG_MARK + 1)) '$E2E_DIR/log/slurmd.log' | grep -c 'planned 1 tasks for') >= $1 ))" 10
    PLAN_MS=$(tail -n +"$((LOG_MARK + 1))" "$E2E_DIR/log/slurmd.log" |
        sed -n 's/.*map-by-device: planned 1 tasks for [^ ]* in \([0-9.]*\) ms.*/\1/p' | sort -n | tr '\n' ' ')
    USED_CACHE=$(tail -n +"$((LOG_MARK + 1))" "$E2E_DIR/log/slurmd.log" | grep -c "topology from slurmd's cache")
}

c_load_lock_flood() {
    # Another unprivileged user holds 100,000 POSIX locks (alternating bytes of one file:
    # none merge); slurmd's pid cannot prove the cache's writer alive (hidepid=2 hides slurmd
    # from the job's user, as a daemonizing slurmd's new pid would on 22.05-24.05). A mapped
    # step still plans from slurmd's cache in its usual milliseconds.
    local ok=0 flood=$E2E_DIR/work/flood before flooder
    e2e_slurmd_stop
    if ! slurmd_start_as with_hidepid; then
        e2e_slurmd_stop
        SKIPS+=("the lock flood under hidepid=2: no procfs mount with hidepid=2 in a mount namespace here")
        e2e_slurmd_start || return 1
    fi
    planning_ms 3 "$LIVE_TARGET" || ok=1
    before=$PLAN_MS
    ((USED_CACHE == 3)) || { echo "without the flood, $USED_CACHE of 3 steps used slurmd's cache"; ok=1; }
    rm -rf "$flood" && mkdir "$flood" && chown daemon "$flood" || return 1
    # 200 files of 500 locks each on alternating bytes: the kernel checks a new lock against
    # every lock of its file, so one file of 100,000 would take minutes to set up.
    runuser -u daemon -- python3 -c '
import fcntl, os, sys, time
for f in range(200):
    fd = os.open("%s/%d" % (sys.argv[1], f), os.O_RDWR | os.O_CREAT, 0o600)
    for i in range(500):
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 2 * i)
open(sys.argv[1] + "/ready", "w").write(str(os.getpid()))
time.sleep(300)' "$flood" &
    flooder=$!
    e2e_wait_for "[[ -e $flood/ready ]]" 60 || { echo "the flood did not start"; ok=1; }
    planning_ms 3 "$LIVE_TARGET" || ok=1
    # The flooder itself (runuser's child), by the pid it wrote; runuser then ends.
    [[ -s $flood/ready ]] && kill -KILL "$(<"$flood/ready")" 2>/dev/null
    wait "$flooder" 2>/dev/null
    rm -rf "$flood"
    FIGURES+=("load: a one-task mapped step's planning (hidepid=2), ms of 3 steps: ${before% } without, ${PLAN_MS% } under 100,000 locks of another user")
    echo "${FIGURES[-1]}"
    ((USED_CACHE == 3)) || { echo "under the flood, $USED_CACHE of 3 steps used slurmd's cache"; ok=1; }
    local slowest=${PLAN_MS% }
    slowest=${slowest##* }
    [[ -n $slowest ]] && ((${slowest%.*} < 500)) || { echo "planning took ${slowest:-?} ms under the flood"; ok=1; }
    e2e_slurmd_stop
    e2e_slurmd_start || return 1
    return $ok
}

c_load_daemonizing_slurmd() {
    # slurmd without -D: its init hook (and the cache) runs before it daemonizes, so the pid
    # in the cache is gone on 22.05-24.05; the lock slurmd holds survives the forks.
    local ok=0 pid
    e2e_slurmd_stop
    local mark
    mark=$(wc -l <"$E2E_DIR/log/slurmd.log")
    slurmd -N "$E2E_NODE" >>"$E2E_DIR/log/slurmd.out" 2>&1
    e2e_wait_for "[[ -s $E2E_DIR/spool/slurmd.pid ]] && tail -n +$((mark + 1)) '$E2E_DIR/log/slurmd.log' | grep -q 'slurmd started on'" 60 &&
        e2e_wait_for "[[ \$(sinfo -h -n $E2E_NODE -o %t) == idle ]]" 60 || { echo "the daemonizing slurmd did not start"; ok=1; }
    pid=$(<"$E2E_DIR/spool/slurmd.pid")
    E2E_PIDS[slurmd]=$pid
    planning_ms 2 "$LIVE_TARGET" || ok=1
    FIGURES+=("load: a daemonizing slurmd (pid $pid): ${USED_CACHE} of 2 steps used its cache, planning ms ${PLAN_MS% }")
    echo "${FIGURES[-1]}"
    ((USED_CACHE == 2)) || { echo "$USED_CACHE of 2 steps used the daemonized slurmd's cache"; ok=1; }
    e2e_slurmd_stop
    e2e_slurmd_start || return 1
    return $ok
}

c_load_pid_namespace() {
    # slurmd in a pid namespace of its own that still sees the machine's /proc (a container
    # sharing the host's /proc; unshare --pid without --mount-proc): slurmd is pid 1 to itself,
    # but /proc/1 in the /proc it and its steps read is another process, which outlives it. The
    # steps must trust the cache of the live slurmd (its lock) and plan in their usual
    # milliseconds, and must not trust the cache of one killed there: a cache that recorded
    # getpid() (1) with /proc/1's start time named that other process, and was taken for live.
    local ok=0 ns_pid pid recorded before mark log=$E2E_DIR/log/slurmd.log
    planning_ms 3 "$LIVE_TARGET" || ok=1
    before=$PLAN_MS
    e2e_slurmd_stop
    mark=$(wc -l <"$log")
    unshare --pid --fork slurmd -D -N "$E2E_NODE" >>"$E2E_DIR/log/slurmd.out" 2>&1 &
    ns_pid=$!
    if ! e2e_wait_for "pgrep -P $ns_pid -x slurmd >/dev/null" 30; then
        SKIPS+=("slurmd in another pid namespace: unshare --pid --fork cannot start it here")
        wait "$ns_pid" 2>/dev/null
        e2e_slurmd_start || return 1
        return 0
    fi
    # Stopped by its pid on this side (slurmd handles TERM, so pid 1 of its namespace takes it).
    pid=$(pgrep -P "$ns_pid" -x slurmd)
    E2E_PIDS[slurmd]=$pid
    e2e_wait_for "tail -n +$((mark + 1)) '$log' | grep -q 'slurmd started on'" 60 &&
        e2e_wait_for "[[ \$(sinfo -h -n $E2E_NODE -o %t) == idle ]]" 60 || { echo "slurmd did not start in its pid namespace"; ok=1; }
    planning_ms 3 "$LIVE_TARGET" || ok=1
    recorded=$(tail -n +"$((LOG_MARK + 1))" "$log" | sed -n "s/.*topology from slurmd's cache [^ ]* (written by pid \([0-9]*\) .*/\1/p" | head -n 1)
    FIGURES+=("load: slurmd in another pid namespace sharing the machine's /proc (pid $pid there, recorded as ${recorded:-?}): $USED_CACHE of 3 steps used its cache, planning ms ${PLAN_MS% } (${before% } with slurmd in the machine's)")
    echo "${FIGURES[-1]}"
    ((USED_CACHE == 3)) || { echo "$USED_CACHE of 3 steps used the cache of slurmd in its pid namespace"; ok=1; }
    # The cache names slurmd as the /proc its steps read names it, not by getpid() (1).
    [[ -n $recorded && /proc/$recorded -ef /proc/$pid ]] ||
        { echo "the cache names pid ${recorded:-?}, which in the steps' /proc is not slurmd ($pid)"; ok=1; }
    local slowest=${PLAN_MS% }
    slowest=${slowest##* }
    [[ -n $slowest ]] && ((${slowest%.*} < 500)) || { echo "planning took ${slowest:-?} ms"; ok=1; }
    # Killed there (no slurmd_exit: the cache stays, its lock goes), then a slurmd that writes
    # no cache of its own there: the steps must not take the stale cache for a live one.
    kill -KILL "$pid" 2>/dev/null
    wait "$ns_pid" 2>/dev/null
    unset "E2E_PIDS[slurmd]"
    [[ -f $CACHE_DIR/topology.json ]] || { echo "the killed slurmd's cache is gone"; ok=1; }
    set_plugstack "config=$LIVE_CONF"
    e2e_slurmd_start || return 1
    set_plugstack "config=$LOAD_CONF"
    log_mark
    hprobe -n 1 --map-by-device="$LIVE_TARGET"
    expect_rc 0 && expect_live 1 || ok=1
    log_has "cache $CACHE_DIR/topology.json not used: no running slurmd holds it" || ok=1
    e2e_slurmd_stop
    e2e_slurmd_start || return 1
    return $ok
}

# --- Cases: hostile job users (as nobody) ------------------------------------------------------

hostile_setup() {
    load_setup
    NOCACHE_CONF=$E2E_DIR/etc/nocache.toml
    printf 'cache = false\n' >"$NOCACHE_CONF"
    chmod 644 "$NOCACHE_CONF"
    # The largest environment string execve takes is 128 kB (MAX_ARG_STRLEN) with its name.
    BIG=$E2E_DIR/work/big-value
    big "$BIG" $((131072 - 64)) "$FIX_SNC:"
    BIG_SPEC=$E2E_DIR/work/big-spec
    big "$BIG_SPEC" $((131072 - 64)) "gpu:"
}

# hostile_env_run SRUN-ARGS...: as nobody, with every HWLOC_* variable set to VALUE_FILE's
# contents (read inside, so that 128 kB stay off the printed command line).
hostile_env_run() {
    local value_file=$1
    shift
    run runuser -u nobody -- env SLURM_CONF="$SLURM_CONF" bash -c '
        v=$(<"$1"); shift
        export HWLOC_XMLFILE=$v HWLOC_COMPONENTS=$v HWLOC_FSROOT=$v HWLOC_THISSYSTEM=$v HWLOC_PLUGINS_PATH=$v
        exec srun --chdir=/tmp "$@"' - "$value_file" "$@"
    OUT=$(sort <<<"$OUT")
}

c_hostile_hwloc_env() {
    local nl=$E2E_DIR/work/nl-value v
    printf 'xml\ninjected: %s' "$FIX_SNC" >"$nl" && chmod 644 "$nl"
    for v in "$BIG" "$nl"; do
        # Live discovery through slurmd's cache, live discovery in the step, the admin's XML:
        # each maps as if the job had set nothing.
        set_plugstack "config=$LOAD_CONF"
        hostile_env_run "$v" -n 1 --map-by-device="$LIVE_TARGET" "$HPROBE"
        expect_rc 0 && expect_live 1 || { echo "(cache, $v)"; return 1; }
        set_plugstack "config=$NOCACHE_CONF"
        hostile_env_run "$v" -n 1 --map-by-device="$LIVE_TARGET" "$HPROBE"
        expect_rc 0 && expect_live 1 || { echo "(live in the step, $v)"; return 1; }
        set_plugstack "topology=$FIX"
        hostile_env_run "$v" -n 2 --map-by-device=gpu "$PROBE"
        expect_rc 0 && expect_out "$GPU_LINES" || { echo "(topology=, $v)"; return 1; }
    done
    # A megabyte does not reach Slurm at all: the kernel refuses the exec (E2BIG).
    local mb=$E2E_DIR/work/mb-value
    big "$mb" 1048576 ""
    hostile_env_run "$mb" -n 1 true
    expect_rc 126 && expect_err "Argument list too long" || return 1
    set_plugstack "config=$LOAD_CONF"
    node_idle
}

c_hostile_option_env() {
    set_plugstack "config=$LOAD_CONF"
    local before
    before=$(job_count)
    run runuser -u nobody -- env SLURM_CONF="$SLURM_CONF" bash -c \
        "$OPTION_ENV=\$(<\"\$1\") exec srun --chdir=/tmp -n 1 true" - "$BIG_SPEC"
    expect_rc 1 && one_line_error "is longer than 1024 bytes" || return 1
    run as_nobody env "$OPTION_ENV=gpu:verbose"$'\n'"injected: 1" srun --chdir=/tmp -n 1 true
    expect_rc 1 && one_line_error 'invalid --map-by-device="gpu:verbose\ninjected: 1"' || return 1
    run as_nobody env "$OPTION_ENV=gpu:ndev=18446744073709551616" srun --chdir=/tmp -n 1 true
    expect_rc 1 && one_line_error 'bad value "18446744073709551616" for ndev: expected a whole number from 1 to 65536' ||
        return 1
    # The same values on the command line.
    run runuser -u nobody -- env SLURM_CONF="$SLURM_CONF" bash -c \
        'exec srun --chdir=/tmp -n 1 --map-by-device="$(<"$1")" true' - "$BIG_SPEC"
    expect_rc 1 && one_line_error "is longer than 1024 bytes" || return 1
    run as_nobody srun --chdir=/tmp -n 1 --map-by-device=$'gpu\ninjected: 1' true
    expect_rc 1 && one_line_error 'invalid --map-by-device="gpu\ninjected: 1"' || return 1
    [[ $(job_count) == "$before" ]] || { echo "a refused submission created a job"; return 1; }
    node_idle && hprobe -n 1 --map-by-device="$LIVE_TARGET" && expect_rc 0 && expect_live 1
}

c_hostile_sbatch_lines() {
    set_plugstack "config=$LOAD_CONF"
    local w=$E2E_DIR/work before
    before=$(job_count)
    # A megabyte #SBATCH line: refused by sbatch, quoted in 60 characters.
    { printf '#!/bin/bash\n#SBATCH --map-by-device=gpu:'; head -c 1048576 /dev/zero | tr '\0' v; printf '\ntrue\n'; } >"$w/mb.sh"
    chmod 644 "$w/mb.sh"
    run as_nobody sbatch --chdir=/tmp "$w/mb.sh"
    expect_rc 1 && one_line_error "is longer than 1024 bytes" || return 1
    # A NUL byte in the script: Slurm refuses the script itself before the plugin sees it
    # (its own words, which differ between releases).
    printf '#!/bin/bash\n#SBATCH --map-by-device=gpu\0:bogus\ntrue\n' >"$w/nul.sh"
    chmod 644 "$w/nul.sh"
    run as_nobody sbatch --chdir=/tmp "$w/nul.sh"
    expect_rc 1 && expect_no_err "map-by-device" || return 1
    [[ $(job_count) == "$before" ]] || { echo "a refused submission created a job"; return 1; }
    node_idle && hprobe -n 1 --map-by-device="$LIVE_TARGET" && expect_rc 0 && expect_live 1
}

c_hostile_both_forms() {
    # Slurm's precedence (sbatch(1)): the environment overrides #SBATCH lines, the command
    # line overrides both. The plugin sees one value, the winner's, and checks it.
    set_plugstack "topology=$FIX"
    local w=$E2E_DIR/work
    both_forms() { # SBATCH-SPEC ENV-SPEC OUTFILE
        printf '#!/bin/bash\n#SBATCH --map-by-device=%s\n#SBATCH -n 2\n#SBATCH --output=%s\nsrun %s | sort\n' \
            "$1" "$3" "$PROBE" >"$w/both.sh"
        chmod 644 "$w/both.sh"
        rm -f "$3"
        run as_nobody env "$OPTION_ENV=$2" sbatch --wait --chdir=/tmp "$w/both.sh"
    }
    both_forms gpu network "$w/both1.out"
    expect_rc 0 || return 1
    OUT=$(<"$w/both1.out") && expect_out "$NET_LINES" || return 1
    # A bad #SBATCH value replaced by a good environment form is never used, nor checked.
    both_forms gpu:bogus network "$w/both2.out"
    expect_rc 0 || return 1
    OUT=$(<"$w/both2.out") && expect_out "$NET_LINES" || return 1
    # A bad environment form is refused even when #SBATCH is good.
    both_forms network gpu:bogus "$w/both3.out"
    expect_rc 1 && one_line_error 'invalid --map-by-device=gpu:bogus: unknown qualifier "bogus"' || return 1
    # srun: the command line wins over the environment form.
    run as_nobody env "$OPTION_ENV=network" srun --chdir=/tmp -n 2 --map-by-device=gpu "$PROBE"
    OUT=$(sort <<<"$OUT")
    expect_rc 0 && expect_out "$GPU_LINES" && node_idle
}

c_hostile_world_writable_cache_dir() {
    # The admin put cache_dir in a world-writable (sticky) directory of root's; a user plants
    # symlinks named like the cache's files, pointing at a file root must not touch.
    local ww=$E2E_DIR/wwcache victim=$E2E_DIR/victim-file conf=$E2E_DIR/etc/ww.toml ok=0
    mkdir -p "$ww" && chmod 1777 "$ww" && echo precious >"$victim" && chmod 644 "$victim" || return 1
    runuser -u nobody -- ln -s "$victim" "$ww/topology.json" || return 1
    runuser -u nobody -- ln -s "$victim" "$ww/topology.lock" || return 1
    printf 'cache_dir = "%s"\n' "$ww" >"$conf" && chmod 644 "$conf"
    set_plugstack "config=$conf"
    e2e_slurmd_stop
    log_mark
    e2e_slurmd_start || return 1
    log_has "cache_dir: the directory $ww is writable by group or others (mode 1777)" || ok=1
    [[ $(cat "$victim") == precious && $(stat -c '%U %a' "$victim") == "root 644" ]] ||
        { echo "root changed the symlinks' target: $(stat -c '%U %a' "$victim")"; ok=1; }
    [[ -L $ww/topology.json && -L $ww/topology.lock ]] || { echo "root removed the user's symlinks"; ok=1; }
    # Steps do not trust it either, discover the node and map.
    log_mark
    run as_nobody srun --chdir=/tmp -n 1 --map-by-device="$LIVE_TARGET" "$HPROBE"
    expect_rc 0 && expect_live 1 || ok=1
    log_has "the directory $ww is writable by group or others (mode 1777)" || ok=1
    run cargo run --quiet --manifest-path "$E2E_ROOT/Cargo.toml" --bin map-by-device -- check --config "$conf"
    expect_out_has "the directory $ww is writable by group or others (mode 1777)" || ok=1
    rm -rf "$ww" "$victim"
    set_plugstack "config=$LOAD_CONF"
    e2e_slurmd_stop && e2e_slurmd_start && node_idle || return 1
    hprobe -n 1 --map-by-device="$LIVE_TARGET"
    expect_rc 0 && expect_live 1 || ok=1
    return $ok
}

# --- Case: a user's libraries in the job's directory (issue 38) ------------------------------------

# Relative entries of slurmd's LD_LIBRARY_PATH ("." here, as an admin's /etc/default/slurmd
# might say) name each process's working directory; a step's slurmstepd works in the job's
# directory with real and saved uid 0. Before issue 38 a mapped step's discovery child loaded
# hwloc's OpenCL plugin there, with the job's libOpenCL.so.1, and regained root; and the
# plugin's own dlopen of its discovery library looks for its libgcc_s.so.1 the same way, inside
# slurmstepd itself.
USER_LIB_PATH=/usr/local/lib:.

# plant_library DIR SONAME LOADER VERSION_PREFIX: DIR/SONAME, built here, that LOADER (a
# library that links SONAME) accepts: every symbol LOADER takes from it with a VERSION_PREFIX*
# version (stubs that abort), those versions, and a constructor that forks a child which
# tries setresuid(0, 0, 0) and appends what it found to DIR/record. Fails when LOADER takes
# no such symbol.
plant_library() {
    local dir=$1 soname=$2 loader=$3 prefix=$4 src
    src=$(mktemp -d) || return 1
    objdump -T "$loader" | awk -v p="($prefix" '$3 == "*UND*" && index($5, p) == 1 {
        v = substr($5, 2, length($5) - 2); print v, $6 }' | sort -u >"$src/symbols"
    [[ -s $src/symbols ]] || { echo "$loader takes no $prefix* symbol"; rm -rf "$src"; return 1; }
    {
        echo '#define _GNU_SOURCE'
        echo '#include <stdio.h>'
        echo '#include <stdlib.h>'
        echo '#include <unistd.h>'
        echo '#include <sys/wait.h>'
        echo "__attribute__((constructor)) static void grab(void) {"
        echo '    uid_t r, e, s, r2, e2, s2; char cwd[4096] = "?", comm[64] = "?"; FILE *c;'
        echo '    getresuid(&r, &e, &s);'
        echo '    if (!getcwd(cwd, sizeof cwd)) cwd[0] = 0;'
        echo '    if ((c = fopen("/proc/self/comm", "r"))) { if (fscanf(c, "%63s", comm) != 1) comm[0] = 0; fclose(c); }'
        echo '    pid_t child = fork();'
        echo '    if (child == 0) {'
        echo '        int rc = setresuid(0, 0, 0);'
        echo '        getresuid(&r2, &e2, &s2);'
        echo "        FILE *f = fopen(\"$dir/record\", \"a\");"
        echo "        if (f) { fprintf(f, \"lib=$soname comm=%s uids=%u/%u/%u setresuid0=%s after=%u/%u/%u cwd=%s\\n\","
        echo '            comm, r, e, s, rc == 0 ? "ok" : "refused", r2, e2, s2, cwd); fclose(f); }'
        echo '        _exit(0);'
        echo '    }'
        echo '    if (child > 0) waitpid(child, NULL, 0);'
        echo '}'
        awk '{ print "void " $2 "(void) { abort(); }" }' "$src/symbols"
    } >"$src/lib.c"
    awk '{ syms[$1] = syms[$1] " " $2 ";" } END { first = 1
        for (v in syms) { printf "%s {\n  global:%s\n%s};\n", v, syms[v], first ? "  local: *;\n" : ""; first = 0 } }' \
        "$src/symbols" >"$src/lib.map"
    gcc -shared -fPIC -o "$dir/$soname" -Wl,-soname,"$soname" -Wl,--version-script="$src/lib.map" "$src/lib.c" ||
        { echo "cannot build $soname"; rm -rf "$src"; return 1; }
    rm -rf "$src"
    chown nobody "$dir/$soname"
}

# record_lines DIR: what the planted libraries recorded (one line per load).
record_lines() { cat "$1/record" 2>/dev/null; }

c_hostile_user_libraries() {
    local ok=0 dir discover hwloc plugins opencl nobody_ids control step_lines pid child parent go
    local uid gid
    uid=$(id -u nobody) gid=$(id -g nobody)
    nobody_ids="$uid/$uid/$uid"
    dir=$(runuser -u nobody -- mktemp -d /tmp/mbd-userlib.XXXXXX) || return 1
    discover=$(dirname "$E2E_PLUGIN")/map_by_device_discover.so
    hwloc=$(objdump -p "$discover" | awk '$1 == "NEEDED" && $2 ~ /^libhwloc/ { print $2 }')
    plugins=$(pkg-config --variable=libdir hwloc 2>/dev/null)/hwloc
    opencl=$plugins/hwloc_opencl.so
    [[ -f $opencl ]] || opencl=$(find /usr/lib* -name hwloc_opencl.so -print -quit 2>/dev/null)
    [[ -n $opencl && -f $opencl ]] || { echo "no hwloc_opencl.so here (libhwloc-plugins)"; return 1; }
    # The job's user builds (here: root builds for them) a libOpenCL.so.1 that hwloc's OpenCL
    # plugin accepts and a libgcc_s.so.1 that the discovery library accepts.
    plant_library "$dir" libOpenCL.so.1 "$opencl" OPENCL_ || return 1
    plant_library "$dir" libgcc_s.so.1 "$discover" GCC_ || return 1
    # The control: the same lookups as the user, from that directory, with that path: hwloc's
    # plugins (as the old discovery child did) and the discovery library (as the plugin's
    # dlopen in slurmstepd) load the user's libraries. It runs as the user, so they record
    # the user's ids and a refused setresuid.
    runuser -u nobody -- env LD_LIBRARY_PATH="$USER_LIB_PATH" bash -c 'cd "$1" && exec python3 -c "
import ctypes, sys
ctypes.CDLL(sys.argv[1])
hwloc = ctypes.CDLL(sys.argv[2], mode=ctypes.RTLD_GLOBAL)
topology = ctypes.c_void_p()
hwloc.hwloc_topology_init(ctypes.byref(topology))
" "$2" "$3"' - "$dir" "$discover" "$hwloc" || { echo "the control could not run"; ok=1; }
    control=$(record_lines "$dir")
    echo "control (as nobody, from $dir):"
    sed 's/^/  /' <<<"$control"
    local lib
    for lib in libOpenCL.so.1 libgcc_s.so.1; do
        grep -qxF "lib=$lib comm=python3 uids=$nobody_ids setresuid0=refused after=$nobody_ids cwd=$dir" <<<"$control" ||
            { echo "the control did not load the planted $lib: the case would prove nothing"; ok=1; }
    done
    ((ok == 0)) || { rm -rf "$dir"; return 1; }

    # slurmd (and so every slurmstepd) with the relative entry; steps in the user's directory.
    e2e_slurmd_stop
    set_plugstack "config=$NOCACHE_CONF"
    LD_LIBRARY_PATH=$USER_LIB_PATH e2e_slurmd_start || return 1
    tr '\0' '\n' <"/proc/${E2E_PIDS[slurmd]}/environ" | grep -qxF "LD_LIBRARY_PATH=$USER_LIB_PATH" ||
        { echo "slurmd does not run with LD_LIBRARY_PATH=$USER_LIB_PATH"; ok=1; }
    # cache = false: live discovery in the step.
    log_mark
    run as_nobody srun --chdir="$dir" -n 1 --map-by-device="$LIVE_TARGET" "$HPROBE"
    expect_rc 0 && expect_live 1 && log_has "live discovery (cache = false)" || { echo "(cache = false)"; ok=1; }
    # topology=: the XML is read by hwloc in the same kind of child.
    set_plugstack "topology=$FIX"
    run as_nobody srun --chdir="$dir" -n 2 --map-by-device=gpu "$PROBE"
    OUT=$("${PROBE_SORT[@]}" <<<"$OUT")
    expect_rc 0 && expect_out "$GPU_LINES" || { echo "(topology=)"; ok=1; }
    # A refused cache: slurmd writes it, then the plugin's .so is replaced by rename (as an
    # upgrade does): the steps discover live until slurmd restarts.
    set_plugstack "config=$LOAD_CONF"
    e2e_slurmd_stop
    LD_LIBRARY_PATH=$USER_LIB_PATH e2e_slurmd_start || return 1
    e2e_install_plugin "$E2E_PLUGIN_BUILT"
    log_mark
    run as_nobody srun --chdir="$dir" -n 1 --map-by-device="$LIVE_TARGET" "$HPROBE"
    expect_rc 0 && expect_live 1 || { echo "(a refused cache)"; ok=1; }
    log_has "written by another build of the plugin" && log_has "discovering the node live" || ok=1
    # check says both: the relative entry (a problem) and the upgrade's window (a note).
    run cargo run --quiet --manifest-path "$E2E_ROOT/Cargo.toml" --bin map-by-device -- check --plugstack "$E2E_DIR/etc/plugstack.conf"
    expect_out_has "slurmd (pid ${E2E_PIDS[slurmd]}) runs with LD_LIBRARY_PATH=\"$USER_LIB_PATH\", whose entry \".\" is relative" || ok=1
    expect_out_has "was written by another build of the plugin (its .so was replaced since slurmd started" || ok=1
    ((RC == 1)) || { echo "check says the node is ready (exit $RC)"; ok=1; }

    # The discovery child's ids, seen from outside while it waits (a test-hooks build pauses
    # it before hwloc runs): the job's user's real, effective and saved ids, in /, while its
    # parent slurmstepd has root within reach, in the job's directory.
    build_hooks_plugin || return 1
    e2e_slurmd_stop
    e2e_install_plugin "$HOOKS_PLUGIN"
    set_plugstack "config=$NOCACHE_CONF"
    go=$dir/go
    MBD_TEST_PAUSE_AT=live-discovery MBD_TEST_PAUSE_FILE=$go LD_LIBRARY_PATH=$USER_LIB_PATH e2e_slurmd_start || return 1
    local w=$E2E_DIR/work/userlib
    (as_nobody srun --chdir="$dir" -n 1 --map-by-device="$LIVE_TARGET" "$HPROBE" >"$w.out" 2>"$w.err"; echo $? >"$w.rc") &
    local srun_pid=$!
    if e2e_wait_for "[[ -e $go.reached ]]" 30; then
        for pid in $(pgrep -x slurmstepd); do
            [[ $(awk '/^Uid:/ {print $2}' "/proc/$pid/status" 2>/dev/null) == "$uid" ]] && child=$pid
        done
        if [[ -n ${child:-} ]]; then
            parent=$(awk '/^PPid:/ {print $2}' "/proc/$child/status")
            local ids
            ids="child: $(grep -E '^(Uid|Gid|Groups):' "/proc/$child/status" | tr -s '\t\n' '  ')cwd $(readlink "/proc/$child/cwd");"
            ids+=" its slurmstepd: $(grep -E '^Uid:' "/proc/$parent/status" | tr -s '\t' ' ') cwd $(readlink "/proc/$parent/cwd")"
            echo "$ids"
            FIGURES+=("hostile: a step's discovery child (test-hooks pause): $ids")
            grep -qxP "Uid:\t$uid\t$uid\t$uid\t$uid" "/proc/$child/status" ||
                { echo "the child's uids are not the user's alone"; ok=1; }
            grep -qxP "Gid:\t$gid\t$gid\t$gid\t$gid" "/proc/$child/status" ||
                { echo "the child's gids are not the user's alone"; ok=1; }
            [[ $(readlink "/proc/$child/cwd") == / ]] || { echo "the child does not work in /"; ok=1; }
            grep -qxP "Uid:\t0\t$uid\t0\t$uid" "/proc/$parent/status" ||
                { echo "the parent is not the slurmstepd this case is about"; ok=1; }
            [[ $(readlink "/proc/$parent/cwd") == "$dir" ]] || { echo "the step's slurmstepd is not in the job's directory"; ok=1; }
        else
            echo "no discovery child of the user's found"; ok=1
        fi
    else
        echo "the step's discovery never paused"; ok=1
    fi
    touch "$go"
    wait "$srun_pid"
    RC=$(<"$w.rc") OUT=$(sort <"$w.out") ERR=$(<"$w.err")
    expect_rc 0 && expect_live 1 || { echo "(the paused step)"; ok=1; }

    # Nothing of the user's directory was loaded by a step: the record holds the control's
    # lines only (and any line there is must show the user's ids and a refused setresuid).
    step_lines=$(grep -vxF -f <(printf '%s\n' "$control") <(record_lines "$dir"))
    if [[ -n $step_lines ]]; then
        echo "the steps loaded the user's libraries:"
        sed 's/^/  /' <<<"$step_lines"
        ok=1
    fi
    if grep -v " uids=$nobody_ids setresuid0=refused after=$nobody_ids " <(record_lines "$dir"); then
        echo "a library of the user's ran with root within reach (above)"
        ok=1
    fi
    FIGURES+=("hostile: user libraries in the job's directory, LD_LIBRARY_PATH=$USER_LIB_PATH: the control loaded $(grep -c . <<<"$control"), the steps (cache = false, topology=, a refused cache, paused) $(grep -c . <<<"$step_lines")")
    echo "${FIGURES[-1]}"
    e2e_slurmd_stop
    e2e_install_plugin "$E2E_PLUGIN_BUILT"
    set_plugstack "config=$LOAD_CONF"
    rm -rf "$dir" "$w".*
    e2e_slurmd_start && node_idle || return 1
    return $ok
}

# --- Cases: forged log lines (as nobody; GresTypes=gpu, so Slurm's *_VISIBLE_DEVICES are read) --

forge_setup() {
    set_plugstack "topology=$FIX"
    FORGE_CONF=$E2E_DIR/etc/forge.toml
    printf 'require_step_gpus = true\n' >"$FORGE_CONF" && chmod 644 "$FORGE_CONF"
    # Every GPU of the node is a step's (as where Slurm does not manage them), so that the
    # job's own CUDA_VISIBLE_DEVICES is read where gres/gpu runs but the step has no GPU.
    FORGE_ALL_CONF=$E2E_DIR/etc/forge-all.toml
    printf 'require_step_gpus = false\n' >"$FORGE_ALL_CONF" && chmod 644 "$FORGE_ALL_CONF"
    FORGE_BIG=$E2E_DIR/work/forge-big
    big "$FORGE_BIG" $((131072 - 64)) "gpu:"
}

# no_forged_line MARKER: no line of slurmd.log since the mark, nor of ERR, holds MARKER except
# after the plugin's own prefix on the same line (a newline of the job's value would start a
# line of its own: "[2026-...] error: MARKER ...").
no_forged_line() {
    local forged
    forged=$({
        tail -n +"$((LOG_MARK + 1))" "$E2E_DIR/log/slurmd.log"
        printf '%s\n' "$ERR"
    } | grep -F -- "$1" | grep -vF 'map-by-device: ')
    [[ -z $forged ]] && return 0
    echo "a forged line reached slurmd.log or the terminal:"
    printf '%s\n' "$forged" | cut -c1-300
    return 1
}

# A forged line as slurmd would write it: Slurm's timestamp and level, then MARKER's words.
forgery() { printf '\n[2026-12-04T15:00:00.000] error: %s: security violation: node %s drained by admin' "$1" "$E2E_NODE"; }

c_hostile_forged_log_lines() {
    local ok=0 before after
    # 1. The option's value through slurmstepd's own environment form, which srun ignores and
    #    hands on unchecked: the step's refusal quotes it.
    log_mark
    run as_nobody env "_SLURM_SPANK_OPTION_map_by_device_map_by_device=gpu:bogus$(forgery FORGED-BY-OPTION)" \
        srun --chdir=/tmp -n 1 true
    expect_rc 1 && log_has 'invalid --map-by-device="gpu:bogus\n[2026-12-04T15:00:00.000] error: FORGED' &&
        no_forged_line FORGED-BY-OPTION || { echo "(option's environment form)"; ok=1; }
    # 2. An id in CUDA_VISIBLE_DEVICES, which the plugin reads as Slurm's where gres/gpu runs:
    #    the job's own value when the step has no GPU and require_step_gpus = false lets it
    #    map the node's (unset, such a step has no GPU and nothing is read).
    set_plugstack "topology=$FIX config=$FORGE_ALL_CONF"
    log_mark
    run as_nobody env "CUDA_VISIBLE_DEVICES=GPU-0$(forgery FORGED-BY-ID)" srun --chdir=/tmp -n 1 --map-by-device=gpu true
    if ((RC == 0)); then
        # A release that clears the job's own value for a step without GPUs (22.05 keeps it):
        # no vector there, and still no forged line.
        NOTES+=("Slurm $SLURM_VERSION did not hand the job's CUDA_VISIBLE_DEVICES to a step without GPUs")
        no_forged_line FORGED-BY-ID || { echo "(CUDA_VISIBLE_DEVICES)"; ok=1; }
    else
        # The id is quoted as text::excerpt shows a value from the job: escaped and bounded.
        expect_rc 1 && log_has 'Slurm gave the step GPU "GPU-0\n[2026-12-04T15:00:00.000] error: FORGED-BY-ID' &&
            no_forged_line FORGED-BY-ID || { echo "(CUDA_VISIBLE_DEVICES)"; ok=1; }
    fi
    # 3. The job's SLURMD_NODENAME is not the node's name: a refusal names the host.
    set_plugstack "topology=$FIX config=$FORGE_CONF"
    log_mark
    run as_nobody env "SLURMD_NODENAME=x$(forgery FORGED-BY-NODENAME)" srun --chdir=/tmp -n 1 --map-by-device=gpu true
    expect_rc 1 && log_has "the step has no GPUs on $(hostname) (Slurm set no SLURM_STEP_GPUS)" &&
        no_forged_line FORGED-BY-NODENAME || { echo "(SLURMD_NODENAME)"; ok=1; }
    set_plugstack "topology=$FIX"
    # 4. 128 kB of spec in the environment form: the step's lines stay short.
    log_mark
    before=$(stat -c %s "$E2E_DIR/log/slurmd.log")
    run runuser -u nobody -- env SLURM_CONF="$SLURM_CONF" bash -c \
        '_SLURM_SPANK_OPTION_map_by_device_map_by_device=$(<"$1") exec srun --chdir=/tmp -n 1 true' - "$FORGE_BIG"
    expect_rc 1 && log_has "is longer than 1024 bytes" || { echo "(128 kB spec)"; ok=1; }
    after=$(stat -c %s "$E2E_DIR/log/slurmd.log")
    FIGURES+=("forged lines: a step refused for a 128 kB spec added $((after - before)) bytes to slurmd.log")
    echo "${FIGURES[-1]}"
    ((after - before < 16384)) || { echo "the step's log is not bounded"; ok=1; }
    node_idle || ok=1
    return $ok
}

# --- Cases: faults -------------------------------------------------------------------------------

fault_setup() {
    load_setup
    CACHE_FILE=$CACHE_DIR/topology.json
}

c_fault_slurmd_restart() {
    set_plugstack "config=$LOAD_CONF"
    local w=$E2E_DIR/work/restart ok=0 how
    mkdir -p "$w"
    for how in stop kill; do
        rm -f "$w"/*
        # Two steps that outlive slurmd: one from the cache, one from topology= (a job's
        # own plugstack line is read when it starts).
        srun -n 1 --map-by-device="$LIVE_TARGET" bash -c "$HPROBE; sleep 8" >"$w/a.out" 2>"$w/a.err" &
        local a=$!
        e2e_wait_for "[[ -s '$w/a.out' ]]" 30 || { echo "the first step did not start"; ok=1; }
        if [[ $how == stop ]]; then e2e_slurmd_stop; else
            kill -KILL "${E2E_PIDS[slurmd]}"
            wait "${E2E_PIDS[slurmd]}" 2>/dev/null
            unset "E2E_PIDS[slurmd]"
        fi
        log_mark
        e2e_slurmd_start || return 1
        wait "$a"
        RC=$? OUT=$(<"$w/a.out") ERR=$(<"$w/a.err")
        expect_rc 0 && expect_live 1 || { echo "(the step that ran while slurmd was ${how}ped)"; ok=1; }
        # The new slurmd rewrote the cache; the next step reads it.
        [[ $(jq -r .writer_pid "$CACHE_FILE" 2>/dev/null) == "${E2E_PIDS[slurmd]}" ]] ||
            { echo "the restarted slurmd did not rewrite the cache ($how)"; ok=1; }
        log_mark
        hprobe -n 1 --map-by-device="$LIVE_TARGET"
        expect_rc 0 && expect_live 1 && log_has "topology from slurmd's cache $CACHE_FILE" || ok=1
    done
    node_idle || ok=1
    return $ok
}

# spoil WHAT SETUP UNDO: SETUP spoils the cache between steps; the next step (as nobody)
# must say WHAT in slurmd.log, discover the node live and map; UNDO restores the cache and
# the step after that reads it again.
spoil() {
    local what=$1 setup=$2 undo=$3
    cp -p "$CACHE_FILE" "$E2E_DIR/work/cache.saved"
    eval "$setup"
    log_mark
    run as_nobody srun --chdir=/tmp -n 1 --map-by-device="$LIVE_TARGET" "$HPROBE"
    local rc=$RC saved_out=$OUT err=$ERR
    eval "$undo"
    RC=$rc OUT=$saved_out ERR=$err
    expect_rc 0 && expect_live 1 || { echo "(after: $setup)"; return 1; }
    log_has "$what" && log_has "discovering the node live" || { echo "(after: $setup)"; return 1; }
    log_mark
    hprobe -n 1 --map-by-device="$LIVE_TARGET"
    expect_rc 0 && expect_live 1 && log_has "topology from slurmd's cache $CACHE_FILE"
}

c_fault_cache_spoiled() {
    set_plugstack "config=$LOAD_CONF"
    local saved=$E2E_DIR/work/cache.saved
    # Truncated in place (the same file, slurmd's lock still held).
    spoil "not a cache this plugin can read (EOF while parsing" \
        "truncate -s 100 '$CACHE_FILE'" "cat '$saved' >'$CACHE_FILE'" || return 1
    # Replaced by another file: garbage, then a copy of a stopped slurmd's cache.
    spoil "not a cache this plugin can read (expected value" \
        "printf 'garbage' >'$CACHE_FILE.new' && chmod 644 '$CACHE_FILE.new' && mv '$CACHE_FILE.new' '$CACHE_FILE'" \
        "cp -p '$saved' '$CACHE_FILE.new' && mv '$CACHE_FILE.new' '$CACHE_FILE'" || return 1
    spoil "no running slurmd holds it" \
        "jq -c '.lock = \"0:1\"' '$saved' >'$CACHE_FILE.new' && chmod 644 '$CACHE_FILE.new' && mv '$CACHE_FILE.new' '$CACHE_FILE'" \
        "cp -p '$saved' '$CACHE_FILE.new' && mv '$CACHE_FILE.new' '$CACHE_FILE'" || return 1
    # Unreadable by the job's user.
    spoil "Permission denied" "chmod 600 '$CACHE_FILE'" "chmod 644 '$CACHE_FILE'" || return 1
    node_idle
}

c_fault_topology_removed() {
    local topo=$E2E_TOPO/removable.xml ok=0
    cp "$FIX" "$topo" && chmod 644 "$topo"
    set_plugstack "topology=$topo default=gpu"
    e2e_slurmd_stop && e2e_slurmd_start || return 1
    rm -f "$topo"
    # The job's own request: refused with the file's name, once.
    probe -n 2 --map-by-device=gpu
    expect_rc 1 && one_line_error "cannot use topology=$topo: $topo does not exist" || ok=1
    # The admin's default: the job runs unmapped, slurmd.log says why.
    log_mark
    probe -n 2
    expect_rc 0 && expect_out "$UNMAPPED_LINES" && log_has "cannot use topology=$topo" || ok=1
    # Back: mapped again, no restart needed.
    cp "$FIX" "$topo" && chmod 644 "$topo"
    probe -n 2 --map-by-device=gpu
    expect_rc 0 && expect_out "$GPU_LINES" || ok=1
    rm -f "$topo"
    set_plugstack "config=$LOAD_CONF"
    e2e_slurmd_stop && e2e_slurmd_start && node_idle || return 1
    return $ok
}

# without_second_gpu IN OUT: IN with the second GPU's PCI function (0000:65:00.0) removed,
# as if it had been unplugged.
without_second_gpu() {
    python3 - "$1" "$2" <<'PY'
import sys, xml.etree.ElementTree as ET
tree = ET.parse(sys.argv[1])
for parent in tree.iter():
    for child in list(parent):
        if child.get("type") == "PCIDev" and child.get("pci_busid") == "0000:65:00.0":
            parent.remove(child)
tree.write(sys.argv[2], encoding="UTF-8", xml_declaration=True)
PY
    chmod 644 "$2"
}

c_fault_devices_vanish() {
    local topo=$E2E_TOPO/unplug.xml ok=0
    cp "$FIX" "$topo" && chmod 644 "$topo"
    set_plugstack "topology=$topo"
    probe -n 2 --map-by-device=gpu
    expect_rc 0 && expect_out "$GPU_LINES" || return 1
    # The second GPU is unplugged and topology= edited between two steps.
    without_second_gpu "$FIX" "$topo.new" && mv -f "$topo.new" "$topo"
    probe -n 2 --map-by-device=gpu
    expect_rc 1 && one_line_error "2 tasks with ndev=1 need 2 gpu devices" && expect_err "has 1 to give" || ok=1
    probe -n 1 --map-by-device=gpu
    expect_rc 0 && expect_out "$(line 0 0 "$UUID0" - -)" || ok=1
    # The cache rewritten without the node's PCI devices: a topology without I/O objects. The
    # job's request is refused, the admin's default steps aside (the task runs unmapped,
    # slurmd.log says why).
    set_plugstack "config=$LOAD_CONF"
    cp -p "$CACHE_DIR/topology.json" "$E2E_DIR/work/cache.saved"
    jq -c '.topology.pci = [] | .topology.loose = []' "$E2E_DIR/work/cache.saved" >"$CACHE_DIR/topology.json"
    hprobe -n 1 --map-by-device="$LIVE_TARGET"
    expect_rc 1 && one_line_error "has no I/O devices at all" || ok=1
    set_plugstack "config=$LOAD_CONF default=$LIVE_TARGET"
    log_mark
    hprobe -n 1
    expect_rc 0 && expect_unmapped && log_has "has no I/O devices at all" || ok=1
    cat "$E2E_DIR/work/cache.saved" >"$CACHE_DIR/topology.json"
    set_plugstack "config=$LOAD_CONF"
    hprobe -n 1 --map-by-device="$LIVE_TARGET"
    expect_rc 0 && expect_live 1 || ok=1
    rm -f "$topo"
    node_idle || ok=1
    return $ok
}

c_fault_driver_file_vanished() {
    # topology= still lists both GPUs; the second one's NVIDIA driver file is gone (the GPU
    # was unplugged): a job asking for it is refused naming the file, one task still maps,
    # the admin's default runs unmapped, and the file back makes it whole.
    local proc=$E2E_DIR/unplug-proc conf=$E2E_DIR/etc/unplug.toml gone ok=0
    rm -rf "$proc" && cp -r "$E2E_ROOT/topologies/drivers/nvidia/proc" "$proc" || return 1
    gone=$proc/driver/nvidia/gpus/0000:65:00.0/information
    printf 'proc_root = "%s"\n' "$proc" >"$conf" && chmod 644 "$conf"
    set_plugstack "topology=$FIX_DRM config=$conf"
    probe -n 2 --map-by-device=gpu
    expect_rc 0 && expect_out "$GPU_LINES" || return 1
    mv "$gone" "$gone.away"
    probe -n 2 --map-by-device=gpu
    expect_rc 1 && one_line_error "its driver file $gone is gone (the driver is not loaded, or the GPU was removed since the topology was taken" || ok=1
    probe -n 1 --map-by-device=gpu
    expect_rc 0 && expect_out "$(line 0 0 "$UUID0" - -)" || ok=1
    set_plugstack "topology=$FIX_DRM config=$conf default=gpu"
    log_mark
    probe -n 2
    expect_rc 0 && expect_out "$UNMAPPED_LINES" && log_has "its driver file $gone is gone" || ok=1
    mv "$gone.away" "$gone"
    set_plugstack "topology=$FIX_DRM config=$conf"
    probe -n 2 --map-by-device=gpu
    expect_rc 0 && expect_out "$GPU_LINES" || ok=1
    set_plugstack "config=$LOAD_CONF"
    rm -rf "$proc"
    node_idle || ok=1
    return $ok
}

c_fault_gres_gpu_vanished() {
    # Slurm still hands out two GPUs (gres.conf), the topology now has one.
    local topo=$E2E_TOPO/unplug-gres.xml ok=0
    without_second_gpu "$FIX" "$topo"
    set_plugstack "topology=$topo"
    probe -n 2 --gres=gpu:2 --map-by-device=gpu
    expect_rc 1 && one_line_error "Slurm allocated GPU index 1 to the step, but node" &&
        expect_err "has only 1 GPUs in its topology" || ok=1
    probe -n 1 --gres=gpu:1 --map-by-device=gpu
    expect_rc 0 && expect_out "$(line 0 0 "$UUID0" - -)" || ok=1
    rm -f "$topo"
    node_idle || ok=1
    return $ok
}

# --- Cases: panics across the FFI boundary (test-hooks build) ------------------------------------

panic_setup() {
    build_hooks_plugin || return 1
    e2e_install_plugin "$HOOKS_PLUGIN"
    PANIC_FILE=$E2E_DIR/work/panic
    : >"$PANIC_FILE" && chmod 644 "$PANIC_FILE"
    # slurmd (and every slurmstepd it starts) and this shell's sruns read it.
    export MBD_TEST_PANIC_FILE=$PANIC_FILE
    set_plugstack "topology=$FIX"
}

panic_at() { echo "$1" >"$PANIC_FILE"; }

# panic_seen POINT: notes srun's exit status and the plugin's line for the summary.
panic_seen() {
    local said
    said=$(grep -m1 -F "forced panic" <<<"$ERR" | sed 's/.*map-by-device: /map-by-device: /')
    [[ -n $said ]] || said="(terminal: $(grep -m1 -v '^$' <<<"$ERR"); slurmd.log has the message)"
    FIGURES+=("panic in $1: exit $RC; $said")
}

# after_panic: the node is idle and an ordinary mapped step works with no panic asked for.
after_panic() {
    : >"$PANIC_FILE"
    node_idle && probe -n 2 --map-by-device=gpu && expect_rc 0 && expect_out "$GPU_LINES"
}

c_panic_srun_hooks() {
    local point words
    for point in option@local init@local init_post_opt@local; do
        case $point in
            option@local) words="map-by-device: internal error in the --map-by-device option callback: test-hooks: forced panic in option (local)" ;;
            init@local) words="map-by-device: internal error in init: test-hooks: forced panic in init (local)" ;;
            init_post_opt@local) words="map-by-device: internal error in init_post_opt: test-hooks: forced panic in init_post_opt (local)" ;;
        esac
        panic_at "$point"
        log_mark
        local before
        before=$(job_count)
        probe -n 2 --map-by-device=gpu
        expect_fail && no_abort && one_line_error "$words" || { echo "($point)"; return 1; }
        [[ $(job_count) == "$before" ]] || { echo "($point) a job was created"; return 1; }
        panic_seen "$point"
    done
    # sbatch and salloc run the same hooks.
    panic_at option@allocator
    run sbatch --map-by-device=gpu --wrap true
    expect_fail && no_abort && expect_err "forced panic in option" || return 1
    after_panic
}

c_panic_allocator_hooks() {
    # sbatch and salloc run init and init_post_opt in the allocator context.
    local point cmd hook before
    for point in init@allocator init_post_opt@allocator; do
        hook=${point%@*}
        for cmd in sbatch salloc; do
            panic_at "$point"
            log_mark
            before=$(job_count)
            if [[ $cmd == sbatch ]]; then
                run sbatch -n 1 --map-by-device=gpu --wrap true
            else
                run salloc -n 1 --map-by-device=gpu true
            fi
            expect_fail && no_abort &&
                one_line_error "map-by-device: internal error in $hook: test-hooks: forced panic in $hook (allocator)" ||
                { echo "($cmd, $point)"; return 1; }
            [[ $(job_count) == "$before" ]] || { echo "($cmd, $point) a job was created"; return 1; }
            panic_seen "$point ($cmd)"
        done
    done
    after_panic
}

c_panic_step_hooks() {
    local point
    for point in init@remote init_post_opt@remote user_init@remote task_init@remote option@remote; do
        panic_at "$point"
        log_mark
        probe -n 2 --map-by-device=gpu
        expect_fail && no_abort || { echo "($point)"; return 1; }
        # The message: on the terminal (task_init reports user_init's) or in slurmd.log.
        local hook=${point%@*} words
        words="test-hooks: forced panic in $hook (remote)"
        grep -qF -- "$words" <<<"$ERR" || log_has "$words" || { echo "($point) no message"; show; return 1; }
        panic_seen "$point"
        after_panic || { echo "(after $point)"; return 1; }
    done
    # user_init in a step that asked for nothing: the step runs, unmapped.
    panic_at user_init@remote
    log_mark
    probe -n 2
    expect_rc 0 && expect_out "$UNMAPPED_LINES" && log_has "internal error in user_init" || return 1
    after_panic
}

c_panic_slurmd_hooks() {
    # init in slurmd: logged, slurmd goes on (a failing init would stop it).
    panic_at init@slurmd
    e2e_slurmd_stop
    log_mark
    e2e_slurmd_start || { echo "slurmd did not start after a panic in its init"; return 1; }
    log_has "internal error in init: test-hooks: forced panic in init (slurmd)" && log_has "slurmd goes on" || return 1
    after_panic || return 1
    # slurmd_exit: logged, slurmd exits normally.
    panic_at slurmd_exit@slurmd
    local pid=${E2E_PIDS[slurmd]} status
    log_mark
    kill -TERM "$pid"
    wait "$pid"
    status=$?
    unset "E2E_PIDS[slurmd]"
    ((status == 0)) || { echo "slurmd exited with status $status after a panic in slurmd_exit"; return 1; }
    log_has "internal error in slurmd_exit: test-hooks: forced panic in slurmd_exit (slurmd)" || return 1
    : >"$PANIC_FILE"
    e2e_slurmd_start && after_panic
}

# --- Phases --------------------------------------------------------------------------------

LOAD_CASES=(
    "load: consecutive mapped steps, footprint flat|c_load_consecutive"
    "load: 20 concurrent sruns (mapped, unmapped, refused), footprint flat|c_load_concurrent"
    "load: the plugin's side in a step: slurmstepd's peak RSS and descriptors, mapped or not|c_load_step_footprint"
    "load: 20 consecutive and 4 concurrent steps with live discovery, nothing left behind|c_load_live_discovery"
    "load: a lock flood (100,000 POSIX locks of another user), slurmd hidden by hidepid=2: steps plan from the cache in ms|c_load_lock_flood"
    "load: a daemonizing slurmd: the steps trust its cache|c_load_daemonizing_slurmd"
    "load: slurmd in another pid namespace sharing the machine's /proc: steps plan from its cache in ms, a killed one's cache refused|c_load_pid_namespace"
)

HOSTILE_CASES=(
    "hostile: HWLOC_* at 128 kB or with a newline change nothing (cache, live, topology=); 1 MB never reaches Slurm|c_hostile_hwloc_env"
    "hostile: the option at 128 kB, with a newline, ndev=2^64 (environment form, command line): one line, no job|c_hostile_option_env"
    "hostile: a 1 MB #SBATCH line and a NUL in a script are refused before a job exists|c_hostile_sbatch_lines"
    "hostile: a spec in #SBATCH and in the environment form: Slurm's precedence, the winner checked|c_hostile_both_forms"
    "hostile: a world-writable cache_dir with planted symlinks: refused by root, targets untouched|c_hostile_world_writable_cache_dir"
    "hostile: libraries of the user's in the job's directory, slurmd with LD_LIBRARY_PATH=/usr/local/lib:. (cache = false, topology=, a refused cache): nothing loaded, the child holds the user's ids in /, check flags it|c_hostile_user_libraries"
)

FORGE_CASES=(
    "hostile: newlines in the option's environment form, a CUDA_VISIBLE_DEVICES id, SLURMD_NODENAME: no forged line in slurmd.log|c_hostile_forged_log_lines"
)

FAULT_CASES=(
    "fault: slurmd stopped or killed while a step runs: the step ends mapped, the new slurmd's cache is used|c_fault_slurmd_restart"
    "fault: the cache truncated, replaced or unreadable between steps: live discovery, said in slurmd.log|c_fault_cache_spoiled"
    "fault: topology= removed after slurmd started: the request refused, the default unmapped, then back|c_fault_topology_removed"
    "fault: devices vanish from topology= or from the cache: refused or unmapped as documented|c_fault_devices_vanish"
    "fault: topology= lists a GPU whose driver file is gone (unplugged): refused naming the file, unmapped default|c_fault_driver_file_vanished"
)

FAULT_GRES_CASES=(
    "fault (gres): Slurm gives a GPU the topology no longer has: refused with both counts|c_fault_gres_gpu_vanished"
)

PANIC_CASES=(
    "panic: in srun's option callback, init, init_post_opt (and sbatch's callback): error, no abort|c_panic_srun_hooks"
    "panic: in sbatch's and salloc's init and init_post_opt: error, no abort, no job|c_panic_allocator_hooks"
    "panic: in slurmstepd's init, init_post_opt, user_init, task_init, option callback: error, no abort|c_panic_step_hooks"
    "panic: in slurmd's init and slurmd_exit: logged, slurmd starts and stops normally|c_panic_slurmd_hooks"
)

main() {
    local t0=$SECONDS
    e2e_require_root "tests/e2e/hardening.sh starts slurmd and slurmctld"
    FIGURES=()
    e2e_install_packages || abort "installing the Debian packages"
    e2e_build_plugin || abort "building the plugin"
    cases_fixtures
    cases_init
    HPROBE=$E2E_DIR/work/hprobe.sh
    cat >"$HPROBE" <<'EOF'
#!/bin/bash
# One line per task: its CPUs and the variables a gpu or network mapping sets ("-": unset).
out="task=$SLURM_LOCALID cpus=$(grep Cpus_allowed_list /proc/self/status | cut -f2)"
for v in CUDA_VISIBLE_DEVICES PMIX_DEVICE_ID; do
    val=$(printenv "$v")
    out+=" $v=${val:--}"
done
echo "$out"
EOF
    chmod 755 "$HPROBE"
    # The task's parent is its step's slurmstepd: its name, peak RSS, RSS and descriptors,
    # read once slurmstepd has settled: while it launches the task it holds pipes and sockets
    # for a moment, more of them the sooner the task starts (an unmapped step's task starts
    # first), which on a loaded machine made an unmapped step look like it had 2 more.
    FPROBE=$E2E_DIR/work/fprobe.sh
    cat >"$FPROBE" <<'EOF'
#!/bin/bash
sleep 0.3
s=/proc/$PPID/status
links=$(find /proc/$PPID/fd -mindepth 1 -maxdepth 1 -printf '%l\n' | sed 's/[0-9]\{2,\}/N/g' | sort | tr '\n' ' ')
echo "comm=$(cat /proc/$PPID/comm) hwm=$(awk '/^VmHWM:/ {print $2}' $s) rss=$(awk '/^VmRSS:/ {print $2}' $s) fds=$(find /proc/$PPID/fd -mindepth 1 -maxdepth 1 | wc -l) links=$links"
EOF
    chmod 755 "$FPROBE"
    # What live discovery maps here: the first class this machine has one device of.
    LIVE_TARGET=""
    local t
    for t in network block; do
        grep -q "^$t " <<<"$LIVE_DEVICES" && { LIVE_TARGET=$t; break; }
    done
    [[ -n $LIVE_TARGET ]] || abort "live discovery finds no network or block device here (map-by-device devices)"
    # Its locality and PMIx id, from the CLI's plan on this machine ("...; cpus 0-1; ... PMIX_DEVICE_ID=...").
    local plan
    plan=$(cd "$E2E_ROOT" && cargo run --quiet --bin map-by-device -- plan -n 1 "$LIVE_TARGET")
    LIVE_CPUS=$(sed -nE 's/^task 0 .*; cpus ([^;]*);.*/\1/p' <<<"$plan")
    LIVE_PMIX=$(sed -nE 's/.*PMIX_DEVICE_ID=([^ ]*).*/\1/p' <<<"$plan")
    [[ -n $LIVE_CPUS && -n $LIVE_PMIX ]] || abort "no plan for $LIVE_TARGET here: $plan"

    run_phase affinity load_setup "${LOAD_CASES[@]}"
    run_phase affinity hostile_setup "${HOSTILE_CASES[@]}"
    run_phase affinity-gres-types forge_setup "${FORGE_CASES[@]}"
    run_phase affinity fault_setup "${FAULT_CASES[@]}"
    if e2e_cgroup_v1_available; then
        run_phase gres - "${FAULT_GRES_CASES[@]}"
    else
        SKIPS+=("the GRES fault case: no cgroup v1 cpuset/freezer hierarchy mounted here")
    fi
    run_phase affinity panic_setup "${PANIC_CASES[@]}"
    unset MBD_TEST_PANIC_FILE
    [[ -n ${HOOKS_PLUGIN:-} ]] && e2e_install_plugin "$E2E_PLUGIN_BUILT"
    local f
    for f in "${FIGURES[@]}"; do NOTES+=("$f"); done
    NOTES+=("hardening took $((SECONDS - t0)) s")
    summary
    ((FAILED == 0))
}

main "$@"
