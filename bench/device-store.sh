#!/usr/bin/env bash
# Durable sessions on the 16-vCPU machine (issue 17): resume TTFT after a
# restart at 8k/16k/32k tokens for the SmolLM2-135M and qwen3-0.6b shapes,
# the recompute baseline where it fits the time, the eviction of all clean
# KV of a 16k session (4 KiB pages vs huge-page slabs) and the write-behind's
# cost to decode speed. Prints markdown (docs/BENCHMARKS.md, "Durable
# sessions") and writes it to $OUT/store.md.
#
# Models are generated there (gen-model, random weights of the real shapes:
# timing does not depend on the values; the 98 MB SmolLM2 file is over the
# carry limit). Resume uses bench_store's synthetic session (real records and
# checksums, random KV) written by a process that exits, page cache dropped:
# "full chunk" = the session ends on a chunk boundary and nothing but the
# chunks is stored (256 tokens recomputed, a kill before any sync), "tail" =
# one more token, i.e. the partly filled chunk is in the store too, as after
# mz_session_sync (1 token recomputed). Both restarts call mz_store_prefetch
# before the model load; the last column is the tail case without it.
#
# On the device (see ../shared/DEVICE.md), from the project root, after
# `../shared/device/bundle.sh build` here:
#   device run, carry [".bundle"]:  bash bench/device-store.sh
# About 5-6 minutes with the defaults. Locally at small sizes:
#   MZ_LOCAL=1 SIZES="1024" RECOMPUTE_MAX="smollm2-135m:1024" SHAPES="smollm2-135m:Q4_1" bash bench/device-store.sh
# Knobs: SIZES ("8192 16384 32768"), SHAPES ("smollm2-135m:Q4_1 qwen3-0.6b:F16"),
#        RECOMPUTE_MAX ("smollm2-135m:16384 qwen3-0.6b:8192": the largest N
#        whose recompute runs, per preset), EVICT_N (16384), WB_N (8192).
set -uo pipefail
OUTD=${OUT:-/tmp/store-out}; mkdir -p "$OUTD"
SIZES=${SIZES:-"8192 16384 32768"}
SHAPES=${SHAPES:-"smollm2-135m:Q4_1 qwen3-0.6b:F16"}
RECOMPUTE_MAX=${RECOMPUTE_MAX:-"smollm2-135m:16384 qwen3-0.6b:8192"}
EVICT_N=${EVICT_N:-16384}
WB_N=${WB_N:-8192}
W=${WORK:-/tmp/store-models}; mkdir -p "$W"
ST=${STORE:-/tmp/store-bench}; rm -rf "$ST"; mkdir -p "$ST"
. "$(dirname "$0")/device-lib.sh"
rmax() { # preset -> largest N to recompute (0: none)
    local p
    for p in $RECOMPUTE_MAX; do [ "${p%%:*}" = "$1" ] && { echo "${p#*:}"; return; }; done
    echo 0
}
num() { sed -n "$1" | head -1; }
{
dl_title device-store.sh
echo
echo "$(dl_load start); THP: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null)"
echo
dl_head shape tokens "resume, full chunk (256 recomputed) ms" "resume, tail (1 recomputed) ms" \
    "of which restore ms" "recompute ms" "recompute / resume (tail)" \
    "recompute / resume (full chunk)" "tail without prefetch ms"
} | tee "$OUTD/store.md"
for shape in $SHAPES; do
    preset=${shape%%:*} type=${shape#*:}
    M="$W/$preset-$type.gguf"
    dl_gen_model "$preset" "$type" "$M" "$OUTD/gen-$preset.log" ||
        { echo "gen-model $preset failed" | tee -a "$OUTD/store.md"; continue; }
    lim=$(rmax "$preset")
    for n in $SIZES; do
        r=$(mz bench_store resume "$M" "$n" "$ST" 2>>"$DL_ERRORS")
        full=$(echo "$r" | num "s/^tokens $n: TTFT \([0-9]*\) ms.*/\1/p")
        tail=$(echo "$r" | num "s/^tokens $((n + 1)): TTFT \([0-9]*\) ms.*/\1/p")
        rest=$(echo "$r" | num "s/^tokens $((n + 1)):.*all units ready \([0-9]*\),.*/\1/p")
        # the same restart without mz_store_prefetch (the store's reads after the model load)
        nopf=$(MZ_NO_PREFETCH=1 mz bench_store resume "$M" "$n" "$ST" 2>>"$DL_ERRORS" |
               num "s/^tokens $((n + 1)): TTFT \([0-9]*\) ms.*/\1/p")
        rc=-
        if [ "$n" -le "$lim" ]; then
            rc=$(mz bench_store recompute "$M" "$n" "$ST" 2>>"$DL_ERRORS" |
                 num "s/^tokens $n: recompute TTFT \([0-9]*\) ms/\1/p")
        fi
        dl_row "$preset $type" "$n" "${full:--}" "${tail:--}" "${rest:--}" "${rc:--}" \
            "$(dl_ratio "$rc" "$tail")" "$(dl_ratio "$rc" "$full")" "${nopf:--}" | tee -a "$OUTD/store.md"
    done
done
# one line per generated shape: "- PRESET TYPE: " and the last line of `bench_store MODE MODEL N`
per_shape() {
    for shape in $SHAPES; do
        preset=${shape%%:*} type=${shape#*:}
        M="$W/$preset-$type.gguf"
        [ -f "$M" ] || continue
        echo "- $preset $type: $(mz bench_store "$1" "$M" "$2" "$ST" 2>>"$DL_ERRORS" | tail -1)"
    done
}
{
echo
echo "Evicting all clean KV of a $EVICT_N-token session (ms per GiB freed, medians of 5):"
echo
per_shape evict-clean "$EVICT_N"
echo
echo "Write-behind cost to decode speed ($WB_N-position session):"
echo
per_shape writebehind "$WB_N"
echo
dl_load end
} | tee -a "$OUTD/store.md"
rm -rf "$ST"
