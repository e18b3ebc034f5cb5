#!/usr/bin/env bash
# Mapped tasks inside containers (docs/user-guide.md, "Containers"): a real Slurm with the
# plugin (tests/e2e/lib.sh, task/affinity, topologies/e2e-2gpu.xml), whose tasks start a
# container runtime themselves, as users do: Charliecloud's ch-run (Debian 12: 0.31, 13: 0.38,
# sid: 0.45) and Apptainer (Debian sid only: no other release packages it). The image is a
# directory made here with no network: Debian's static busybox, /etc/passwd and /etc/group,
# and the probe. Each task prints what it sees, then what the same probe sees inside the
# container: its CPUs (/proc/self/status) and the variables the mapping sets
# (CUDA_VISIBLE_DEVICES, NCCL_IB_HCA, UCX_NET_DEVICES, PMIX_DEVICE_ID).
#
# - by default both runtimes pass the task's environment and its CPU mask: inside == outside;
# - the options that clear the environment (ch-run --unset-env='*', apptainer --cleanenv) drop
#   the variables (the CPU mask stays: it is the process's, not the environment's);
# - with the addition the user guide documents (each mapped variable passed by name:
#   ch-run --set-env=NAME=VALUE, APPTAINERENV_NAME set in the task), inside == outside again;
#   apptainer --env NAME=VALUE cannot carry a value with a comma (it splits on them). The plugin writes no APPTAINERENV_* itself (the decision
#   and its cost: docs/admin-guide.md, "Containers").
#
# Charliecloud runs as root and as an unprivileged user (nobody), Apptainer as nobody only (as
# root it wants a capability that unprivileged sandboxes do not grant). Runs as root; both
# runtimes need user namespaces, which a chrooted process is refused: CI enters its roots with
# pivot_root (.ci/roots.sh). Prints one line per case and "N passed, N failed".
#
#   tests/e2e/containers.sh            # every case
#   tests/e2e/containers.sh apptainer  # only the cases whose name contains "apptainer"

set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/e2e/lib.sh
source "$HERE/lib.sh"
# shellcheck source=tests/e2e/cases.sh
source "$HERE/cases.sh"

# The mapping every case runs: each task its GPU and the HCA beside it, bound to the GPU's CPU.
SPEC=gpu:adapters
# The variables a mapping may set that the recipes pass by name (docs/variables.md).
MAPPED_VARS="CUDA_VISIBLE_DEVICES ROCR_VISIBLE_DEVICES ZE_AFFINITY_MASK NCCL_IB_HCA UCX_NET_DEVICES PSM3_NIC PMIX_DEVICE_ID"

# The image: a directory with busybox, the accounts ch-run and apptainer look up, the probe.
make_image() {
    local img=$1 a
    mkdir -p "$img"/{bin,etc,proc,sys,dev,tmp,home,mnt,root} || return 1
    cp "$(command -v busybox)" "$img/bin/busybox" || return 1
    for a in sh cat cut env grep sed sort; do ln -sf busybox "$img/bin/$a"; done
    printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n' >"$img/etc/passwd"
    printf 'root:x:0:\nnogroup:x:65534:\n' >"$img/etc/group"
    # The probe (busybox sh inside, the host's sh outside): CPUs, then each variable ("-": unset).
    cat >"$img/probe" <<EOF
#!/bin/sh
out="cpus=\$(grep Cpus_allowed_list /proc/self/status | cut -f2)"
for v in CUDA_VISIBLE_DEVICES NCCL_IB_HCA UCX_NET_DEVICES PMIX_DEVICE_ID; do
    val=\$(env | sed -n "s/^\$v=//p")
    out="\$out \$v=\${val:--}"
done
echo "\$out"
EOF
    chmod -R a+rX "$img" && chmod 755 "$img/probe"
}

