#!/usr/bin/env bash
# Issue 17's comparison on the 16-vCPU machine, in one device call: TTFT of
# an 8-token question after kill -9 and a restart, mzcache resume vs
# llama.cpp's model load + llama_state_load_file vs recompute, page cache
# dropped, all from one `bench_store ttft` run per row (MZ_PEER_STATE_BIN:
# bench/peer/peer_state_reload.c, built first from the pruned llama.cpp source of
# the bundle by bench/build-peer-state.sh, ~45 s). Prints a markdown table
# and writes it to $OUT/peer-state.md (build and error logs next to it).
#
# Models are generated there with gen-model (random weights of the real
# shapes; timing does not depend on the values). Per row, bench_store ttft
# does two real prefills of N tokens (the stored session, then the
# recompute baseline) besides the resume and three cold llama.cpp reloads
# of a synthetic state of llama.cpp's own layout; rows that would start
# after TIME_BUDGET seconds are skipped and say so.
#
# On the device (../shared/DEVICE.md), from the project root, after
# `../shared/device/bundle.sh build --llama-cpp` here:
#   device run, carry [".bundle"], timeout 300:  bash bench/device-peer-state.sh
# About 3-4 minutes (peer build ~45 s, then the three rows; the qwen3 row is
# skipped if it would start after TIME_BUDGET).
# Locally (peer built here, or PEER_BIN=path to reuse one):
#   MZ_LOCAL=1 ROWS="smollm2-135m:Q4_1:1024" bash bench/device-peer-state.sh
# Knobs: ROWS ("smollm2-135m:Q4_1:8192 smollm2-135m:Q4_1:16384
#        qwen3-0.6b:F16:8192": preset:type:tokens[:codec], run in this
#        order; codec q8 stores the full chunks as q8 records, default raw),
#        AB_ROW / AB_REPS / AB_BEFORE (the before/after table at the end:
#        the environment AB_BEFORE, default MZ_RESUME_QUESTION=after: the
#        question prefilled after the resume instead of in its pass, vs the
#        defaults, alternating; default the first row, 3 pairs; AB_ROW= skips
#        it),
#        TIME_BUDGET (180 s from the start: no row starts later), PEER_BIN,
#        OMP_WAIT_POLICY of the llama.cpp peer (active there: llama.cpp's
#        default, its best on an idle machine; passive with MZ_LOCAL=1, as
#        bench_store's default: spinning barriers on a shared machine
#        measure its load). Threads: all CPUs, both sides (bench_store).
set -uo pipefail
OUTD=${OUT:-/tmp/peer-state-out}; mkdir -p "$OUTD"
. "$(dirname "$0")/device-lib.sh"
ROWS=${ROWS:-"smollm2-135m:Q4_1:8192 smollm2-135m:Q4_1:16384 qwen3-0.6b:F16:8192"}
TIME_BUDGET=${TIME_BUDGET:-180}
W=${WORK:-/tmp/peer-state-models}; mkdir -p "$W"
ST=${STORE:-/tmp/peer-state-store}
if [ "${MZ_LOCAL:-0}" = 1 ]; then
    SRC=
else
    SRC=$BUNDLE/llama.cpp.tgz
    export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-active}
fi
if [ -z "${PEER_BIN:-}" ]; then
    pb0=$(date +%s)
    if JOBS=$(nproc) bash bench/build-peer-state.sh /tmp/peer-state-build $SRC >"$OUTD/peer-build.log" 2>&1; then
        PEER_BIN=/tmp/peer-state-build/peer_state_reload
    else
        echo "building the llama.cpp peer failed:"; tail -20 "$OUTD/peer-build.log"
    fi
    echo "peer built in $(( $(date +%s) - pb0 )) s" >>"$OUTD/peer-build.log"
