#!/bin/bash
# shellcheck disable=SC2016 # the bash -c snippets expand their own arguments
# The Debian package, installed: builds the .deb (packaging/build-deb.sh), checks its control
# data and contents, installs it with apt-get, enables the plugin the way an administrator
# does (uncommenting the packaged /etc/slurm/plugstack.conf.d/map-by-device.conf, which
# Debian's /etc/slurm/plugstack.conf includes), starts a private single-node Slurm whose
# plugstack.conf includes the system one, and runs a mapped srun through the installed
# plugin. Then the admin guide's "Upgrading": a rebuilt package (the same build repacked with
# a higher version, so that dpkg installs every file anew, as a rebuild does) installed while
# slurmd runs; the steps refuse the old slurmd's topology cache until slurmd is restarted,
# then use the new one, and a mapped srun maps; and what a removal that keeps the conffile
# (apt full-upgrade moving Slurm past the package's release) does to every srun, and the fix.
# Nothing from the build tree is loaded. The package is purged at the end, whatever happens.
#
#   tests/package/deb-install.sh [DEB]      (root; without DEB, builds one)
#
# Refuses to run when map-by-device is already installed (it would purge it).
set -uo pipefail

# shellcheck source=tests/package/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[[ $(id -u) == 0 ]] || die "run as root: this test installs and removes a package"
if dpkg-query -W -f='${Status}' map-by-device 2>/dev/null | grep -q "install ok installed"; then
    die "map-by-device is already installed here and this test would purge it: apt-get purge map-by-device first"
fi

deb=${1:-}
if [[ -z $deb ]]; then
    deb=$("$repo/packaging/build-deb.sh" | tail -n 1) || die "packaging/build-deb.sh failed"
