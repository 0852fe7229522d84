#!/usr/bin/env bash
# bench/device-f16-blocking.sh — the F16 prefill product's build-time blocking
# knobs (src/kernels/gemm_x86.h: F16GX_R / F16GX_T, F16GX_MAX_N,
# F16GX_PANEL, F16GX_SB_BYTES, ...) compared as separate builds that take
# turns round by round, beside llama.cpp's llama-bench.
#
#   bash bench/device-f16-blocking.sh build      # here: one build per variant,
#                                                # copied into the bundle
#   bash bench/device-f16-blocking.sh            # there (or here with MZ_LOCAL=1)
#
# build: configures and builds bench_throughput and bench_kernels once per
# variant under VDIR (default /tmp/f16-blocking) and, unless MZ_LOCAL=1,
# copies them stripped into the bundle as bin/bt-NAME and bin/bk-NAME (after
# ../shared/device/bundle.sh build; the whole carry stays under 64 MiB).
# run: for every variant, bench_kernels on one thread (-c 1: GOP/s of the
# F16 product over the SHAPES, "rows cols tokens") in KROUNDS rounds, then
# pp512 at THREADS threads on each MODELS preset ("name:rounds"), the
# variants and llama-bench taking turns within a round; one line per run,
# then min / median / max per variant and the ratio of medians to
# llama-bench. Every variant computes the same bits (the knobs move only
# the loop order and the tile shape; test_kernels checks both against
# vec_dot at every shape), so only speed is compared.
#
# Env: VARIANTS ("name=flags|name=flags", flags passed as CMAKE_C_FLAGS; the
# first is the baseline), THREADS (16), MODELS ("llama3.2-1b:6 qwen3-0.6b:4"),
# SHAPES, KROUNDS (2), STOP_S (no new round after this many seconds; 520),
# LLAMA_BENCH (default /tmp/lcb/bin/llama-bench: bench/device-scaling.sh
# builds it there in the same call; without it the peer lines read "-"),
# OUT (results: kernels.txt, pp.txt).
set -uo pipefail
VARIANTS=${VARIANTS:-"v0=|v1=-DF16GX_MAX_N=1024 -DF16GX_PANEL=512|v2=-DF16GX_MAX_N=1024 -DF16GX_PANEL=1024|v4=-DF16GX_R=6 -DF16GX_T=4|v5=-DF16GX_R=6 -DF16GX_T=4 -DF16GX_MAX_N=1024 -DF16GX_PANEL=1024|v6=-DF16GX_SB_BYTES=524288"}
VDIR=${VDIR:-/tmp/f16-blocking}
IFS='|' read -r -a VLIST <<<"$VARIANTS"
NAMES=()
for v in "${VLIST[@]}"; do NAMES+=("${v%%=*}"); done

if [ "${1:-run}" = build ]; then
    for v in "${VLIST[@]}"; do
        n=${v%%=*} f=${v#*=}
        cmake -S . -B "$VDIR/$n" -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS="$f" >/dev/null &&
            cmake --build "$VDIR/$n" -j "$(nproc)" --target bench_throughput bench_kernels >/dev/null ||
            { echo "variant $n ($f) did not build" >&2; exit 1; }
        if [ "${MZ_LOCAL:-0}" != 1 ]; then
            cp "$VDIR/$n/bench_throughput" "${BUNDLE:-.bundle}/bin/bt-$n"
            cp "$VDIR/$n/bench_kernels" "${BUNDLE:-.bundle}/bin/bk-$n"
            strip "${BUNDLE:-.bundle}/bin/bt-$n" "${BUNDLE:-.bundle}/bin/bk-$n"
        fi
        echo "built $n: ${f:-(defaults)}"
    done
    exit 0
fi

OUTD=${OUT:-/tmp/f16-blocking-out}; mkdir -p "$OUTD"
. "$(dirname "$0")/device-lib.sh" # BIN, LIBP, VOCAB; mz, dl_gen_model
THREADS=${THREADS:-16}
MODELS=${MODELS:-"llama3.2-1b:6 qwen3-0.6b:4"}
SHAPES=${SHAPES:-"2048 2048 512|8192 2048 512|2048 8192 512"}
KROUNDS=${KROUNDS:-2}
STOP_S=${STOP_S:-520}
LB=${LLAMA_BENCH:-/tmp/lcb/bin/llama-bench}
W=${WORK:-/tmp/scaling-models}; mkdir -p "$W"
bin_of() { # kind name -> the variant's program (the build dir locally)
    if [ "${MZ_LOCAL:-0}" = 1 ]; then
        [ "$1" = bt ] && echo "$VDIR/$2/bench_throughput" || echo "$VDIR/$2/bench_kernels"
    else
        echo "$BIN/$1-$2"
    fi
}
run_bin() { LD_LIBRARY_PATH=$LIBP "$@"; }
echo "load $(cut -d' ' -f1-3 /proc/loadavg); $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"

IFS='|' read -r -a SHAPE_LIST <<<"$SHAPES"
for r in $(seq "$KROUNDS"); do
    for n in "${NAMES[@]}"; do
        for s in "${SHAPE_LIST[@]}"; do
            # shellcheck disable=SC2086
            g=$(run_bin "$(bin_of bk "$n")" $s -t F16 -c 1 -r 3 2>&1 | awk '$2 == "F16" && $3 == "xf" { print $7; exit }')
            echo "$r $n ${s// /x} ${g:--}"
        done
    done
done | tee "$OUTD/kernels.txt"

for cell in $MODELS; do
    m=${cell%%:*} rounds=${cell#*:}
    f=$W/$m-F16.gguf
    dl_gen_model "$m" F16 "$f" "$OUTD/gen.log" || { echo "gen-model $m failed (see gen.log)" >&2; continue; }
    for r in $(seq "$rounds"); do
        [ "$(dl_elapsed)" -gt "$STOP_S" ] && { echo "stopped at $(dl_elapsed) s" >&2; break 2; }
        for n in "${NAMES[@]}"; do
            pp=$(run_bin "$(bin_of bt "$n")" -m "$f" -t "$THREADS" -p 512 -n 1 -r 1 2>>"$OUTD/errors.log" |
                awk '/^run=/ { for (i = 1; i <= NF; i++) if ($i ~ /^(pp512|pp_steal_ms)=/) { split($i, a, "="); printf "%s ", a[2] } }')
            echo "$m $r $n ${pp:-- -}"
        done
        read -r pp _ <<<"$(dl_llama_bench "$LB" "$f" "$THREADS" 512 0)"
        echo "$m $r llama.cpp $pp -"
    done
done | tee "$OUTD/pp.txt"

# min / median / max of pp512 per model and variant, and the ratio of medians to llama-bench's.
python3 - "$THREADS" "$OUTD/pp.txt" <<'PY'
import statistics, sys
threads, path = sys.argv[1:]
runs = {}  # (model, variant) -> pp512 of each run, in the order met
for line in open(path):
    f = line.split()
    if len(f) >= 4 and f[3] != "-":
        runs.setdefault((f[0], f[2]), []).append(float(f[3]))
print("\n| model | threads | variant | pp512 min / median / max | runs | x llama.cpp (medians) |")
print("|---|---|---|---|---|---|")
for (m, v), xs in runs.items():
    peer = runs.get((m, "llama.cpp")) if v != "llama.cpp" else None
    ratio = "%.2f" % (statistics.median(xs) / statistics.median(peer)) if peer else ""
    print("| %s | %s | %s | %.1f / %.1f / %.1f | %d | %s |" % (m, threads, v, min(xs), statistics.median(xs), max(xs), len(xs), ratio))
PY
