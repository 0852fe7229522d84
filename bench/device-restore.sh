#!/usr/bin/env bash
# Issue 18 on the 16-vCPU machine, in one device call: restore on many
# threads (targets 2 and 3), the F16 and llama3.2-1b rows of the thread-scaling
# table, and a forced-AVX2 run (MZ_KERNELS=avx2: compute kernels and the q8
# codec stay off AVX-512, as on an AVX2-only EPYC). Prints markdown for
# docs/BENCHMARKS.md into $OUT/restore.md, the raw outputs into $OUT/raw.tgz
# (the device returns at most 8 files).
#
# On the 16-vCPU machine (see ../shared/DEVICE.md), from the project root,
# after `make build && ../shared/device/bundle.sh build --llama-cpp` here:
#   device run, carry [".bundle"], timeout 600:  bash bench/device-restore.sh
# Locally at tiny sizes (a smoke test of the script, not a measurement):
#   MZ_LOCAL=1 SMALL=1 bash bench/device-restore.sh
#
# Sections, in priority order; each is skipped once BUDGET_S (default 330 s)
# has passed (a section started before may run past it; scaling is cut off
# at the budget), so the default call takes about 6 minutes:
#   profile   `mzcache profile --no-loaded` (pre-fault by thread count, read
#             saturation), then the split it gives for 1 / 2 / 8 compute
#             threads and how many of those restore threads pre-fault;
#             profile.json goes into raw.tgz
#   target2   qwen3-0.6b F16 shape, 16k context, 8 compute threads: in-memory
#             TTFT and TTFT after eviction to 0/25/50/75 %, mzcache vs
#             partial-offload (`mzcache bench ttft`), the profile's split
#   target3   the same model and context, 2 compute threads, 50 %: full
#             overlap vs no overlap, five runs taking turns (bench_restore),
#             the ratio of every run, the profile's split
#   scaling   bench_throughput vs llama-bench (bench/device-scaling.sh) for
#             SCALING_MODELS, cut off (timeout) when the budget is spent
# Not in the default SECTIONS (each about a minute, sweep3 about 2.5):
#   sweep3    target 3 once per restore-thread count in SWEEP3_THREADS
#             ("0 2 3 4 6"; 0: the profile's split), 3 runs each
#   compare   target 3 again with every restore thread pre-faulting
#             (--prefault-threads 64: the layout without the cap), and
#             target 2's 50 % point with the old cap of 3 restore threads
#   avx2      MZ_KERNELS=avx2: bench_throughput of AVX2_MODELS at 8 threads and
#             target 2's 50 % point; every row names the kernels that ran
#   split8    target 2's 50 % and 75 % points with 8 restore threads (the
#             rule before the pre-fault saturation cap: twice it), to set
#             beside target2's profile split; SPLIT8_T3=1 adds target 3 with
#             8 (3 runs, ~40 s more); the restore split's part-4 check (~40 s)
#   fullcpu   compute on every CPU (-t $(nproc)), 50 %: the profile's split
#             (3 restore threads) vs 4 and 8 (~60 s)
#   codecs    target 2's 50 % point with the cachegen codecs (the policy's
#             decoding over several threads; slow to encode: ~2 min) — CODECS
#             ("cachegen cachegen-q7"), each with every restore-thread count
#             of CODECS_RT ("0": the profile's split)
# T2_CODEC: the KV codec of target2's mzcache runs (default: the engine's, q8).
# Knobs: SECTIONS ("profile target2 target3 scaling"), BUDGET_S (330),
#        CTX (16384), SCALING_MODELS, AVX2_MODELS, REPS (3), SMALL (1: tiny
#        shapes and contexts, for the local smoke test).
set -uo pipefail
T0=$(date +%s)
OUTD=${OUT:-/tmp/device-restore-out}; mkdir -p "$OUTD"
MD=$OUTD/restore.md
SECTIONS=${SECTIONS:-"profile target2 target3 scaling"}
BUDGET_S=${BUDGET_S:-330}
REPS=${REPS:-3}
W=${WORK:-/tmp/device-restore-w}; RAW=$W/raw; mkdir -p "$W/swap" "$RAW"
if [ "${SMALL:-0}" = 1 ]; then
    PRESET=${PRESET:-tiny-qwen3}; CTX=${CTX:-2048}
    SCALING_MODELS=${SCALING_MODELS:-"tiny-qwen3:F16:2 tiny-llama:Q4_0:2"}
    AVX2_MODELS=${AVX2_MODELS:-"tiny-qwen3:F16 tiny-llama:Q4_0"}
    PROFILE_ARGS=${PROFILE_ARGS:-"--quick"}
