#!/usr/bin/env bash
# Thread scaling: our bench_throughput against llama.cpp's llama-bench (same
# vendored version as llama-cpp-python 0.3.36, built with the ISA flags
# scripts/install-peer.sh picks for this CPU), same generated GGUF files,
# pp512 and tg128 at several thread counts, the two sides alternating run by
# run (cell() below). Prints a markdown table
# (docs/BENCHMARKS.md, "Thread scaling") and writes it to $OUT/scaling.md.
#
# On the 16-vCPU machine (see ../shared/DEVICE.md), from the project root,
# after `../shared/device/bundle.sh build --llama-cpp` here:
#   device run, carry [".bundle"]:  bash bench/device-scaling.sh
# Locally (`make bench` does this with the llama-bench scripts/install-peer.sh
# builds; MZ_BUILD=dir for another build folder):
#   MZ_LOCAL=1 THREADS="2" bash bench/device-scaling.sh
# (a bundle made by hand elsewhere: BUNDLE=dir, with bin/ lib/ vocab.gguf llama.cpp.tgz)
# Knobs: THREADS ("2 4 8 16"), MODELS ("preset:TYPE[:t/t/...] ..."), REPS (5: alternating rounds of one run each side),
#        NOREPACK ("preset:TYPE@threads ..." also run with MZ_REPACK=0),
#        SLICES ("preset:TYPE@threads ..." or "preset:TYPE" for every thread count: also
#        run with MZ_WORK_SPLIT=slices, the 64-row slices the planned split replaced),
#        BUDGET_S (no new model row starts after this many seconds; 0 = no limit),
#        FILES ("path.gguf[:t/t/...] ...": existing files, e.g. a downloaded Q4_K_M or
#        `mzcache quantize` output, measured after the generated MODELS).
# Tiny local smoke test (seconds): MZ_LOCAL=1 THREADS="1 2" REPS=1 \
#   MODELS="tiny-llama:F16 tiny-qwen3:Q8_0:2" SLICES="tiny-llama:F16" bash bench/device-scaling.sh
set -uo pipefail
OUTD=${OUT:-/tmp/scaling-out}; mkdir -p "$OUTD"
THREADS=${THREADS:-"2 4 8 16"}
MODELS=${MODELS:-"smollm2-135m:Q4_0 smollm2-135m:Q4_1 smollm2-135m:Q8_0 smollm2-135m:F16"}
REPS=${REPS:-5}
NOREPACK=${NOREPACK:-""}
SLICES=${SLICES:-""}
BUDGET_S=${BUDGET_S:-0}
T_START=$(date +%s)
W=${WORK:-/tmp/scaling-models}; mkdir -p "$W"
. "$(dirname "$0")/device-lib.sh" # BIN, LIBP, VOCAB, BUNDLE; mz
LB=${LLAMA_BENCH:-/tmp/lcb/bin/llama-bench}
if [ ! -x "$LB" ] && [ -f "${BUNDLE:-.bundle}/llama.cpp.tgz" ]; then
    t0=$(date +%s)
    tar xzf "${BUNDLE:-.bundle}/llama.cpp.tgz" -C /tmp
    # shellcheck disable=SC2046
    cmake -S /tmp/llama.cpp -B /tmp/lcb -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TOOLS=ON \
        $(MZ_PEER_PRINT_FLAGS=1 bash "${PEER_SCRIPT:-scripts/install-peer.sh}") >"$OUTD/lcb-cmake.log" 2>&1 &&
        cmake --build /tmp/lcb --target llama-bench -j"$(nproc)" >"$OUTD/lcb-build.log" 2>&1
    echo "llama-bench built in $(( $(date +%s) - t0 )) s with: $(MZ_PEER_PRINT_FLAGS=1 bash "${PEER_SCRIPT:-scripts/install-peer.sh}")"
fi
[ -x "$LB" ] || echo "no llama-bench ($LB): peer columns stay empty"

