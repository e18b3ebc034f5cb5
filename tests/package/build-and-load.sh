#!/bin/bash
# The plugin against a Slurm installed under a prefix (a release Debian does not ship, built
# from SchedMD's source: .ci/slurm-build.sh prefix), on a machine whose /usr/include holds
# another release's headers, as on an admin's build host:
# - the build as docs/admin-guide.md gives it (SLURM_INCLUDE_DIR, and the slurm-spank
#   crate's bindgen pointed at the same headers: packaging/slurm-info.sh bindgen-args);
# - SLURM_INCLUDE_DIR alone is refused by the build in one line that names the fix, where
#   /usr/include holds other headers (else the bindings would come from another release);
# - the prefix's own srun loads the plugin (`srun --help` lists --map-by-device), and
#   `map-by-device check` names the release the plugin was built for;
# - a step on the prefix's own slurmctld, slurmd and slurmstepd (a private single-node Slurm,
#   tests/e2e/lib.sh, with the prefix's programs first in PATH) is mapped as the tool plans it;
# - that srun refuses the plugin built for this machine's own Slurm ("Incompatible").
# CI builds 24.11 this way (.ci/run's PREFIX_RELEASES), from Debian's source package of it.
#
#   tests/package/build-and-load.sh PREFIX...     (ends with "N passed, N failed")
#
# Builds into $CARGO_TARGET_DIR/slurm-prefix (one directory for all prefixes: only the
# Slurm-dependent crates are rebuilt for the next one).
set -uo pipefail

# shellcheck source=tests/package/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
target=${CARGO_TARGET_DIR:-$repo/target}
work=$(mktemp -d /tmp/mbd-build-and-load.XXXXXX)
trap 'rm -rf "$work"' EXIT
(($#)) || die "usage: tests/package/build-and-load.sh PREFIX..."

host_series=$("$repo/packaging/slurm-info.sh" series 2>/dev/null || true)
# The plugin for this machine's own Slurm, and the tool (check).
(cd "$repo" && cargo build --quiet --release --locked -p map-by-device-spank -p map-by-device) ||
    die "cannot build the plugin for this machine's Slurm"
own=$target/release/libmap_by_device_spank.so
tool=$target/release/map-by-device
refusal_checked=0

# prefix_mapped_step PREFIX SO VERSION: a private Slurm of PREFIX's own daemons with the plugin
# SO, and a mapped step on it as the tool plans it (tests/package/lib.sh's mapped_as_planned).
prefix_mapped_step() {
    local prefix=$1 so=$2 version=$3
    (
        PATH=$prefix/sbin:$prefix/bin:$PATH
        E2E_PLUGIN_BUILT=$so
        e2e_init prefix || exit 1
        trap e2e_cleanup EXIT
        [[ $(slurmd -V) == "slurm $version" ]] || { echo "     slurmd -V: $(slurmd -V 2>&1)"; exit 1; }
        cluster_start affinity || { e2e_dump_logs; exit 1; }
        set_plugstack "topology=$E2E_TOPO/e2e-2gpu.xml"
        mapped_as_planned "$tool" "$E2E_TOPO/e2e-2gpu.xml"
    )
}

for prefix in "$@"; do
    include=$prefix/include
    series=$(SLURM_INCLUDE_DIR=$include "$repo/packaging/slurm-info.sh" series) ||
        { check "$prefix holds Slurm's headers" false; continue; }
    version=$(SLURM_INCLUDE_DIR=$include "$repo/packaging/slurm-info.sh" version)
    echo "build-and-load: Slurm $version under $prefix; /usr/include: ${host_series:-no Slurm headers}"
    out=$target/slurm-prefix
    if [[ -n $host_series && $refusal_checked == 0 ]]; then
        refusal_checked=1
        err=$(cd "$repo" && env -u BINDGEN_EXTRA_CLANG_ARGS SLURM_INCLUDE_DIR="$include" CARGO_TARGET_DIR=$out \
            cargo build --quiet --release --locked -p map-by-device-spank 2>&1)
        check "SLURM_INCLUDE_DIR alone, with $host_series headers in /usr/include: refused, naming BINDGEN_EXTRA_CLANG_ARGS" \
            bash -c '[[ $1 == *"also set BINDGEN_EXTRA_CLANG_ARGS=\"-I"*"/spank/shim -I$2\""* ]]' _ "$err" "$include"
    fi
    args=$(SLURM_INCLUDE_DIR=$include "$repo/packaging/slurm-info.sh" bindgen-args)
    if ! (cd "$repo" && SLURM_INCLUDE_DIR=$include BINDGEN_EXTRA_CLANG_ARGS=$args CARGO_TARGET_DIR=$out \
        cargo build --quiet --release --locked -p map-by-device-spank -p map-by-device-discover); then
        check "the plugin builds against Slurm $version's headers" false
        continue
    fi
    check "the plugin builds against Slurm $version's headers" true
    so=$work/$series/map_by_device.so
    mkdir -p "$work/$series/etc"
    cp "$out/release/libmap_by_device_spank.so" "$so"
    cp "$out/release/libmap_by_device_discover.so" "$work/$series/map_by_device_discover.so"
    conf=$work/$series/etc/slurm.conf
    cat >"$conf" <<EOF
ClusterName=buildandload
SlurmctldHost=localhost
PlugStackConfig=$work/$series/etc/plugstack.conf
NodeName=localhost CPUs=1 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES
EOF
    echo "required $so" >"$work/$series/etc/plugstack.conf"
    help=$(SLURM_CONF=$conf "$prefix/bin/srun" --help 2>&1)
    check "Slurm $version's srun loads it: srun --help lists --map-by-device" \
        bash -c '[[ $1 == *"--map-by-device"* ]]' _ "$help"
    [[ $help == *"--map-by-device"* ]] || echo "     srun --help: $(tail -n 3 <<<"$help" | tr '\n' '|')"
    check "a step on Slurm $version's own slurmctld and slurmd: srun -n 2 --map-by-device=gpu as planned" \
        prefix_mapped_step "$prefix" "$so" "$version"
    said=$("$tool" check --plugstack "$work/$series/etc/plugstack.conf" 2>&1)
    check "check names the release the plugin was built for ($series)" \
        bash -c '[[ $1 == *"built for Slurm $2"* ]]' _ "$said" "$series"
    if [[ -n $host_series && $host_series != "$series" && -f $own ]]; then
        echo "required $own" >"$work/$series/etc/plugstack.conf"
        err=$(SLURM_CONF=$conf "$prefix/bin/srun" --help 2>&1)
        check "Slurm $version's srun refuses the $host_series build (\"Incompatible\")" \
            bash -c '[[ $1 == *Incompatible* ]]' _ "$err"
    fi
done
checks_done
exit "$fail"
