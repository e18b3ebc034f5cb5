#!/usr/bin/env bash
# README command 1: see the plugin work on a local single-node Slurm.
#
#   sudo scripts/demo.sh
#
# On a Debian 12 or 13 (or sid) machine (root: it starts daemons), this installs what is missing
# (Debian's Slurm: 22.05, 24.11 or 26.05; munge, the build dependencies, Rust), builds the plugin, starts a private Slurm on
# localhost (munged, slurmctld, slurmd -N node1, everything under a temporary directory) with
# the plugin reading topologies/e2e-2gpu.xml as the node's topology (two packages, one core,
# one GPU and one InfiniBand adapter each; the CPUs are this machine's 0 and 1) and two
# stand-in GPUs as Slurm GRES (gres.conf File=/dev/null and /dev/zero), runs
#
#   srun -n 2 --gpus-per-node=2 --map-by-device=gpu:verbose ...
#
# and prints what each task got, then stops the cluster and removes the directory.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=tests/e2e/lib.sh
source "$ROOT/tests/e2e/lib.sh"

if [[ $(id -u) != 0 ]]; then
    echo "scripts/demo.sh installs packages and starts slurmctld/slurmd: run it as root (sudo)" >&2
    exit 1
fi
e2e_install_packages
e2e_ensure_rust
e2e_build_plugin
e2e_init
trap e2e_cleanup EXIT
cluster_start affinity-gres
set_plugstack "topology=$E2E_TOPO/e2e-2gpu.xml"

PROBE=$E2E_DIR/work/show.sh
printf '%s\n' '#!/bin/bash' \
    'echo "task $SLURM_LOCALID: CPUs $(grep Cpus_allowed_list /proc/self/status | cut -f2), CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-(unset)}, NCCL_IB_HCA=${NCCL_IB_HCA:-(unset)}"' \
    >"$PROBE"
chmod 755 "$PROBE"

# Shows a command and its output: stderr (the verbose lines, the errors), then stdout sorted
# by task.
step() {
    local out err rc=0
    out=$(mktemp) err=$(mktemp)
    printf '\n$ %s\n' "${*/#$PROBE/show-task}"
    "$@" >"$out" 2>"$err" || rc=$?
    cat "$err"
    sort "$out"
    rm -f "$out" "$err"
    ((rc == 0)) || printf '(exit status %d)\n' "$rc"
}

echo
echo "The node as the plugin sees it (topology=topologies/e2e-2gpu.xml):"
echo "  GPU 0000:17:00.0 and mlx5_0 next to CPU 0 (package 0)"
echo "  GPU 0000:65:00.0 and mlx5_1 next to CPU 1 (package 1)"
echo "Slurm manages the two GPUs (GRES): a step maps those it asked Slurm for."
step srun -n 2 "$PROBE"
step srun -n 2 --gpus-per-node=2 --map-by-device=gpu:verbose "$PROBE"
step srun -n 2 --map-by-device=network "$PROBE"
echo
echo "A request the plugin cannot honour fails the step with the reason:"
step srun -n 2 --gpus-per-node=1 --map-by-device=gpu "$PROBE"
step srun -n 2 --map-by-device=gpu "$PROBE"
echo
echo "Stopping the cluster."
