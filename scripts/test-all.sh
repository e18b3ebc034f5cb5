#!/usr/bin/env bash
# README command 2: every test.
#
#   sudo scripts/test-all.sh
#
# Installs what is missing (Debian packages, Rust), checks the formatting, runs the unit and
# integration tests of the whole workspace (cargo test --workspace), then the end-to-end
# suite on a local single-node Slurm (tests/e2e/run.sh, root) and on a three-node Slurm in
# network namespaces (tests/e2e/multinode/run.sh, root; installs iproute2), then builds, installs and
# exercises the Debian package and checks the RPM (tests/package/run.sh). CI runs this (.ci/run).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=tests/e2e/lib.sh
source "$ROOT/tests/e2e/lib.sh"
cd "$ROOT"

if [[ $(id -u) != 0 ]]; then
    echo "scripts/test-all.sh installs packages and starts slurmctld/slurmd: run it as root (sudo)" >&2
    exit 1
fi
t0=$SECONDS
e2e_install_packages
e2e_ensure_rust
if cargo fmt --version >/dev/null 2>&1; then
    echo "== cargo fmt --check"
    cargo fmt --all --check
fi
echo "== cargo test --workspace"
cargo test --workspace
echo "== fuzz/run.sh" && "$ROOT/fuzz/run.sh"
echo "== tests/e2e/run.sh"
"$ROOT/tests/e2e/run.sh"
echo "== tests/e2e/multinode/run.sh"
"$ROOT/tests/e2e/multinode/run.sh"
echo "== tests/e2e/hardening.sh" && "$ROOT/tests/e2e/hardening.sh"
echo "== tests/browser/run.sh" && "$ROOT/tests/browser/run.sh"
echo "== tests/package/run.sh"
"$ROOT/tests/package/run.sh"
echo "all tests passed in $((SECONDS - t0)) s"