else
    PRESET=${PRESET:-qwen3-0.6b}; CTX=${CTX:-16384}
    SCALING_MODELS=${SCALING_MODELS:-"qwen3-0.6b:F16:8/16 llama3.2-1b:Q4_0:8/16 llama3.2-1b:F16:8"}
    AVX2_MODELS=${AVX2_MODELS:-"smollm2-135m:Q4_0 smollm2-135m:F16"}
    PROFILE_ARGS=${PROFILE_ARGS:-"--file-mib 256 --mem-mib 256 --wait 1 --no-loaded"}
fi
. "$(dirname "$0")/device-lib.sh" # BIN, LIBP, VOCAB, BUNDLE; mz
elapsed() { echo $(( $(date +%s) - T0 )); }
want() { # section -> true if asked for and inside the budget
    case " $SECTIONS " in *" $1 "*) ;; *) return 1 ;; esac
    if [ "$(elapsed)" -ge "$BUDGET_S" ]; then
        echo "## $1: skipped (budget of $BUDGET_S s spent)" | tee -a "$MD"
        return 1
    fi
    echo "[$(elapsed) s] $1" >&2
}
gen() { # preset type -> path (generated once)
    local f="$W/$1-$2.gguf"
    [ -f "$f" ] || mz mzcache gen-model --preset "$1" --type "$2" --vocab-from "$VOCAB" -o "$f" >/dev/null 2>>"$RAW/errors.log"
    echo "$f"
}

{
echo "machine: $(nproc) vCPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), kernel $(uname -r), $(date -u +%FT%TZ)"
echo "flags: $(grep -m1 -o -w 'avx512f\|avx512_vnni\|avx2\|f16c' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo
} | tee "$MD"

PROF=$W/profile.json
if want profile; then
    mz mzcache profile -o "$PROF" $PROFILE_ARGS -q >"$RAW/profile.log" 2>&1 || echo "profile failed (see profile.log)"
    mz mzcache profile --show -o "$PROF" 2>&1 | grep -E "saturate|pre-fault|restore threads|first touch|pre-faulting|decoding" | sed 's/^/    /' | tee -a "$MD"
    cp "$PROF" "$RAW/profile.json" 2>/dev/null
    echo "    [profile done at $(elapsed) s]" | tee -a "$MD"
fi
PROFOPT=(); [ -f "$PROF" ] && PROFOPT=(--profile "$PROF")

F=$(gen "$PRESET" F16)
if want target2; then
    echo "### Target 2: $PRESET F16, ctx $CTX, 8 compute threads, restore split from the profile, KV codec ${T2_CODEC:-q8 (the default)}" | tee -a "$MD"
    T2OPT=(); [ -n "${T2_CODEC:-}" ] && T2OPT=(--codecs "$T2_CODEC")
    mz mzcache bench ttft --models "$F" --ctx "$CTX" --levels 0,25,50,75 --modes mzcache,partial-offload \
        --runs 3 -t 8 "${PROFOPT[@]}" "${T2OPT[@]}" --swap-dir "$W/swap" -o "$RAW" --name target2 --no-plot \
        >"$RAW/target2.log" 2>&1 || echo "bench ttft failed (see target2.log)"
    sed -n '/^## TTFT (s) and speedup/,/^`\*`/p' "$RAW/target2.md" 2>/dev/null | grep '^|' | tee -a "$MD"
    grep -o "isa [a-z0-9]*, q8 codec [a-z0-9]*" "$RAW/target2.log" | head -1 | sed 's/^/    /' | tee -a "$MD"
    grep -o "mzcache .*level [0-9]*%.*: run .*" "$RAW/target2.log" | sed 's/^/    /' | tee -a "$MD"
    python3 - "$RAW/target2.csv" <<'PY' | tee -a "$MD"
import csv, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["mode"] == "mzcache"]
inmem = [float(r["ttft_s"]) for r in rows if r["level"] == "100"]
half = [float(r["ttft_s"]) for r in rows if r["level"] == "50"]
if inmem and half:
    print("target 2: TTFT at 50 %% / in memory = %.3f / %.3f s = %.2fx (target <= 2x)" % (half[0], inmem[0], half[0] / inmem[0]))
PY
    echo "    [target2 done at $(elapsed) s]" | tee -a "$MD"
fi

if want target3; then
    echo "### Target 3: $PRESET F16, ctx $CTX, 2 compute threads, 50 %, full vs no overlap, 5 runs" | tee -a "$MD"
    mz bench_restore -m "$F" -c "$CTX" -q 8 -r 5 -t 2 --synthetic --remaining 50 --restore-threads 0 \
        --modes none,all "${PROFOPT[@]}" --swap-dir "$W/swap" >"$RAW/target3.log" 2>&1 || echo "bench_restore failed (see target3.log)"
    grep -E '^\||per-run|all resident' "$RAW/target3.log" | tee -a "$MD"
    echo "    [target3 done at $(elapsed) s]" | tee -a "$MD"
