# shellcheck shell=bash
# A private single-node Slurm on localhost, for the end-to-end suite (run.sh), the benchmark
# (bench.sh) and the demo (scripts/demo.sh). Source this file, then:
#
#   e2e_install_packages [PKG...]   # Debian packages (E2E_PACKAGES and PKG...), if missing (root)
#   e2e_build_plugin                # cargo build --release -p map-by-device-spank
#   e2e_init [NAME]                 # private directory, ports, munge key (multinode/lib.sh's
#                                   # mn_init: the same, NAME mn, plus its nodes' files)
#   cluster_start affinity|cgroup   # munged, slurmctld, slurmd -N node1; waits for idle
#   set_plugstack "ARGS..."         # the plugin's plugstack.conf line (re-read by every
#                                   # srun/sbatch and every step; no restart needed)
#   cluster_stop                    # stops what cluster_start started, by pid
#   e2e_slurmd_stop/e2e_slurmd_start  # restart slurmd alone (its init hook runs again)
#   e2e_counts LOG [RC]             # "PASSED FAILED" of a suite's output (the one parser of
#                                   # the "N passed, N failed" lines: test-all.sh, the
#                                   # package suite and .ci/run call it)
#
# Everything lives under $E2E_DIR (a fresh mktemp directory under /run, /run/mbd-NAME.*); the daemons find their config
# through SLURM_CONF, exported here for every client this shell runs. Nothing system-wide is
# touched, except the cgroup directories slurmd creates in cgroup mode, removed on stop.
#
# Layout: $E2E_DIR/{etc,munge,log,state,spool,lib,work}

E2E_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# What building the plugin and running a local Slurm need on a minimal Debian 12, 13 or sid
# (debootstrap --variant=minbase): .ci/run proves the list from fresh roots. libhwloc-plugins
# holds hwloc's PCI discovery on Debian (without it a live node shows no GPU or adapter), its
# gl component that the security cases prove is never run, and its libxml2 importer (the
# fixtures do not need it: they load with hwloc's own parser too); python3: the security
# cases' fake X server; procps: pgrep/ps, with which the suites prove that nothing is left
# running (a minbase root has none, and a check that cannot look would pass without looking).
# (tests/browser/run.sh adds chromium for the pictures' browser test.)
E2E_PACKAGES=(slurmctld slurmd slurm-client slurm-wlm-basic-plugins munge libslurm-dev libclang-dev libhwloc-dev
    libhwloc-plugins libudev-dev pkg-config build-essential ca-certificates jq hostname python3 procps hwloc-nox)
# Where SchedMD's own packages are installed (slurm-smd*, built from the debian/ in their
# source, as sites that run SchedMD's releases on Debian do), they stand for Debian's, with
# which they conflict: the same daemons, client commands, plugins and headers.
if dpkg-query -W -f='${Status}' slurm-smd 2>/dev/null | grep -q "install ok installed"; then
    E2E_PACKAGES=(slurm-smd-slurmctld slurm-smd-slurmd slurm-smd-client slurm-smd "${E2E_PACKAGES[@]:4}")
    E2E_PACKAGES=("${E2E_PACKAGES[@]/#libslurm-dev/slurm-smd-dev}")
fi
# The real readers that run.sh's reader cases start inside tasks (libgomp, for gcc -fopenmp,
# comes with build-essential): UCX's ucx_info reads UCX_NET_DEVICES, numactl shows the task's
# binding. Not in E2E_PACKAGES, which the demo installs too; scripts/test-all.sh installs them
# with its own before it takes the machine's lock, run.sh again if missing.
# shellcheck disable=SC2034 # for the scripts that source this file
E2E_READER_PACKAGES=(ucx-utils numactl)
# The container suite's runtimes (tests/e2e/containers.sh), installed with the others by
# scripts/test-all.sh: Charliecloud's ch-run and busybox for its image on every release,
# Apptainer where Debian packages it (sid only: its debian_version reads "<codename>/sid").
# shellcheck disable=SC2034 # for the scripts that source this file
E2E_CONTAINER_PACKAGES=(charliecloud-runtime busybox-static)
if [[ $(cat /etc/debian_version 2>/dev/null) == */sid ]]; then
    E2E_CONTAINER_PACKAGES+=(apptainer)