ours1() { # model threads [env...] -> "pp tg isa x8 busy" of one measured run (after its warm-up);
    # busy: its prefill's pp_busy (bench_throughput: CPU time over wall x threads)
    local m=$1 t=$2; shift 2
    env "$@" LD_LIBRARY_PATH="$LIBP" "$BIN/bench_throughput" -m "$m" -t "$t" -p 512 -n 128 -r 1 2>>"$OUTD/errors.log" |
        awk '/^run=/ { for (i = 1; i <= NF; i++) if ($i ~ /^pp_busy=/) { sub(/^pp_busy=/, "", $i); busy = $i } }
             /^median pp512=/ { split($2, a, "="); split($3, b, "="); split($5, c, "="); split($6, d, "=");
                                med = a[2] " " b[2] " " c[2] " " d[2] }
             END { if (med != "") print med, (busy != "" ? busy : "-") }'
}
steal_ms() { # the machine's steal time so far, all CPUs, ms (/proc/stat); - if unreadable
    awk -v hz="$(getconf CLK_TCK)" '$1 == "cpu" && NF >= 9 { printf "%d\n", $9 * 1000 / hz; f = 1 } END { if (!f) print "-" }' /proc/stat 2>/dev/null || echo -
}
steal_since() { # start_ms -> ms of steal since then, or -
    local now; now=$(steal_ms)
    [ "$1" = - ] || [ "$now" = - ] && { echo -; return; }
    echo $(( now - $1 ))
}
# One cell: REPS rounds, each one run of ours then one of llama-bench, so a
# slow spell of the machine hits both sides alike. Every run goes to
# runs.csv; the table row gives min / median / max of each side, the ratio
# of the medians, and the worst round (ours / llama.cpp in the same round).
cell() { # label model threads [env...]
    local label=$1 m=$2 t=$3; shift 3
    local runs="" isa=- x8=- opp otg oi ox ob lpp ltg s0 os ls
    for r in $(seq 1 "$REPS"); do
        s0=$(steal_ms)
        read -r opp otg oi ox ob <<<"$(ours1 "$m" "$t" "$@")"
        os=$(steal_since "$s0"); s0=$(steal_ms)
        read -r lpp ltg <<<"$(dl_llama_bench "$LB" "$m" "$t" 512 128)"
        ls=$(steal_since "$s0")
        isa=${oi:-$isa} x8=${ox:-$x8}
        echo "$label,$t,$r,${opp:--},${otg:--},$lpp,$ltg,$os,$ls,${ob:--}" >>"$OUTD/runs.csv"
        runs="$runs ${opp:--}:${otg:--}:$lpp:$ltg:$os:$ls"
    done
    python3 - "$label" "$t" "$isa" "$x8" "$runs" <<'PY' | tee -a "$OUTD/scaling.md"
import statistics, sys
label, t, isa, x8, runs = sys.argv[1:]
rounds = [r.split(":") for r in runs.split()]
def steal(i):
    v = [int(r[i]) for r in rounds if r[i] != "-"]
    return "%d" % max(v) if v else "-"
def col(i):
    return [float(r[i]) for r in rounds if r[i] != "-"]
def mmm(v):
    return "%.1f / %.1f / %.1f" % (min(v), statistics.median(v), max(v)) if v else "-"
def med_ratio(a, b):
    return "%.2f" % (statistics.median(a) / statistics.median(b)) if a and b else "-"
def worst(i, j):
    v = [float(r[i]) / float(r[j]) for r in rounds if "-" not in (r[i], r[j])]
    return "%.2f" % min(v) if v else "-"
def spread(v):
    return "%.2f" % (max(v) / min(v)) if v else "-"
k = isa + (", x8 " + x8 if "Q" in label.split()[-1] else "")
opp, otg, lpp, ltg = col(0), col(1), col(2), col(3)
print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s / %s |" % (
    label, t, k, mmm(opp), mmm(lpp), med_ratio(opp, lpp), worst(0, 2), spread(opp),
    mmm(otg), mmm(ltg), med_ratio(otg, ltg), worst(1, 3), spread(otg), steal(4), steal(5)))
PY
}

{
echo "machine: $(nproc) vCPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $REPS alternating rounds per cell, $(date -u +%FT%TZ)"
echo
echo "Each side: min / median / max tok/s of its $REPS runs; ratio = median / median; worst = the lowest"
echo "ours / llama.cpp of one round; spread = our max / min; steal = the most CPU time the host took from"
echo "this machine (all CPUs, ms) during one whole run of ours / of llama-bench (runs.csv has every run's)."
echo
echo "| model | threads | kernels | pp512 ours | pp512 llama.cpp | ratio | worst | spread | tg128 ours | tg128 llama.cpp | ratio | worst | spread | steal ms |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
} | tee "$OUTD/scaling.md"
# steal_ours_ms / steal_llamacpp_ms: CPU time the hypervisor took from the
# machine (all CPUs, /proc/stat) during each side's whole run, load and
# warm-up included; pp_busy_ours: our prefill's CPU time over its wall time x
# threads (near 1: every thread ran throughout, so a slow run met a slower
# machine; well under 1: threads were off their CPUs)
echo "cell,threads,round,pp_ours,tg_ours,pp_llamacpp,tg_llamacpp,steal_ours_ms,steal_llamacpp_ms,pp_busy_ours" >"$OUTD/runs.csv"
for spec in $MODELS; do
    preset=${spec%%:*}; rest=${spec#*:}; type=${rest%%:*}; ths=$THREADS
    case "$rest" in *:*) ths=${rest#*:}; ths=${ths//\// } ;; esac
    f="$W/$preset-$type.gguf"
    [ -f "$f" ] || mz mzcache gen-model --preset "$preset" --type "$type" --vocab-from "$VOCAB" -o "$f" >/dev/null 2>>"$OUTD/errors.log"
    for t in $ths; do
        [ "$t" -le "$(nproc)" ] || continue
        if [ "$BUDGET_S" -gt 0 ] && [ $(( $(date +%s) - T_START )) -ge "$BUDGET_S" ]; then
            echo "| $preset $type | $t | not run (BUDGET_S=$BUDGET_S reached) | | | | | | | | | | | |" | tee -a "$OUTD/scaling.md"
            continue
        fi
        cell "$preset $type" "$f" "$t"
        for nr in $NOREPACK; do
            [ "$nr" = "$preset:$type@$t" ] && cell "$preset $type (MZ_REPACK=0)" "$f" "$t" MZ_REPACK=0
        done
        for sl in $SLICES; do
            if [ "$sl" = "$preset:$type@$t" ] || [ "$sl" = "$preset:$type" ]; then
                cell "$preset $type (MZ_WORK_SPLIT=slices)" "$f" "$t" MZ_WORK_SPLIT=slices
            fi
        done
    done
done
for spec in ${FILES:-}; do
    f=${spec%%:*}; ths=$THREADS
    case "$spec" in *:*) ths=${spec#*:}; ths=${ths//\// } ;; esac
    [ -f "$f" ] || { echo "| $f | | missing | | | | | | | | | | | |" | tee -a "$OUTD/scaling.md"; continue; }
    for t in $ths; do
        [ "$t" -le "$(nproc)" ] || continue
        cell "$(basename "$f" .gguf)" "$f" "$t"
    done
done
echo "total $(( $(date +%s) - T_START )) s" | tee -a "$OUTD/scaling.md"
