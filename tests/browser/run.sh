#!/usr/bin/env bash
# The pictures in a real browser (end-to-end tier): installs the test packages if missing
# (Debian's chromium among them; root), then runs tests/browser.rs, which makes every
# fixture's pictures with the real map-by-device, screenshots each SVG (those and the ones in
# docs/pictures/ and tests/expected/svg/) with headless Chromium, and checks each PNG: the
# SVG's own width and height, not blank, every declared colour painted.
#
#   sudo tests/browser/run.sh          # ends with "N passed, N failed"
#
# Needs no Slurm and no lock. MBD_CHROMIUM names another Chromium binary.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=tests/e2e/lib.sh
source "$ROOT/tests/e2e/lib.sh"
cd "$ROOT" || exit 1

if ! e2e_install_packages chromium || ! e2e_ensure_rust; then
    echo "browser: FAIL setup: the test packages (chromium) or Rust could not be installed"
    echo "0 passed, 1 failed"
    exit 1
fi
if ! command -v "${MBD_CHROMIUM:-chromium}" >/dev/null 2>&1; then
    echo "browser: FAIL setup: no ${MBD_CHROMIUM:-chromium} on PATH"
    echo "0 passed, 1 failed"
    exit 1
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --quiet --test browser -- --ignored --nocapture --test-threads=1 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
passed=$(grep -c '^browser: ok ' "$log")
failed=$(grep -c '^browser: FAIL ' "$log")
if ((rc != 0 && failed == 0)); then
    failed=1 # the test did not get to check a picture (build error, panic): say so
    echo "browser: FAIL cargo test --test browser exited with $rc"
fi
echo "$passed passed, $failed failed"
((rc == 0 && failed == 0))