fi

if want sweep3; then
    # Target 3's restore-thread count beside 2 compute threads: the prefill
    # slows when many restore threads decode and zero pages beside it
    # (memory bandwidth); one bench_restore per count, same model and level.
    echo "### Sweep: target 3 by restore threads (SWEEP3_THREADS), 3 runs each" | tee -a "$MD"
    for rt in ${SWEEP3_THREADS:-0 2 3 4 6}; do
        [ "$(elapsed)" -ge "$BUDGET_S" ] && { echo "sweep3: stopped before $rt (budget)" | tee -a "$MD"; break; }
        mz bench_restore -m "$F" -c "$CTX" -q 8 -r 3 -t 2 --synthetic --remaining 50 --restore-threads "$rt" \
            --modes none,all "${PROFOPT[@]}" --swap-dir "$W/swap" >"$RAW/sweep3-rt$rt.log" 2>&1 ||
            echo "bench_restore --restore-threads $rt failed" | tee -a "$MD"
        echo "restore threads $rt (0: the profile's split):" | tee -a "$MD"
        grep -E '^\| 50|per-run' "$RAW/sweep3-rt$rt.log" | tee -a "$MD"
    done
    echo "    [sweep3 done at $(elapsed) s]" | tee -a "$MD"
fi

if want avx2; then
    echo "### Forced AVX2 (MZ_KERNELS=avx2): ours only, 8 threads" | tee -a "$MD"
    t=8; [ "$(nproc)" -lt 8 ] && t=$(nproc)
    echo "| model | threads | kernels | pp512 | tg128 |" | tee -a "$MD"
    echo "|---|---|---|---|---|" | tee -a "$MD"
    for spec in $AVX2_MODELS; do
        [ "$(elapsed)" -ge "$BUDGET_S" ] && break
        f=$(gen "${spec%%:*}" "${spec#*:}")
        MZ_KERNELS=avx2 LD_LIBRARY_PATH=$LIBP "$BIN/bench_throughput" -m "$f" -t "$t" -p 512 -n 128 -r "$REPS" 2>>"$RAW/errors.log" |
            sed -n "s/^median pp512=\([0-9.]*\) tg128=\([0-9.]*\) threads=[0-9]* isa=\([a-z0-9]*\) x8=\([a-z]*\).*/| ${spec/:/ } | $t | \3, x8 \4 | \1 | \2 |/p" |
            tee -a "$MD"
    done
    if [ "$(elapsed)" -lt "$BUDGET_S" ]; then
        echo "target 2 at 50 % with MZ_KERNELS=avx2:" | tee -a "$MD"
        MZ_KERNELS=avx2 LD_LIBRARY_PATH=$LIBP "$BIN/mzcache" bench ttft --models "$F" --ctx "$CTX" --levels 50 \
            --modes mzcache --runs 3 -t 8 "${PROFOPT[@]}" --swap-dir "$W/swap" -o "$RAW" --name target2-avx2 --no-plot \
            >"$RAW/target2-avx2.log" 2>&1 || echo "bench ttft (avx2) failed"
        grep -o "isa [a-z0-9]*, q8 codec [a-z0-9]*" "$RAW/target2-avx2.log" | head -1 | sed 's/^/    /' | tee -a "$MD"
        grep -o "level [0-9]*%: run .*" "$RAW/target2-avx2.log" | sed 's/^/    /' | tee -a "$MD"
    fi
fi
if want scaling; then
    echo "### Thread scaling rows" | tee -a "$MD"
    left=$(( BUDGET_S - $(elapsed) ))
    OUT="$RAW" WORK="$W" MODELS="$SCALING_MODELS" REPS="$REPS" timeout "$left" bash bench/device-scaling.sh \
        >"$RAW/scaling.log" 2>&1 || echo "scaling stopped (exit $?; budget or failure)" | tee -a "$MD"
    grep '^|' "$RAW/scaling.md" 2>/dev/null | tee -a "$MD"
fi

