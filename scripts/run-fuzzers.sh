#!/usr/bin/env bash
# Runs every libFuzzer target in BUILD_DIR for SECONDS each, starting from the
# committed seeds in tests/fuzz/corpus/<name>/ (copied, so the seeds stay as
# committed), and prints executions, corpus growth and crashes per target.
# Exit 1 on a crash.
set -uo pipefail
BUILD=${1:-build-fuzz}
SECONDS_EACH=${2:-60}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
status=0
for bin in "$BUILD"/fuzz_*; do
    [ -x "$bin" ] || continue
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
        echo "$name: CRASH after ${execs:-?} executions (exit $rc)"; tail -n 30 "$log"
        mkdir -p "$ROOT/build-fuzz-crashes" && cp "$WORK/$name-"* "$ROOT/build-fuzz-crashes/" 2>/dev/null
        status=1
    else
        corpus=$(find "$WORK/$short" -type f | wc -l)
        echo "$name: ${execs:-?} executions in ${SECONDS_EACH}s, corpus $seeds -> $corpus inputs, no crash"
    fi
done
exit $status
