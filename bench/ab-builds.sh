#!/usr/bin/env bash
# bench/ab-builds.sh — the same benchmarks on two builds of mzcache, the two
# taking turns round by round, so a loaded machine slows both alike:
#
#   A=/path/to/old/build B=build bash bench/ab-builds.sh [ROUNDS]
#
# Each round runs, on A then on B: bench_throughput (pp512 / tg128, 2
# threads, median of 3), bench_sessions (4 sessions of 2k tokens, half the
# KV budget, median switch TTFT) and, unless STORE=0, bench_store ttft
# (8k tokens stored, kill -9, resume TTFT; it also prefills 8k tokens from
# scratch for the recompute figure, minutes per side on 2 vCPUs). Prints
# every run's figure per side and the load average before each. Both builds
# need the three bench targets (cmake --build DIR --target bench_throughput
# bench_sessions bench_store).
set -euo pipefail
ROUNDS=${1:-3}
A=${A:?A=old build directory}
B=${B:?B=new build directory}
MODEL=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
STORE=${STORE:-1}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
declare -A pp tg sw rs
for r in $(seq 1 "$ROUNDS"); do
    for side in A B; do
        dir=${!side}
        load=$(cut -d' ' -f1 /proc/loadavg)
        echo "round $r side $side ($dir), load $load" >&2
        out=$("$dir/bench_throughput" -m "$MODEL" -t 2 -p 512 -n 128 -r 3 2>&1 | grep '^median')
        pp[$side]+=" $(sed -n 's/.*pp512=\([0-9.]*\).*/\1/p' <<<"$out")"
        tg[$side]+=" $(sed -n 's/.*tg128=\([0-9.]*\).*/\1/p' <<<"$out")"
        out=$("$dir/bench_sessions" -m "$MODEL" -k 4 -c 2048 -r 1 -R 3 -C 1 -b half -M mzcache 2>&1 | grep '^cell')
        sw[$side]+=" $(sed -n 's/.*ttft_ms=\([0-9.]*\).*/\1/p' <<<"$out")"
        if [ "$STORE" = 1 ]; then
            rm -rf "$TMP/store"
            out=$("$dir/bench_store" ttft "$MODEL" 8192 "$TMP/store" 2>&1 | grep '^resume:')
            rs[$side]+=" $(awk '{print $3}' <<<"$out")"
        fi
    done
done
for side in A B; do
    echo "$side (${!side}): pp512 tok/s${pp[$side]} | tg128 tok/s${tg[$side]} | switch TTFT ms${sw[$side]}${rs[$side]:+ | resume TTFT ms${rs[$side]}}"
done