if want compare; then
    echo "### Compare: target 3 with every restore thread pre-faulting (--prefault-threads 64)" | tee -a "$MD"
    mz bench_restore -m "$F" -c "$CTX" -q 8 -r 5 -t 2 --synthetic --remaining 50 --restore-threads 0 \
        --prefault-threads 64 --modes none,all "${PROFOPT[@]}" --swap-dir "$W/swap" >"$RAW/target3-nocap.log" 2>&1 ||
        echo "bench_restore failed (see target3-nocap.log)"
    grep -E '^\||per-run' "$RAW/target3-nocap.log" | tee -a "$MD"
    if [ "$(elapsed)" -lt "$BUDGET_S" ]; then
        echo "old cap for comparison (--restore-threads 3), 50 %:" | tee -a "$MD"
        mz mzcache bench ttft --models "$F" --ctx "$CTX" --levels 50 --modes mzcache --runs 3 -t 8 \
            --restore-threads 3 "${PROFOPT[@]}" --swap-dir "$W/swap" -o "$RAW" --name target2-cap3 --no-plot --no-inmem \
            >"$RAW/target2-cap3.log" 2>&1 || echo "bench ttft (cap 3) failed"
        grep -o "level 50%: run .*" "$RAW/target2-cap3.log" | sed 's/^/    /' | tee -a "$MD"
    else
        echo "## compare: the cap-3 run skipped (budget of $BUDGET_S s spent)" | tee -a "$MD"
    fi
fi

if want split8; then
    echo "### Split check: 8 restore threads (twice the pre-fault saturation count) vs the profile's split" | tee -a "$MD"
    mz mzcache bench ttft --models "$F" --ctx "$CTX" --levels 50,75 --modes mzcache --runs 3 -t 8 \
        --restore-threads 8 "${PROFOPT[@]}" --swap-dir "$W/swap" -o "$RAW" --name target2-rt8 --no-plot --no-inmem \
        >"$RAW/target2-rt8.log" 2>&1 || echo "bench ttft (8 restore threads) failed"
    echo "target 2, 8 restore threads:" | tee -a "$MD"
    grep -o "level [0-9]*%: run .*" "$RAW/target2-rt8.log" | sed 's/^/    /' | tee -a "$MD"
    if [ "${SPLIT8_T3:-0}" = 1 ] && [ "$(elapsed)" -lt "$BUDGET_S" ]; then
        echo "target 3, 8 restore threads, 3 runs:" | tee -a "$MD"
        mz bench_restore -m "$F" -c "$CTX" -q 8 -r 3 -t 2 --synthetic --remaining 50 --restore-threads 8 \
            --modes none,all "${PROFOPT[@]}" --swap-dir "$W/swap" >"$RAW/target3-rt8.log" 2>&1 ||
            echo "bench_restore failed (see target3-rt8.log)"
        grep -E '^\| 50|per-run' "$RAW/target3-rt8.log" | tee -a "$MD"
    fi
    echo "    [split8 done at $(elapsed) s]" | tee -a "$MD"
fi

if want fullcpu; then
    n=$(nproc)
    echo "### Compute on every CPU (-t $n), 50 %: restore threads 0 (the profile's) / 4 / 8" | tee -a "$MD"
    for rt in 0 4 8; do
        [ "$(elapsed)" -ge "$BUDGET_S" ] && break
        mz mzcache bench ttft --models "$F" --ctx "$CTX" --levels 50 --modes mzcache --runs 3 -t "$n" \
            --restore-threads "$rt" "${PROFOPT[@]}" --swap-dir "$W/swap" -o "$RAW" --name "fullcpu-rt$rt" --no-plot \
            $([ "$rt" = 0 ] || echo --no-inmem) >"$RAW/fullcpu-rt$rt.log" 2>&1 || echo "bench ttft (-t $n, $rt) failed"
        echo "restore threads $rt:" | tee -a "$MD"
        grep -o "level [0-9]*%.*: run .*" "$RAW/fullcpu-rt$rt.log" | sed 's/^/    /' | tee -a "$MD"
    done
fi

if want codecs; then
    echo "### Target 2 at 50 % with the codecs of CODECS (8 compute threads, the restore threads of CODECS_RT)" | tee -a "$MD"
    inmem=  # the first run also measures the in-memory TTFT (level 100), for the ratio
    for codec in ${CODECS:-cachegen cachegen-q7}; do
        for rt in ${CODECS_RT:-0}; do
            [ "$(elapsed)" -ge "$BUDGET_S" ] && break
            name="target2-$codec-rt$rt"
            mz mzcache bench ttft --models "$F" --ctx "$CTX" --levels 50 --modes mzcache --codecs "$codec" --runs 2 -t 8 \
                --restore-threads "$rt" "${PROFOPT[@]}" --swap-dir "$W/swap" -o "$RAW" --name "$name" --no-plot $inmem \
                >"$RAW/$name.log" 2>&1 || echo "bench ttft ($codec, $rt restore threads) failed"
            echo "$codec, restore threads $rt (0: the profile's split):" | tee -a "$MD"
            grep -o "level [0-9]*%: run .*" "$RAW/$name.log" | sed 's/^/    /' | tee -a "$MD"
            inmem=--no-inmem
        done
    done
fi

echo "done in $(elapsed) s" | tee -a "$MD"
tar czf "$OUTD/raw.tgz" -C "$W" raw 2>/dev/null
