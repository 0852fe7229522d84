#!/usr/bin/env bash
# Where a prefill's wall time goes, stage by stage (MZ_FORWARD_PHASES=1,
# docs/ARCHITECTURE.md "Forward pass"), at several thread counts: the
# llama3.2-1b F16 shape (target 1's short cell at 16 threads, issue 32) at
# 16 / 8 / 4 / 1 threads and smollm2-135m Q4_0 at 16 and 2, pp512 each.
# On the 16-vCPU machine (../shared/DEVICE.md), after
# `../shared/device/bundle.sh build` here: device run, carry [".bundle"]:
#   bash bench/device-phases.sh
# Locally (this checkout's build/ and models/): MZ_LOCAL=1 THREADS="2" bash bench/device-phases.sh
set -uo pipefail
OUTD=${OUT:-/tmp/phases-out}; mkdir -p "$OUTD"
. "$(dirname "$0")/device-lib.sh" # BIN, LIBP, VOCAB, BUNDLE; mz
lscpu | grep -iE "^CPU\(s\)|thread|core|socket|model name|MHz|L2|L3"
W=${WORK:-/tmp/phases-models}; mkdir -p "$W"
[ -f "$W/l.gguf" ] || mz mzcache gen-model --preset llama3.2-1b --type F16 --vocab-from "$VOCAB" -o "$W/l.gguf" >/dev/null
[ -f "$W/s.gguf" ] || mz mzcache gen-model --preset smollm2-135m --type Q4_0 --vocab-from "$VOCAB" -o "$W/s.gguf" >/dev/null
phases() { # label model threads tokens-to-decode reps
    echo "== $1 t=$3"
    MZ_FORWARD_PHASES=1 mz bench_throughput -m "$2" -t "$3" -p 512 -n "$4" -r "$5" 2>&1 | grep -E "prefill|^median"
}
for t in ${THREADS:-16 8 4}; do phases "llama3.2-1b F16" "$W/l.gguf" "$t" 4 2; done
phases "llama3.2-1b F16" "$W/l.gguf" 1 2 1
for t in 16 2; do phases "smollm2-135m Q4_0" "$W/s.gguf" "$t" 4 2; done
