#!/usr/bin/env bash
# Runs every libFuzzer target in BUILD_DIR for SECONDS each, starting from the
# committed seeds in tests/fuzz/corpus/<name>/ (copied, so the seeds stay as
# committed), and prints executions, corpus growth and crashes per target.
# Exit 1 on a crash.
# FUZZ_JOBS targets run at a time (default: the number of CPUs, at most 2, as
# ctest's CTEST_JOBS): each libFuzzer process is one thread, so on 2 vCPUs two
# at a time give each target its SECONDS on a core of its own in half the
# wall time. The reports are printed in name order once all have run.
set -uo pipefail
BUILD=${1:-build-fuzz}
SECONDS_EACH=${2:-60}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
ncpu=$(nproc 2>/dev/null || echo 1)
JOBS=${FUZZ_JOBS:-$((ncpu < 2 ? ncpu : 2))}
case $JOBS in '' | *[!0-9]* | 0) echo "run-fuzzers: FUZZ_JOBS must be a positive integer, not '$JOBS'" >&2; exit 2 ;; esac

# One target: its report in $WORK/<name>.report, exit 1 on a crash.
fuzz_one() {
    local bin=$1 name short seeds log rc execs corpus
    name=$(basename "$bin"); short=${name#fuzz_}
    mkdir -p "$WORK/$short"
    [ -d "$ROOT/tests/fuzz/corpus/$short" ] && cp -r "$ROOT/tests/fuzz/corpus/$short/." "$WORK/$short/"
    seeds=$(find "$WORK/$short" -type f | wc -l)
    log="$WORK/$name.log"
    MZ_FUZZ_MODEL="$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf" \
        "$bin" -max_total_time="$SECONDS_EACH" -print_final_stats=1 -max_len=65536 -artifact_prefix="$WORK/$name-" \
        "$WORK/$short" >"$log" 2>&1
    rc=$?
    execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | awk '{print $2}')
    [ -z "$execs" ] && execs=$(grep -oE '#[0-9]+' "$log" | tail -n1 | tr -d '#')
    if [ $rc -ne 0 ]; then
        { echo "$name: CRASH after ${execs:-?} executions (exit $rc)"; tail -n 30 "$log"; } >"$WORK/$name.report"
        mkdir -p "$ROOT/build-fuzz-crashes" && cp "$WORK/$name-"* "$ROOT/build-fuzz-crashes/" 2>/dev/null
        return 1
    fi
    corpus=$(find "$WORK/$short" -type f | wc -l)
    echo "$name: ${execs:-?} executions in ${SECONDS_EACH}s, corpus $seeds -> $corpus inputs, no crash" \
        >"$WORK/$name.report"
}

status=0
names=()
running=0
for bin in "$BUILD"/fuzz_*; do
    [ -x "$bin" ] || continue
    names+=("$(basename "$bin")")
    if [ $running -ge "$JOBS" ]; then
        wait -n || status=1
        running=$((running - 1))
    fi
    fuzz_one "$bin" &
    running=$((running + 1))
done
while [ $running -gt 0 ]; do
    wait -n || status=1
    running=$((running - 1))
done
for name in "${names[@]}"; do
    cat "$WORK/$name.report" 2>/dev/null || { echo "$name: no report"; status=1; }
done
exit $status
