#!/usr/bin/env bash
# Issue 16's switching benchmark on the 16-vCPU machine: bench_sessions over
# generated models of the SmolLM2-135M and qwen3-0.6b shapes (that machine
# has no real model file: gen-model makes them from the bundle's vocabulary),
# K sessions of N tokens, budgets all / half / an eighth of the sessions' KV,
# mzcache against recompute (re-prefill of the history), os-paging and two
# single-session references, all measured in the same run of each cell: the
# same tiers (the switch's placement reproduced, the restore target's
# reference) and the same bytes by the session's own eviction. Prints one markdown row per (cell, budget) and writes
# them to $OUT/sessions.md, the full log to $OUT/sessions.log.
#
# On the 16-vCPU machine (see ../shared/DEVICE.md), from the project root,
# after `make build` and `../shared/device/bundle.sh build` here:
#   device run, carry [".bundle"]:  bash bench/device-sessions.sh
# Locally (small cells; MZ_BUILD=dir for another build folder):
#   MZ_LOCAL=1 THREADS=2 CELLS="smollm2-135m:Q8_0:2:1024" bash bench/device-sessions.sh
# Knobs: CELLS ("preset:TYPE:K:N ..." in the order run, most wanted first),
# THREADS (16), ROUNDS (counted rounds per budget after a warm-up round;
# default 8/K, at least 1: 8 counted switches per budget), REPS (single-session
# reference and recompute repetitions: 3), LIMIT (seconds: no cell starts
# after it, 240), HARD (seconds: a running cell is killed then, 330, so the
# command ends within 5.5 min; what a killed cell printed stays in the log).
# Swap files go to the default directory (~/.cache/mzcache) and are removed
# with their sessions; with no device profile there, the policy uses its
# built-in estimate (a warning in the log).
set -uo pipefail
OUTD=${OUT:-/tmp/sessions-out}; mkdir -p "$OUTD"
THREADS=${THREADS:-16}
ROUNDS=${ROUNDS:-}
REPS=${REPS:-3}
LIMIT=${LIMIT:-240}
HARD=${HARD:-330}
# The issue's grid is K = 2, 4, 8 x N = 2k-8k x two shapes; most wanted first:
# qwen3-0.6b at the 4k target with K = 2 and 4 (~80-90 s each there), one 8k
# cell (SmolLM2 K = 2, the cheapest), qwen3-0.6b K = 8 (~120 s: it may be
# killed at HARD, its finished budgets stay in sessions.log), then the rest.
CELLS=${CELLS:-"qwen3-0.6b:Q8_0:2:4096 qwen3-0.6b:Q8_0:4:4096 smollm2-135m:Q8_0:2:8192 qwen3-0.6b:Q8_0:8:4096 smollm2-135m:Q8_0:4:4096 smollm2-135m:Q8_0:8:2048 qwen3-0.6b:Q8_0:2:8192 qwen3-0.6b:Q8_0:8:2048 smollm2-135m:Q8_0:8:8192 qwen3-0.6b:Q8_0:8:8192"}
W=${WORK:-/tmp/sessions-models}; mkdir -p "$W"
. "$(dirname "$0")/device-lib.sh"
: >"$OUTD/sessions.log"
{
echo "machine: $(nproc) vCPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), threads $THREADS, rounds ${ROUNDS:-8/K}, reps $REPS, $(date -u +%FT%TZ)"
echo
dl_head model K N budget "evicted KV per switch" \
    "switch placement: stored raw+enc / compressed / weight blocks" "mzcache TTFT ms" \
    "os-paging ms" "recompute ms" "single ms (same tiers)" "single ms (same bytes, own eviction)" \
    "recompute / mzcache" "mzcache / single same tiers" "mzcache / single own eviction"
} | tee "$OUTD/sessions.md"
skipped="" killed=""
for cell in $CELLS; do
    IFS=: read -r preset type k n <<<"$cell"
    if [ "$(dl_elapsed)" -ge "$LIMIT" ]; then skipped="$skipped $cell"; continue; fi
    f="$W/$preset-$type.gguf"
    dl_gen_model "$preset" "$type" "$f" "$OUTD/sessions.log" ||
        { echo "gen-model $preset $type failed" | tee -a "$OUTD/sessions.log"; continue; }
    t0=$(date +%s)
    at=$(dl_elapsed)
    left=$(( HARD - at ))
    [ "$left" -gt 0 ] || { skipped="$skipped $cell"; continue; }
    r=${ROUNDS:-$(( k >= 8 ? 1 : 8 / k ))}
    echo "=== $cell rounds $r (at $at s, killed after $left s)" >>"$OUTD/sessions.log"
    timeout "$left" env LD_LIBRARY_PATH="$LIBP" "$BIN/bench_sessions" -m "$f" -k "$k" -c "$n" \
        -t "$THREADS" -r "$r" -R "$REPS" >"$W/cell.out" 2>&1
    rc=$?
    [ "$rc" = 124 ] && killed="$killed $cell"
    cat "$W/cell.out" >>"$OUTD/sessions.log"
    echo "=== $cell: rc $rc, $(( $(date +%s) - t0 )) s" >>"$OUTD/sessions.log"
    # The bench names the file; the table names the shape and type.
    grep '^| .*\.gguf |' "$W/cell.out" | sed "s/^| [^|]* |/| $preset $type |/" | tee -a "$OUTD/sessions.md"
done
{
echo
echo "total $(dl_elapsed) s${killed:+; killed at HARD $HARD s (partial rows in sessions.log):$killed}${skipped:+; not started (LIMIT $LIMIT s):$skipped}"
} | tee -a "$OUTD/sessions.md"