fi
# The launchers that the launcher cases (tests/e2e/launch.sh) start ranks with, installed the
# same way: Open MPI's mpirun (4.1 on Debian 12, 5.0 on 13, 6.0 on sid) and MPICH's
# mpiexec.hydra. Both provide mpirun and mpiexec; the cases name mpirun.openmpi and
# mpiexec.hydra.
# shellcheck disable=SC2034 # for the scripts that source this file
E2E_LAUNCHER_PACKAGES=(openmpi-bin mpich)
# Beside SchedMD's slurm-smd, MPICH cannot be installed: Debian's mpich (13 and later) depends
# on Debian's libslurm42t64, whose libslurm.so.42 slurm-smd also ships (dpkg refuses the
# overwrite). The hydra cases then say they skipped, and why (launch.sh).
E2E_LAUNCHER_MISSING_WHY=""
if dpkg-query -W -f='${Status}' slurm-smd 2>/dev/null | grep -q "install ok installed"; then
    # shellcheck disable=SC2034 # for the scripts that source this file
    E2E_LAUNCHER_PACKAGES=(openmpi-bin)
    # shellcheck disable=SC2034 # for the scripts that source this file
    E2E_LAUNCHER_MISSING_WHY="Debian's mpich depends on Debian's libslurm, whose files SchedMD's slurm-smd holds"
fi
E2E_NODE=node1
declare -gA E2E_PIDS=()
E2E_MODE=""

e2e_log() { printf 'e2e: %s\n' "$*" >&2; }

# e2e_require_root WHAT: a suite that starts daemons ("tests/e2e/run.sh starts slurmd and
# slurmctld") goes on only as root; otherwise it says so and exits with one failure counted.
e2e_require_root() {
    [[ $(id -u) == 0 ]] && return 0
    echo "$1: run it as root" >&2
    echo "0 passed, 1 failed"
    exit 1
}

# e2e_running_stepds: the pids of the slurmstepd processes that still run, one per line. An
# exited one is reparented to init, which reaps it: until then it is a zombie, running
# nothing, and not counted (CI, December 2026: the sandbox's init left exited slurmstepd
# unreaped for more than 15 s, and every one of a suite's steps showed up as "left behind"
# though slurmd had logged "done with job").
e2e_running_stepds() { ps -C slurmstepd -o pid=,stat= | awk '$2 !~ /^Z/ {print $1}'; }

# e2e_counts LOG [RC]: "PASSED FAILED" of a suite's output LOG, by the convention in the header
# of scripts/test-all.sh: its last line "N passed, N failed" counts (none: 0 0). With RC, the
# suite's exit status: a non-zero one without a failure counted is one failure. Without RC (not
# known), a LOG without that line (a run that stopped early, or no LOG) is one failure.
e2e_counts() {
    local line passed=0 failed=0
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$1" 2>/dev/null | tail -n 1)
    if [[ -n $line ]]; then
        read -r passed failed < <(sed -E 's/^([0-9]+) passed, ([0-9]+) failed.*/\1 \2/' <<<"$line")
    elif [[ -z ${2:-} ]]; then
        failed=1
    fi
    if [[ -n ${2:-} && $2 != 0 ]] && ((failed == 0)); then failed=1; fi
    echo "$passed $failed"
}