# The task: "task=N outside: ..." and "task=N inside: ..." for the runtime command MODE runs.
# The recipes of docs/user-guide.md ("Containers"), run in the task, where the variables are
# the task's own.
make_task() {
    cat >"$CT" <<EOF
#!/bin/bash
img=$IMG
mapped="$MAPPED_VARS"
EOF
    cat >>"$CT" <<'EOF'
mode=$1
outside=$(sh "$img/probe")
case $mode in
    ch) inside=$(ch-run "$img" -- /probe 2>&1) ;;
    ch-unset) inside=$(ch-run --unset-env='*' "$img" -- /probe 2>&1) ;;
    ch-set)
        set_env=()
        for v in $mapped; do [[ -v $v ]] && set_env+=("--set-env=$v=${!v}"); done
        inside=$(ch-run --unset-env='*' "${set_env[@]}" "$img" -- /probe 2>&1)
        ;;
    ap) inside=$(apptainer -s exec "$img" /probe 2>&1) ;;
    ap-clean) inside=$(apptainer -s exec --cleanenv "$img" /probe 2>&1) ;;
    ap-env)
        env_args=()
        for v in $mapped; do [[ -v $v ]] && env_args+=(--env "$v=${!v}"); done
        inside=$(apptainer -s exec --cleanenv "${env_args[@]}" "$img" /probe 2>&1)
        ;;
    ap-prefix)
        for v in $mapped; do [[ -v $v ]] && export "APPTAINERENV_$v=${!v}"; done
        inside=$(apptainer -s exec --cleanenv "$img" /probe 2>&1)
        ;;
    *) inside="unknown mode $mode" ;;
esac
echo "task=$SLURM_LOCALID outside: $outside"
echo "task=$SLURM_LOCALID inside: ${inside%%$'\n'*}"
EOF
    chmod 755 "$CT"
}

# The expected lines: each task's own GPU, HCA and CPU (e2e-2gpu.xml), outside, and inside
# as given ("same": the same line; "cleared": no variable, the same CPUs).
OUT0() { echo "cpus=0 CUDA_VISIBLE_DEVICES=$UUID0 NCCL_IB_HCA==mlx5_0,mlx5_1 UCX_NET_DEVICES=mlx5_0:1 PMIX_DEVICE_ID=gpu://HOST::nvml0,fab://9c63:c003:004d:2030::9c63:c003:004d:2030"; }
OUT1() { echo "cpus=1 CUDA_VISIBLE_DEVICES=$UUID1 NCCL_IB_HCA==mlx5_0,mlx5_1 UCX_NET_DEVICES=mlx5_1:1 PMIX_DEVICE_ID=gpu://HOST::nvml1,fab://9c63:c003:004d:2031::9c63:c003:004d:2031"; }
expected() {
    local t line
    for t in 0 1; do
        line=$("OUT$t")
        echo "task=$t inside: $([[ $1 == same ]] && echo "$line" || echo "cpus=$t CUDA_VISIBLE_DEVICES=- NCCL_IB_HCA=- UCX_NET_DEVICES=- PMIX_DEVICE_ID=-")"
        echo "task=$t outside: $line"
    done
}

# contained AS MODE EXPECT: a mapped srun of two tasks running the runtime MODE, as root or
# nobody; the tasks' lines, sorted, against EXPECT (same or cleared).
contained() {
    local as=$1 mode=$2 want=$3
    set_plugstack "topology=$FIX"
    if [[ $as == root ]]; then
        run env USER=root srun -n 2 --map-by-device=$SPEC "$CT" "$mode"
    else
        run runuser -u nobody -- env SLURM_CONF="$SLURM_CONF" USER=nobody HOME="$NOBODY_HOME" \
            srun --chdir=/tmp -n 2 --map-by-device=$SPEC "$CT" "$mode"
    fi
    # PMIX_DEVICE_ID names the node (gpu://HOST::nvml0): any name.
    OUT=$(sed 's#gpu://[^:]*::#gpu://HOST::#' <<<"$OUT" | sort)
    expect_rc 0 && expect_out "$(expected "$want" | sort)"
}

