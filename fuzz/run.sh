#!/usr/bin/env bash
# Runs every cargo-fuzz target of fuzz/ for a bounded time each, one after the other, from a
# copy of its committed seeds (fuzz/seeds/TARGET; the tree is not written to, except the
# libFuzzer artifacts of a crash in fuzz/artifacts/TARGET). Fails on any crash, leak, timeout
# or broken invariant. CI runs it from scripts/test-all.sh.
#
#   fuzz/run.sh                       # every target, FUZZ_SECONDS (30) each
#   FUZZ_SECONDS=600 fuzz/run.sh plan # one target, ten minutes (the long local run)
#   FUZZ_KEEP=1 fuzz/run.sh           # keep the grown corpora (printed at the end)
#
# Needs the nightly toolchain and cargo-fuzz; installs what is missing (rustup's nightly,
# `cargo install cargo-fuzz`, Debian's g++ for libFuzzer itself). Runs under `nice -n 19`
# (the machines it runs on are shared). Prints one line per target with libFuzzer's final
# figures (executions, coverage, features, corpus), then exactly "N passed, N failed".

set -uo pipefail
FUZZ=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SECONDS_EACH=${FUZZ_SECONDS:-30}
TARGETS=(spec_parse plan xml_load driver_files cache_parse)
[[ $# -gt 0 ]] && TARGETS=("$@")
PASSED=0
FAILED=0

log() { printf 'fuzz: %s\n' "$*" >&2; }

summary() {
    echo "$PASSED passed, $FAILED failed"
    ((FAILED == 0))
}

abort() {
    echo "FAIL  $1"
    FAILED=$((FAILED + 1))
    summary
    exit 1
}

ensure_tools() {
    [[ -f $HOME/.cargo/env ]] && source "$HOME/.cargo/env"
    command -v cargo >/dev/null 2>&1 || { log "no cargo (scripts/test-all.sh installs Rust)"; return 1; }
    if ! cargo +nightly --version >/dev/null 2>&1; then
        command -v rustup >/dev/null 2>&1 || { log "no nightly toolchain and no rustup to install one"; return 1; }
        log "installing the nightly toolchain (rustup toolchain install nightly --profile minimal)"
        rustup toolchain install nightly --profile minimal >/dev/null || return 1
    fi
    if ! command -v c++ >/dev/null 2>&1; then
        [[ $(id -u) == 0 ]] || { log "libFuzzer needs a C++ compiler: apt-get install g++"; return 1; }
        log "installing g++ (libFuzzer is C++)"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends g++ >/dev/null || return 1
    fi
    if ! cargo fuzz --version >/dev/null 2>&1; then
        log "installing cargo-fuzz (cargo install cargo-fuzz --locked)"
        nice -n 19 cargo install cargo-fuzz --locked --quiet || return 1
    fi
}

# run_target NAME: fuzzes it for SECONDS_EACH seconds from a copy of its seeds.
run_target() {
    local name=$1 corpus out rc dict=() line figures
    [[ -d $FUZZ/seeds/$name ]] || { echo "FAIL  $name: no seeds in fuzz/seeds/$name"; return 1; }
    corpus=$WORK/corpus/$name out=$WORK/$name.log
    mkdir -p "$corpus" && cp "$FUZZ/seeds/$name"/* "$corpus"/
    case $name in
        spec_parse | plan) dict=("-dict=$FUZZ/dict/spec.dict") ;;
        xml_load) dict=("-dict=$FUZZ/dict/xml.dict") ;;
    esac
    # -timeout: one input taking 10 s is a hang, and fails like a crash.
    (cd "$FUZZ/.." && LSAN_OPTIONS="suppressions=$FUZZ/lsan.supp:print_suppressions=0" \
        nice -n 19 cargo +nightly fuzz run -O "$name" "$corpus" -- \
        -max_total_time="$SECONDS_EACH" -timeout=10 -print_final_stats=1 "${dict[@]}") >"$out" 2>&1
    rc=$?
    line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$out" | tail -n1)
    figures=$(sed -nE 's/^#([0-9]+)[[:space:]]+DONE[[:space:]]+cov: ([0-9]+) ft: ([0-9]+) corp: ([0-9]+)\/([0-9]+[a-zA-Z]*).*/\1 runs, cov \2, ft \3, corpus \4 (\5)/p' <<<"$line")
    if ((rc == 0)) && [[ -n $figures ]]; then
        printf 'ok    %-13s %s in %s s\n' "$name" "$figures" "$SECONDS_EACH"
        return 0
    fi
    printf 'FAIL  %-13s exit %s\n' "$name" "$rc"
    # The panic message (the line after "panicked at"), the sanitizer's verdict, the input.
    grep -v '^[[:space:]]*\[' "$out" | grep -E -A1 'panicked at|ERROR: |SUMMARY: |Assertion|Test unit written to' |
        cut -c1-400 | head -n 24 | sed 's/^/      /'
    log "reproduce: cargo +nightly fuzz run -O $name fuzz/artifacts/$name/<file>; show it: cargo +nightly fuzz fmt -O $name <file>"
    return 1
}

main() {
    ensure_tools || abort "installing the fuzzing tools"
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/mbd-fuzz.XXXXXX") || abort "creating a work directory"
    [[ ${FUZZ_KEEP:-0} == 1 ]] || trap 'rm -rf "$WORK"' EXIT
    log "building the targets (cargo +nightly fuzz build)"
    (cd "$FUZZ/.." && nice -n 19 cargo +nightly fuzz build -O >"$WORK/build.log" 2>&1) ||
        { tail -n 30 "$WORK/build.log"; abort "building the fuzz targets"; }
    local t
    for t in "${TARGETS[@]}"; do
        if run_target "$t"; then PASSED=$((PASSED + 1)); else FAILED=$((FAILED + 1)); fi
    done
    [[ ${FUZZ_KEEP:-0} == 1 ]] && log "corpora kept in $WORK/corpus"
    summary
}

main
