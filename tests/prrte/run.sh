#!/usr/bin/env bash
# The planner against PRRTE itself (issue 37): PRRTE 5.0's own `--map-by device=` maps every
# fixture of topologies/ (and the real exports in ../shared/topologies, where present) without
# launching anything, and a real PRRTE launch with --bind-to none shows each rank's variables;
# tests/prrte/compare.py compares both with `map-by-device plan`, case by case, and every
# difference must be a row of docs/prrte.md's table "Where the plugin and PRRTE differ" (and
# every row a difference). See docs/prrte.md.
#
#   tests/prrte/run.sh        # as scripts/test-all.sh's suite "prrte" runs it (as root: PRRTE
#                             # runs as root with --allow-run-as-root)
#
# Needs prterun 5 (Debian sid's libprrte-bin 5.0.0~rc1; scripts/test-all.sh installs it where
# apt offers it, PRRTE_PACKAGES below) and python3. Where no PRRTE with `--map-by device=` is
# installed (Debian 12 and 13 package PRRTE 2 and 3, or none), one "skipped: " line and
# "0 passed, 0 failed", at once. Ends with "N agree, N differ as documented", the PRRTE
# version and "N passed, N failed" (scripts/test-all.sh's convention); exits 1 if any failed.
# Starts no Slurm daemon: no machine-wide lock needed.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 1

skip() {
    echo "skipped: $*"
    echo "0 passed, 0 failed"
    exit 0
}

release=$(. /etc/os-release 2>/dev/null && echo "${PRETTY_NAME:-unknown}")
command -v prterun >/dev/null 2>&1 ||
    skip "the PRRTE comparison (tests/prrte): no prterun on $release; PRRTE 5 with --map-by device= is packaged in Debian sid only (libprrte-bin 5.0.0~rc1)"
version=$(prterun --version 2>/dev/null | sed -n 's/^prterun (PRRTE) \([0-9][0-9.a-z]*\).*/\1/p' | head -n 1)
[[ ${version%%.*} =~ ^[0-9]+$ ]] && ((${version%%.*} >= 5)) ||
    skip "the PRRTE comparison (tests/prrte): prterun ${version:-of unknown version} on $release has no --map-by device= (PRRTE 5 has it: Debian sid's libprrte-bin)"
command -v python3 >/dev/null 2>&1 || { echo "tests/prrte/run.sh: needs python3"; echo "0 passed, 1 failed"; exit 1; }

# The release CLI (scripts/test-all.sh --prepare builds it; cargo only checks it here).
cargo build --release --locked --quiet -p map-by-device || { echo "0 passed, 1 failed"; exit 1; }
cli=${CARGO_TARGET_DIR:-$ROOT/target}/release/map-by-device

xmls=(topologies/*.xml)
shared=$ROOT/../shared/topologies
if [[ -d $shared ]]; then
    xmls+=("$shared"/*.xml)
else
    echo "skipped: the real exports (../shared/topologies is not next to this checkout: they are outside the repository); the fixtures of topologies/ only"
fi
start=$SECONDS
python3 tests/prrte/compare.py "$cli" "${xmls[@]}"
rc=$?
echo "time: $((SECONDS - start)) s for ${#xmls[@]} topologies"
exit "$rc"