# Installs the Debian packages the plugin's build and the cluster need, and the extra ones
# given as arguments, if any is missing.
e2e_install_packages() {
    local missing=() p
    for p in "${E2E_PACKAGES[@]}" "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    ((${#missing[@]} == 0)) && return 0
    if [[ $(id -u) != 0 ]]; then
        e2e_log "missing packages: ${missing[*]} (run as root, or: sudo apt-get install ${missing[*]})"
        return 1
    fi
    e2e_log "installing ${missing[*]}"
    # Keep the packages' own services from starting (no systemd, or a second slurmd).
    DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# Makes sure cargo (with rustfmt) is there and recent enough for the workspace's
# rust-version; installs a minimal stable toolchain with rustup if there is none.
e2e_ensure_rust() {
    local need have
    need=$(sed -n 's/^rust-version *= *"\([0-9.]*\)".*/\1/p' "$E2E_ROOT/Cargo.toml" | head -n1)
    [[ -f $HOME/.cargo/env ]] && source "$HOME/.cargo/env"
    if ! command -v cargo >/dev/null 2>&1; then
        e2e_log "no cargo: installing a minimal stable Rust toolchain with rustup"
        command -v curl >/dev/null 2>&1 ||
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends curl ca-certificates >/dev/null
        curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal --component rustfmt,clippy >/dev/null ||
            { e2e_log "rustup failed: install Rust $need or newer (https://rustup.rs)"; return 1; }
        source "$HOME/.cargo/env"
    fi
    have=$(cargo --version | awk '{print $2}')
    if [[ -n $need && $(printf '%s\n%s\n' "$need" "$have" | sort -V | head -n1) != "$need" ]]; then
        if command -v rustup >/dev/null 2>&1; then
            e2e_log "cargo $have is older than the workspace's rust-version $need: rustup update stable"
            rustup update stable >/dev/null && rustup default stable >/dev/null || return 1
        else
            e2e_log "cargo $have is older than the workspace's rust-version $need: install Rust $need or newer"
            return 1
        fi
    fi
    if ! cargo fmt --version >/dev/null 2>&1 && command -v rustup >/dev/null 2>&1; then
        rustup component add rustfmt >/dev/null 2>&1 || e2e_log "could not add rustfmt (the format check will be skipped)"
    fi
    if ! cargo clippy --version >/dev/null 2>&1 && command -v rustup >/dev/null 2>&1; then
        rustup component add clippy >/dev/null 2>&1 || e2e_log "could not add clippy (the clippy suite will fail)"
    fi
    return 0
}

# Builds the plugin and its discovery library (release) and sets E2E_PLUGIN_BUILT to the .so.
e2e_build_plugin() {
    local target=${CARGO_TARGET_DIR:-$E2E_ROOT/target}
    e2e_log "building the plugin (cargo build --release -p map-by-device-spank -p map-by-device-discover)"
    (cd "$E2E_ROOT" && cargo build --quiet --release -p map-by-device-spank -p map-by-device-discover) || return 1
    E2E_PLUGIN_BUILT=$target/release/libmap_by_device_spank.so
    [[ -f $E2E_PLUGIN_BUILT ]] || { e2e_log "no $E2E_PLUGIN_BUILT after the build"; return 1; }
}

# The discovery library that goes with the plugin file $1: map_by_device_discover.so beside
# it (an installed plugin), or cargo's libmap_by_device_discover.so (a build).
e2e_discover_of() {
    local dir
    dir=$(dirname "$1")
    if [[ -f $dir/map_by_device_discover.so ]]; then
        echo "$dir/map_by_device_discover.so"
    else
        echo "$dir/libmap_by_device_discover.so"
    fi
}

# A TCP port nothing listens on, below the kernel's ephemeral range (a port that an
# outgoing connection holds cannot be bound either).
e2e_free_port() {
    local p _ low
    low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
    ((low > 12000)) || low=32768
    for _ in $(seq 100); do
        p=$((10000 + RANDOM % (low - 10000)))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
            echo "$p"
            return 0
        fi
    done
    return 1
}

# e2e_init [NAME]: creates the private directory (/run/mbd-NAME.XXXXXX, NAME e2e by default),
# the munge key and the ports; installs the plugin there. The directory is under /run, not
# /tmp: the plugin (root) reads topology=, config= and its cache only through directories
# that only root can write (docs/admin-guide.md), and the fixtures are copied into $E2E_TOPO
# for the same reason (a checkout may be anyone's).
e2e_init() {
    E2E_DIR=$(mktemp -d "/run/mbd-${1:-e2e}.XXXXXX") || return 1
    # World-readable so that jobs of an unprivileged user can read configs and the socket.
    chmod 755 "$E2E_DIR"
    mkdir -p "$E2E_DIR"/{etc,munge,log,state,spool,lib,work,topologies}
    chmod 755 "$E2E_DIR"/{etc,munge,lib,topologies}
    chmod 1777 "$E2E_DIR/work"
    E2E_TOPO=$E2E_DIR/topologies
    cp "$E2E_ROOT"/topologies/*.xml "$E2E_TOPO"/ || return 1
    if compgen -G "$E2E_ROOT/tests/e2e/fixtures/*.xml" >/dev/null; then
        cp "$E2E_ROOT"/tests/e2e/fixtures/*.xml "$E2E_TOPO"/ || return 1
    fi
    chmod 644 "$E2E_TOPO"/*.xml
    mungekey --create --keyfile="$E2E_DIR/munge/munge.key" >/dev/null 2>&1 ||
        dd if=/dev/urandom of="$E2E_DIR/munge/munge.key" bs=1024 count=1 status=none
    chmod 600 "$E2E_DIR/munge/munge.key"
    E2E_CTLD_PORT=$(e2e_free_port) && E2E_SLURMD_PORT=$(e2e_free_port) || return 1
    [[ $E2E_CTLD_PORT != "$E2E_SLURMD_PORT" ]] || E2E_SLURMD_PORT=$((E2E_CTLD_PORT + 1))
    export SLURM_CONF=$E2E_DIR/etc/slurm.conf
    E2E_PLUGIN=$E2E_DIR/lib/map_by_device.so
    [[ -n ${E2E_PLUGIN_BUILT:-} ]] && e2e_install_plugin "$E2E_PLUGIN_BUILT"
    set_plugstack_empty
}

# Installs a plugin .so, and the discovery library that goes with it beside it (as the
# packages do), by rename: a .so that slurmd has loaded is never overwritten in place.
e2e_install_plugin() {
    local lib dst
    lib=$(e2e_discover_of "$1") dst=$(dirname "$E2E_PLUGIN")/map_by_device_discover.so
    cp "$lib" "$dst.new" && chmod 755 "$dst.new" && mv -f "$dst.new" "$dst" &&
        cp "$1" "$E2E_PLUGIN.new" && chmod 755 "$E2E_PLUGIN.new" && mv -f "$E2E_PLUGIN.new" "$E2E_PLUGIN"
}

# e2e_write_plugstack LINE...: plugstack.conf becomes these lines (none: an empty file), mode
# 0644, by rename, so that a step starting meanwhile reads the old file or the new one.
e2e_write_plugstack() {
    : >"$E2E_DIR/etc/plugstack.conf.new"
    (($#)) && printf '%s\n' "$@" >"$E2E_DIR/etc/plugstack.conf.new"
    chmod 644 "$E2E_DIR/etc/plugstack.conf.new"
    mv -f "$E2E_DIR/etc/plugstack.conf.new" "$E2E_DIR/etc/plugstack.conf"
}

# The plugin's plugstack.conf line with these arguments ("required": see docs/plugin.md).
set_plugstack() {
    e2e_write_plugstack "required $E2E_PLUGIN $*"
}

# No plugin at all.
set_plugstack_empty() {
    e2e_write_plugstack
}

# slurm.conf (and cgroup.conf, gres.conf) for MODE: "affinity" (task/affinity, 8 CPUs declared
# on the real 2, as in the facts notes; E2E_DECLARED_CPUS changes the 8), "affinity-real"
# (task/affinity, the real CPU count), "affinity-gres-types" (the same, with GresTypes=gpu for
# the cluster but no GPU GRES on the node), "affinity-gres" (the same, with the fake GPUs of
# "gres" below as GRES on the node: scripts/demo.sh), "cgroup" (task/cgroup with ConstrainCores on cgroup v1,
# the real CPU count) or "gres" (as cgroup, plus two fake GPUs as GRES: gres.conf names
# /dev/null and /dev/zero, which Slurm numbers 0 and 1 in that order; E2E_GRES_FILES, a
# space-separated list of device files in the order Slurm is to number them, gives others).
e2e_write_slurm_conf() {
    local mode=$1 cpus node_line task proctrack gres_types="" f
    local -a gres_files
    read -ra gres_files <<<"${E2E_GRES_FILES:-/dev/null /dev/zero}"
    cpus=$(nproc --all)
    if [[ $mode == cgroup || $mode == gres ]]; then
        task="task/cgroup,task/affinity"
        proctrack="proctrack/cgroup"
        node_line="NodeName=$E2E_NODE NodeAddr=127.0.0.1 CPUs=$cpus Sockets=1 CoresPerSocket=$cpus ThreadsPerCore=1 RealMemory=1000"
        if [[ $mode == gres ]]; then
            gres_types="GresTypes=gpu"
            node_line+=" Gres=gpu:${#gres_files[@]}"
        fi
    elif [[ $mode == affinity-real || $mode == affinity-gres-types || $mode == affinity-gres ]]; then
        task="task/affinity"
        proctrack="proctrack/linuxproc"
        node_line="NodeName=$E2E_NODE NodeAddr=127.0.0.1 CPUs=$cpus Sockets=1 CoresPerSocket=$cpus ThreadsPerCore=1 RealMemory=1000"
        [[ $mode == affinity-real ]] || gres_types="GresTypes=gpu"
        [[ $mode == affinity-gres ]] && node_line+=" Gres=gpu:${#gres_files[@]}"
    else
        task="task/affinity"
        proctrack="proctrack/linuxproc"
        local n=${E2E_DECLARED_CPUS:-8}
        node_line="NodeName=$E2E_NODE NodeAddr=127.0.0.1 CPUs=$n Sockets=1 CoresPerSocket=$n ThreadsPerCore=1 CpuBind=none RealMemory=1000"
    fi
    cat >"$E2E_DIR/etc/slurm.conf" <<EOF
ClusterName=mbde2e
SlurmctldHost=$(hostname -s)(127.0.0.1)
SlurmctldPort=$E2E_CTLD_PORT
SlurmdPort=$E2E_SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$E2E_DIR/munge/munge.socket
StateSaveLocation=$E2E_DIR/state
SlurmdSpoolDir=$E2E_DIR/spool
SlurmctldPidFile=$E2E_DIR/state/slurmctld.pid
SlurmdPidFile=$E2E_DIR/spool/slurmd.pid
SlurmctldLogFile=$E2E_DIR/log/slurmctld.log
SlurmdLogFile=$E2E_DIR/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=debug
ProctrackType=$proctrack
TaskPlugin=$task
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0
MailProg=/bin/true
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
PlugStackConfig=$E2E_DIR/etc/plugstack.conf
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=2
MinJobAge=600
$gres_types
$node_line
PartitionName=debug Nodes=$E2E_NODE Default=YES MaxTime=INFINITE State=UP
EOF
    cat >"$E2E_DIR/etc/cgroup.conf" <<EOF
CgroupPlugin=cgroup/v1
ConstrainCores=yes
EOF
    # Hand-written, no AutoDetect: the File= order is Slurm's GPU numbering (index 0 =
    # /dev/null, 1 = /dev/zero); the fixture topologies' GPUs in PCI-bus order match it.
    for f in "${gres_files[@]}"; do
        echo "NodeName=$E2E_NODE Name=gpu File=$f"
    done >"$E2E_DIR/etc/gres.conf"
    # GresTypes=gpu for the cluster, but no GPU GRES on this node (a CPU node of a GPU cluster).
    [[ $mode == affinity-gres-types ]] && : >"$E2E_DIR/etc/gres.conf"
    chmod 644 "$E2E_DIR/etc/slurm.conf" "$E2E_DIR/etc/cgroup.conf" "$E2E_DIR/etc/gres.conf"
}

# Whether cgroup mode can run here (Slurm's cgroup/v1 needs the v1 cpuset hierarchy; cgroup/v2
# cannot run on a hybrid hierarchy, and the plugin's v2 path is unit-tested only).
e2e_cgroup_v1_available() {
    grep -qs ' /sys/fs/cgroup/cpuset cgroup ' /proc/mounts &&
        grep -qs ' /sys/fs/cgroup/freezer cgroup ' /proc/mounts
}

# Waits up to $2 seconds for command $1 to succeed.
e2e_wait_for() {
    local what=$1 secs=$2 i
    for ((i = 0; i < secs * 10; i++)); do
        eval "$what" >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    return 1
}

# Starts munged, slurmctld and slurmd in the foreground (so $! is their pid), in MODE.
cluster_start() {
    E2E_MODE=${1:-affinity}
    e2e_write_slurm_conf "$E2E_MODE"
    local log=$E2E_DIR/log
    munged -F --force --key-file="$E2E_DIR/munge/munge.key" --socket="$E2E_DIR/munge/munge.socket" \
        --pid-file="$E2E_DIR/munge/munged.pid" --log-file="$log/munged.log" \
        --seed-file="$E2E_DIR/munge/munged.seed" >>"$log/munged.out" 2>&1 &
    E2E_PIDS[munged]=$!
    e2e_wait_for "[[ -S '$E2E_DIR/munge/munge.socket' ]]" 10 || { e2e_log "munged did not start"; return 1; }
    slurmctld -D -i >>"$log/slurmctld.out" 2>&1 &
    E2E_PIDS[slurmctld]=$!
    e2e_wait_for "scontrol ping | grep -q UP" 30 || { e2e_log "slurmctld did not answer"; return 1; }
    e2e_slurmd_start || return 1
    e2e_log "cluster up ($E2E_MODE mode, $E2E_DIR, slurmctld port $E2E_CTLD_PORT)"
}

# Starts slurmd (in the foreground, so $! is its pid) and waits for the node to be idle.
e2e_slurmd_start() {
    local log=$E2E_DIR/log/slurmd.log mark=0
    [[ -f $log ]] && mark=$(wc -l <"$log")
    slurmd -D -N "$E2E_NODE" >>"$E2E_DIR/log/slurmd.out" 2>&1 &
    E2E_PIDS[slurmd]=$!
    # Listening (after a restart, slurmctld may still show the node idle from before).
    e2e_wait_for "tail -n +$((mark + 1)) '$log' | grep -q 'slurmd started on'" 60 ||
        { e2e_log "slurmd did not start: $(tail -n 5 "$log" 2>&1)"; return 1; }
    e2e_wait_for "[[ \$(sinfo -h -n $E2E_NODE -o %t) == idle ]]" 60 ||
        { e2e_log "node $E2E_NODE did not become idle: $(sinfo -h -n $E2E_NODE -o '%t %E' 2>&1)"; return 1; }
}

# Stops the slurmd that e2e_slurmd_start started (TERM, then KILL), by pid.
e2e_slurmd_stop() {
    e2e_stop_daemon slurmd
}

# Stops one daemon this shell started (TERM, then KILL after 10 s), by pid.
e2e_stop_daemon() {
    local name=$1 pid i
    pid=${E2E_PIDS[$name]:-}
    [[ -n $pid ]] || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        e2e_log "$name ($pid) ignored TERM; killing it"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
    unset "E2E_PIDS[$name]"
}

# Cancels the jobs, then stops the daemons this shell started (TERM, then KILL), by pid.
cluster_stop() {
    local name
    if [[ -n ${E2E_PIDS[slurmctld]:-} ]]; then
        scancel --quiet --partition=debug >/dev/null 2>&1 || true
        e2e_wait_for "[[ -z \$(squeue -h -o %i 2>/dev/null) ]]" 15 || true
    fi
    for name in slurmd slurmctld munged; do
        e2e_stop_daemon "$name"
    done
    if [[ $E2E_MODE == cgroup || $E2E_MODE == gres ]]; then
        e2e_remove_cgroups
    fi
    E2E_MODE=""
}

# Removes the (empty) cgroup directories slurmd made for this node in cgroup mode.
e2e_remove_cgroups() {
    local d
    for d in /sys/fs/cgroup/*/slurm_"$E2E_NODE"; do
        [[ -d $d ]] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
    done
    return 0
}

# Prints the end of the daemons' logs (on failure).
e2e_dump_logs() {
    local f
    for f in slurmctld.log slurmd.log; do
        [[ -f $E2E_DIR/log/$f ]] || continue
        printf '\n===== %s (last 150 lines) =====\n' "$f"
        tail -n 150 "$E2E_DIR/log/$f"
    done
}

# Stops the cluster and removes the private directory (keeps it with E2E_KEEP=1).
e2e_cleanup() {
    cluster_stop
    e2e_remove_dir
}

# Removes the private directory, if any (keeps it with E2E_KEEP=1).
e2e_remove_dir() {
    if [[ -n ${E2E_DIR:-} && -d $E2E_DIR ]]; then
        if [[ ${E2E_KEEP:-0} == 1 ]]; then
            e2e_log "kept $E2E_DIR"
        else
            rm -rf "$E2E_DIR"
        fi
    fi
}