fi
{
dl_title device-peer-state.sh
echo
echo "$(dl_load start); llama.cpp peer: ${PEER_BIN:-none} ($(tail -1 "$OUTD/peer-build.log" 2>/dev/null)), OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}"
echo
dl_head shape tokens "mzcache resume ms" "of which model load + store open / resume" \
    "llama.cpp state reload ms" "of which model / context / state file / question" \
    "state file MiB" "recompute ms" "resume / state reload (target <= 0.5)" "recompute / resume"
} | tee "$OUTD/peer-state.md"
for row in $ROWS; do
    preset=${row%%:*} rest=${row#*:}; type=${rest%%:*} n=${rest#*:}
    codec=raw; case $n in *:*) codec=${n#*:}; n=${n%%:*} ;; esac
    if [ "$(dl_elapsed)" -gt "$TIME_BUDGET" ]; then
        dl_row "$preset $type" "$n" "skipped: past TIME_BUDGET=$TIME_BUDGET s" "" "" "" "" "" "" "" |
            tee -a "$OUTD/peer-state.md"
        continue
    fi
    M="$W/$preset-$type.gguf"
    dl_gen_model "$preset" "$type" "$M" "$OUTD/gen.log" ||
        { dl_row "$preset $type" "$n" "gen-model failed" | tee -a "$OUTD/peer-state.md"; continue; }
    rm -rf "$ST"; mkdir -p "$ST"
    r0=$(date +%s)
    out=$(MZ_STORE_CODEC=$codec MZ_PEER_STATE_BIN=${PEER_BIN:-/nonexistent} mz bench_store ttft "$M" "$n" "$ST" 2>>"$DL_ERRORS")
    echo "== $preset $type $n $codec store ($(( $(date +%s) - r0 )) s)" >>"$OUTD/raw.log"; echo "$out" >>"$OUTD/raw.log"
    g() { echo "$out" | sed -n "$1" | head -1; }
    res=$(g 's/^resume: *TTFT \([0-9]*\) ms.*/\1/p')
    resload=$(g 's/^resume:.*model load + store open \([0-9]*\) ms, resume \([0-9]*\) ms.*/\1 \/ \2/p')
    rc=$(g 's/^recompute: TTFT \([0-9]*\) ms.*/\1/p')
    pk=$(g 's/^llama.cpp state reload: \([0-9]*\) ms = .*/\1/p')
    pparts=$(g 's/^llama.cpp state reload: [0-9]* ms = model load \([0-9]*\) + context \([0-9]*\) + llama_state_load_file \([0-9]*\) + the question \([0-9]*\).*/\1 \/ \2 \/ \3 \/ \4/p')
    mib=$(g 's/^state_reload .* state_mib=\([0-9.]*\) .*/\1/p')
    [ "$codec" = raw ] && label="$preset $type" || label="$preset $type, $codec store"
    dl_row "$label" "$n" "${res:--}" "${resload:--}" "${pk:--}" "${pparts:--}" "${mib:--}" \
        "${rc:--}" "$(dl_ratio "$res" "$pk" '%.2f')" "$(dl_ratio "$rc" "$res" '%.1fx')" | tee -a "$OUTD/peer-state.md"
done
# Before/after of the restart's critical path on one build, alternating:
# "before" = the environment AB_BEFORE (default MZ_RESUME_QUESTION=after:
# the question after mz_session_resume; "MZ_LOAD_THREADS=1
# MZCACHE_RESUME_THREADS=0" gave the loader threads' table), "after" = the
# defaults. bench_store
# resume (synthetic session, page cache dropped, the tail case: 1 token
# recomputed) and bench_store load (model alone, medians of 7). AB_ROW
# (preset:type:tokens, default the first row; AB_ROW= skips), AB_REPS (3).
AB_ROW=${AB_ROW-${ROWS%% *}}
if [ -n "$AB_ROW" ] && [ "$(dl_elapsed)" -le "$TIME_BUDGET" ]; then
    preset=${AB_ROW%%:*} rest=${AB_ROW#*:}; type=${rest%%:*} n=${rest#*:}
    M="$W/$preset-$type.gguf"
    [ -f "$M" ] || mz mzcache gen-model --preset "$preset" --type "$type" --vocab-from "$VOCAB" -o "$M" >>"$OUTD/gen.log" 2>&1
    {
    echo
    echo "### before/after, $preset $type, $n tokens (+1: the tail case), alternating; before = ${AB_BEFORE:-MZ_RESUME_QUESTION=after}"
    echo
    echo "| run | TTFT ms | model load ms | resume ms | question ms | restore threads | CPUs busy |"
    echo "|---|---:|---:|---:|---:|---:|---:|"
    } | tee -a "$OUTD/peer-state.md"
    for i in $(seq 1 "${AB_REPS:-3}"); do
        for side in before after; do
            rm -rf "$ST"; mkdir -p "$ST"
            if [ $side = before ]; then env_ab=${AB_BEFORE:-MZ_RESUME_QUESTION=after}; else env_ab=; fi
            out=$(env $env_ab LD_LIBRARY_PATH=$LIBP "$BIN/bench_store" resume "$M" "$n" "$ST" 2>>"$DL_ERRORS")
            echo "== A/B $side $i" >>"$OUTD/raw.log"; echo "$out" >>"$OUTD/raw.log"
            line=$(echo "$out" | grep "^tokens $((n / 256 * 256 + 1)): TTFT" | head -1)
            cpus=$(echo "$out" | sed -n "s/^tokens $((n / 256 * 256 + 1)): process CPU.*(\([0-9.]*\) CPUs.*/\1/p" | head -1)
            echo "$line" | sed -E "s/.*TTFT ([0-9]+) ms = model load ([0-9]+) .* resume ([0-9]+) .*, ([0-9]+) restore threads\) \+ question ([0-9]+).*/| $side $i | \1 | \2 | \3 | \5 | \4 | ${cpus:--} |/" |
                tee -a "$OUTD/peer-state.md"
        done
    done
    lo=$(LD_LIBRARY_PATH=$LIBP "$BIN/bench_store" load "$M" 300 "$ST" 2>>"$DL_ERRORS")
    { echo; echo "model load alone: $lo"; } | tee -a "$OUTD/peer-state.md"
fi
{
echo
echo "$(dl_load end); $(dl_elapsed) s in all. Per row one \`MZ_PEER_STATE_BIN=peer_state_reload bench_store ttft MODEL N DIR\` (raw output: raw.log); llama.cpp: medians of 3 cold reloads, each in a fresh process, synthetic state of its own layout."
} | tee -a "$OUTD/peer-state.md"
rm -rf "$ST"