c_ch_root() { contained root ch same; }
c_ch_user() { contained nobody ch same; }
c_ch_unset() { contained nobody ch-unset cleared; }
c_ch_set() { contained nobody ch-set same; }
c_ap_user() { contained nobody ap same; }
c_ap_clean() { contained nobody ap-clean cleared; }
# Apptainer's --env splits its argument on commas: a value with one (NCCL_IB_HCA's list,
# PMIX_DEVICE_ID, several GPUs) is refused, which is why the user guide gives APPTAINERENV_.
c_ap_env() {
    set_plugstack "topology=$FIX"
    run runuser -u nobody -- env SLURM_CONF="$SLURM_CONF" USER=nobody HOME="$NOBODY_HOME" \
        srun --chdir=/tmp -n 2 --map-by-device=$SPEC "$CT" ap-env
    expect_rc 0 || return 1
    local t
    for t in 0 1; do
        expect_out_has "task=$t inside: Error for command \"exec\": invalid argument \"NCCL_IB_HCA==mlx5_0,mlx5_1\" for \"--env\" flag: mlx5_1 must be formatted as key=value" ||
            return 1
    done
}
c_ap_prefix() { contained nobody ap-prefix same; }

main() {
    local t0=$SECONDS cases=() have_apptainer=0 ver
    e2e_require_root "tests/e2e/containers.sh starts slurmd and slurmctld"
    # Apptainer: only where Debian packages it (sid: lib.sh's E2E_CONTAINER_PACKAGES).
    [[ " ${E2E_CONTAINER_PACKAGES[*]} " == *" apptainer "* ]] && have_apptainer=1
    e2e_install_packages "${E2E_CONTAINER_PACKAGES[@]}" || abort "installing ${E2E_CONTAINER_PACKAGES[*]}"
    e2e_build_plugin || abort "building the plugin"
    [[ -r $FIX ]] || abort "fixture $FIX missing"
    mapfile -t UUIDS < <(grep -o 'name="NVIDIAUUID" value="[^"]*"' "$FIX" | sed 's/.*value="//;s/"$//')
    ((${#UUIDS[@]} == 2)) || abort "expected 2 NVIDIAUUIDs in $FIX"
    UUID0=${UUIDS[0]} UUID1=${UUIDS[1]}
    cases_init
    IMG=$E2E_DIR/work/image CT=$E2E_DIR/work/contained.sh
    make_image "$IMG" || abort "making the image"
    make_task
    NOBODY_HOME=$E2E_DIR/work/nobody-home
    mkdir -p "$NOBODY_HOME" && chown nobody "$NOBODY_HOME"
    ver=$(dpkg-query -W -f='${Version}' charliecloud-runtime 2>/dev/null)
    NOTES+=("Charliecloud $ver (ch-run)")
    cases+=("containers: charliecloud ch-run as root: inside == outside|c_ch_root"
        "containers: charliecloud ch-run as nobody: inside == outside|c_ch_user"
        "containers: charliecloud --unset-env clears the variables, not the CPUs|c_ch_unset"
        "containers: charliecloud --unset-env, --set-env each: inside == outside|c_ch_set")
    if ((have_apptainer)); then
        NOTES+=("Apptainer $(dpkg-query -W -f='${Version}' apptainer 2>/dev/null)")
        cases+=("containers: apptainer exec as nobody: inside == outside|c_ap_user"
            "containers: apptainer --cleanenv clears the variables, not the CPUs|c_ap_clean"
            "containers: apptainer --env refuses a value with a comma (NCCL_IB_HCA)|c_ap_env"
            "containers: apptainer --cleanenv, APPTAINERENV_NAME each: inside == outside|c_ap_prefix")
    else
        SKIPS+=("Apptainer cases: no apptainer package in this Debian release (only sid has one)")
    fi
    run_phase affinity - "${cases[@]}"
    NOTES+=("containers took $((SECONDS - t0)) s")
    summary
    ((FAILED == 0))
}

main "$@"