fi
[[ $deb == /* ]] || deb=$PWD/$deb
[[ -f $deb ]] || die "no such package: $deb"
echo "deb-install: $deb"

plugindir=$("$repo/packaging/slurm-info.sh" plugin-dir)
plugin=$plugindir/map_by_device.so
snippet=/etc/slurm/plugstack.conf.d/map-by-device.conf
topology=/usr/share/map-by-device/topologies/e2e-2gpu.xml
installed=0
created_plugstack=0

# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
    ((created_plugstack)) && rm -f /etc/slurm/plugstack.conf
    if [[ -n ${E2E_DIR:-} ]]; then
        ((fail == 0)) || e2e_dump_logs
        e2e_cleanup
    fi
    if ((installed)); then
        DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq map-by-device >/dev/null 2>&1 ||
            dpkg --purge map-by-device >/dev/null 2>&1
    fi
}
trap cleanup EXIT

# --- The package as built --------------------------------------------------------------
depends=$(dpkg-deb -f "$deb" Depends)
slurm_deb=$("$repo/packaging/slurm-info.sh" deb-version)
slurm_next=$("$repo/packaging/slurm-info.sh" next-series)
slurm_series=$("$repo/packaging/slurm-info.sh" series)
echo "deb-install: Depends: $depends"
check "the file name names the Slurm release (+slurm$slurm_series)" \
    bash -c '[[ $1 == map-by-device_*+slurm${2}_*.deb ]]' _ "$(basename "$deb")" "$slurm_series"
check "the version names the Slurm release" \
    bash -c '[[ $1 == *+slurm$2 ]]' _ "$(dpkg-deb -f "$deb" Version)" "$slurm_series"
check "the description says which Slurm release" grep -qF "This build is for Slurm $slurm_series" <<<"$(dpkg-deb -f "$deb" Description)"
slurm_pkg=$("$repo/packaging/slurm-info.sh" deb-package)
slurm_other=$("$repo/packaging/slurm-info.sh" deb-other)
slurm_version=$("$repo/packaging/slurm-info.sh" version)
check "Depends on the Slurm it was built against ($slurm_pkg $slurm_deb)" \
    grep -qF "$slurm_pkg (>= $slurm_deb)" <<<"$depends"
check "Depends on nothing past that Slurm release (<< $slurm_next~)" \
    grep -qF "$slurm_pkg (<< $slurm_next~)" <<<"$depends"
check "Depends accepts the other family of Slurm packages ($slurm_other) in the same release bounds" \
    grep -qF "$slurm_pkg (>= $slurm_deb) | $slurm_other (>= $slurm_version), $slurm_pkg (<< $slurm_next~) | $slurm_other (<< $slurm_next~)" <<<"$depends"
# srun loads the plugin: what it needs beyond what srun maps costs every step (spank/build.rs).
unpacked=$(mktemp -d)
dpkg-deb -x "$deb" "$unpacked"
needed=$(readelf -d "$unpacked$plugin" 2>&1 | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
lib_needed=$(readelf -d "$unpacked$plugindir/map_by_device_discover.so" 2>&1 | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
rm -rf "$unpacked"
echo "deb-install: the plugin needs: $needed; the discovery library: $lib_needed"
check "the discovery library links hwloc" bash -c '[[ $1 == *libhwloc.so.15* ]]' _ "$lib_needed"
check "the plugin carries its unwinder (no libgcc_s.so.1 for srun to load)" \
    bash -c '[[ $1 == *libc.so.6* && $1 != *libgcc_s* ]]' _ "$needed"
check "the plugin does not link hwloc (srun does not load it; the discovery library does)" \
    bash -c '[[ $1 == *libc.so.6* && $1 != *hwloc* ]]' _ "$needed"
contents=$(dpkg-deb -c "$deb" | awk '{print $6}' | sed 's|^\./|/|')
for f in "$plugin" "$plugindir/map_by_device_discover.so" /usr/bin/map-by-device "$snippet" /usr/share/man/man1/map-by-device.1.gz \
    /usr/share/man/man8/map-by-device.8.gz /usr/share/doc/map-by-device/README.md \
    /usr/share/doc/map-by-device/admin-guide.md /usr/share/doc/map-by-device/user-guide.md "$topology" \
    /usr/share/doc/map-by-device/pictures/turin-h200-interleave.svg; do
    check "contains $f" grep -qx "$f" <<<"$contents"
done
check "the snippet is a conffile" grep -qx "$snippet" <<<"$(dpkg-deb -I "$deb" conffiles)"

# --- Installed --------------------------------------------------------------------------
e2e_install_packages || die "cannot install the Slurm packages"
# Debian's Slurm ships /etc/slurm/plugstack.conf with `include /etc/slurm/plugstack.conf.d/*.conf`;
# SchedMD's slurm-smd packages ship none: the admin creates it (docs/admin-guide.md).
if [[ ! -e /etc/slurm/plugstack.conf ]]; then
    echo "deb-install: no /etc/slurm/plugstack.conf ($slurm_pkg): creating it as the admin guide says"
    printf 'include /etc/slurm/plugstack.conf.d/*.conf\n' >/etc/slurm/plugstack.conf
    created_plugstack=1
fi
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$deb" >/dev/null ||
    die "apt-get install $deb failed"
installed=1
check "installed" dpkg-query -W map-by-device
check "the plugin is in Slurm's plugin directory" test -f "$plugin"
check "the tool is on PATH" test "$(command -v map-by-device)" = /usr/bin/map-by-device
# The test-hooks feature (forced panics, pauses) is for the e2e suites' own builds: the package's
# plugin and tool hold none of its code. Markers: the environment variables only that code reads,
# and its panic text; the first check keeps them honest (the hook code still names them).
hook_markers=(MBD_TEST_PANIC_FILE MBD_TEST_PAUSE_AT "test-hooks: forced panic")
check "the test-hook markers are still the names src/test_hooks.rs uses" \
    bash -c 'for m in "$@"; do grep -qF -- "$m" "'"$repo"'/src/test_hooks.rs" || exit 1; done' _ "${hook_markers[@]}"
check "the packaged plugin, its discovery library and the tool contain no test-hook code" \
    bash -c 'for m in "${@:4}"; do ! grep -qaF -- "$m" "$1" "$2" "$3" || { echo "found $m"; exit 1; }; done' \
    _ "$plugin" "$plugindir/map_by_device_discover.so" /usr/bin/map-by-device "${hook_markers[@]}"
check "the snippet is installed, all comments" \
    bash -c "test -f $snippet && ! grep -v -e '^[[:space:]]*#' -e '^[[:space:]]*\$' $snippet"
check "the snippet's line names the installed plugin" grep -qx "#required $plugin" "$snippet"
check "check on a fixture: ready" map-by-device check --topology /usr/share/map-by-device/topologies/turin-h200.xml >/dev/null

# --- A local Slurm that reads the system's plugstack.conf -----------------------------------
e2e_init || die "e2e_init failed"
printf 'include /etc/slurm/plugstack.conf\n' >"$E2E_DIR/etc/plugstack.conf"
out=$(map-by-device check 2>&1)
check "check before enabling: exit 1, 'not enabled'" \
    bash -c '[[ $1 == *"the plugin is not enabled"* ]]' _ "$out"
cluster_start affinity || die "the local Slurm did not start"
check "srun --help: no --map-by-device while the snippet is commented out" \
    bash -c '! srun --help 2>&1 | grep -q -- --map-by-device'

# Enable it as an administrator would: uncomment the plain line, add an argument.
sed -i "0,\|^#required $plugin\$|s||required $plugin topology=$topology|" "$snippet"
check "enabled: the snippet has one active line" test "$(grep -c '^required' "$snippet")" = 1
# (--hostname: the fixture's own host name is not this Slurm's node, node1, which gres.conf names)
out=$(map-by-device check --hostname "$E2E_NODE")
status=$?
check "map-by-device check (SLURM_CONF's plugstack, its includes): ready, exit 0" \
    bash -c '[[ $1 == 0 && $2 == *"Ready: yes"* && $2 == *"(present)"* ]]' _ "$status" "$out"
check "check names the release the plugin was built for and this node's (slurmd -V)" \
    bash -c '[[ $1 == *"    built for Slurm $2 ("* && $1 == *"  Slurm on this node: $2."*"(slurmd -V"* ]]' _ "$out" "$slurm_series"
((status == 0)) || printf "     %s\n" "${out//$'\n'/$'\n     '}"
check "srun --help lists --map-by-device" bash -c 'srun --help 2>&1 | grep -q -- "--map-by-device"'

# mapped_step WHEN: the installed tool's plan is what the installed plugin does.
mapped_step() {
    check "srun -n 2 --map-by-device=gpu ($1): each task on its GPU's CPU with its GPU's UUID" \
        mapped_as_planned map-by-device "$topology"
    check "verbose ($1): one line per task on srun's stderr" \
        test "$(grep -c 'map-by-device.*task [01]' "$E2E_DIR/work/srun.err")" = 2
    sed 's/^/     /' "$E2E_DIR/work/srun.err"
}
mapped_step installed

err=$(srun -n 3 --map-by-device=gpu true 2>&1)
status=$?
check "a refusal fails the step with the engine's message" \
    bash -c '[[ $1 != 0 && $2 == *"add :shared"* ]]' _ "$status" "$err"
echo "     srun -n 3 exit $status: ${err//$'\n'/ | }"
check "the node runs the next step" srun -n 1 --map-by-device=none true

# --- Upgraded (docs/admin-guide.md, "Upgrading") ------------------------------------------
# The node's own topology, from slurmd's cache (no topology=): slurmd writes it at its start.
upgrade_conf=$E2E_DIR/etc/upgrade.toml
cache_file=$E2E_DIR/cache/topology.json
printf 'cache_dir = "%s"\n' "$E2E_DIR/cache" >"$upgrade_conf" && chmod 644 "$upgrade_conf"
sed -i "s|^required $plugin .*|required $plugin config=$upgrade_conf|" "$snippet"
log=$E2E_DIR/log/slurmd.log
# cache_step WHAT: a step (its outcome does not matter: this machine may have no GPU), and
# whether slurmd.log, since the step began, says WHAT.
cache_step() {
    local mark i
    mark=$(wc -l <"$log")
    srun -n 1 --map-by-device=gpu true >/dev/null 2>&1
    for ((i = 0; i < 50; i++)); do
        tail -n +"$((mark + 1))" "$log" | grep -qF -- "$1" && return 0
        sleep 0.1
    done
    return 1
}
{ e2e_slurmd_stop && e2e_slurmd_start; } || die "slurmd did not restart"
check "slurmd, restarted with the cache settings, wrote the topology cache" test -s "$cache_file"
check "a step reads the topology from slurmd's cache" cache_step "topology from slurmd's cache $cache_file"
old_version=$(dpkg-query -W -f='${Version}' map-by-device)
new_version=$old_version+rebuilt1
rebuilt=$E2E_DIR/work/map-by-device_${new_version}.deb
tree=$E2E_DIR/work/rebuilt
{ dpkg-deb -R "$deb" "$tree" && sed -i "s/^Version: .*/Version: $new_version/" "$tree/DEBIAN/control" &&
    dpkg-deb -b "$tree" "$rebuilt" >/dev/null; } || die "cannot repack $deb as $new_version"
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$rebuilt" >/dev/null ||
    die "apt-get install $rebuilt failed"
check "upgraded to $new_version while slurmd runs" test "$(dpkg-query -W -f='${Version}' map-by-device)" = "$new_version"
check "the upgrade kept the administrator's edited plugstack line" grep -qx "required $plugin config=$upgrade_conf" "$snippet"
check "before slurmd restarts, a step refuses the old plugin's cache and discovers the node itself" \
    cache_step "written by another build of the plugin"
{ e2e_slurmd_stop && e2e_slurmd_start; } || die "slurmd did not restart after the upgrade"
check "after slurmd restarts, a step reads the new plugin's cache" cache_step "topology from slurmd's cache $cache_file"
out=$(map-by-device check 2>&1)
check "check after the upgrade: the steps use the new cache" \
    bash -c '[[ $1 == *"topology cache: used by the steps: slurmd'"'"'s cache $2 "* ]]' _ "$out" "$cache_file"
sed -i "s|^required $plugin .*|required $plugin topology=$topology|" "$snippet"
mapped_step upgraded

# A removal that keeps the conffile (apt full-upgrade removes the package when Slurm moves past
# its release): the required line stays and names a missing file, so every srun fails, until
# the line is commented out or the package purged.
DEBIAN_FRONTEND=noninteractive apt-get remove -y -qq map-by-device >/dev/null
check "removed, not purged: the snippet's required line stays" grep -q "^required $plugin" "$snippet"
err=$(srun -n 1 true 2>&1)
status=$?
echo "     srun after the removal: exit $status: ${err//$'\n'/ | }"
check "removed, not purged: every srun fails (the required line names a missing plugin)" \
    bash -c '[[ $1 != 0 && $2 == *map_by_device.so* ]]' _ "$status" "$err"
DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq map-by-device >/dev/null
installed=0
check "purged: srun runs again" srun -n 1 true

cluster_stop

# --- Removed ----------------------------------------------------------------------------
check "purged: the plugin is gone" test ! -e "$plugin"
check "purged: the discovery library is gone" test ! -e "$plugindir/map_by_device_discover.so"
check "purged: the tool is gone" test ! -e /usr/bin/map-by-device
check "purged: the (edited) snippet is gone" test ! -e "$snippet"
check "Slurm's own plugstack.conf is untouched" grep -qx 'include /etc/slurm/plugstack.conf.d/\*.conf' /etc/slurm/plugstack.conf

((fail == 0)) && echo "deb-install: all checks passed" || echo "deb-install: FAILED"
checks_done
exit "$fail"
