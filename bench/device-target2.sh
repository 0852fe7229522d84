#!/usr/bin/env bash
# Issue 32's target 2 in one call: `mzcache bench ttft` at 50 % remaining
# (qwen3-0.6b F16 shape, 16k context, 8 compute threads, default settings,
# the device profile made once), several variants of its flags taking turns
# round by round, so that a slow spell of the machine falls on all of them.
# Each round is a fresh invocation (its own context, its own in-memory TTFT:
# that figure moves between invocations, docs/BENCHMARKS.md). The table
# (also $OUT/target2.md) gives per variant the median of its round medians,
# every run's range, the ratio to the same invocation's in-memory TTFT by
# round, the next token and when the restore was complete; every round's
# CSV is kept as $OUT/ROUND-VARIANT.csv. docs/BENCHMARKS.md, "Target 2:
# attention reads lent chunks a tile at a time".
#
# On the 16-vCPU machine, after `../shared/device/bundle.sh build` here:
#   device run, carry [".bundle"]:  bash bench/device-target2.sh
# Locally: MZ_LOCAL=1 THREADS=2 CTX=2048 ROUNDS=1 bash bench/device-target2.sh
# Knobs: VARIANTS ("name=flags|name=flags"; default "rows=|whole=--lend-whole"),
# ROUNDS (3), BUDGET_S (no round starts after this many seconds; 420),
# CTX (16384), THREADS (8), LEVEL (50), MODEL (qwen3-0.6b:F16).
set -uo pipefail
OUTD=${OUT:-/tmp/target2}; mkdir -p "$OUTD"
VARIANTS=${VARIANTS:-"rows=|whole=--lend-whole"}
ROUNDS=${ROUNDS:-3}
BUDGET_S=${BUDGET_S:-420}
CTX=${CTX:-16384}
THREADS=${THREADS:-8}
LEVEL=${LEVEL:-50}
MODEL=${MODEL:-qwen3-0.6b:F16}
W=${WORK:-/tmp/scaling-models}; mkdir -p "$W"
. "$(dirname "$0")/device-lib.sh" # BIN, LIBP, VOCAB; mz, dl_gen_model, dl_elapsed

gguf="$W/${MODEL%%:*}-${MODEL#*:}.gguf"
dl_gen_model "${MODEL%%:*}" "${MODEL#*:}" "$gguf" "$OUTD/gen.log" || { echo "gen-model failed: $OUTD/gen.log" >&2; exit 1; }
prof="$OUTD/profile.json"
[ -f "$prof" ] || mz mzcache profile -o "$prof" --file-mib 256 --mem-mib 256 --wait 1 --no-loaded -q >"$OUTD/profile.log" 2>&1 ||
    { echo "profile failed: $OUTD/profile.log" >&2; exit 1; }

IFS='|' read -r -a specs <<<"$VARIANTS"
for ((r = 1; r <= ROUNDS; r++)); do
    for spec in "${specs[@]}"; do
        [ "$(dl_elapsed)" -gt "$BUDGET_S" ] && { echo "budget reached at $(dl_elapsed) s"; break 2; }
        name=${spec%%=*} flags=${spec#*=}
        # shellcheck disable=SC2086 # flags is a list of options
        mz mzcache bench ttft --models "$gguf" --ctx "$CTX" --levels "$LEVEL" --modes mzcache --codecs auto --runs 3 \
            -t "$THREADS" --profile "$prof" --swap-dir "$OUTD/swap" -o "$OUTD/o" --name t2 --no-plot $flags \
            >"$OUTD/$r-$name.log" 2>&1 || echo "round $r $name failed: $OUTD/$r-$name.log" >&2
        cp "$OUTD/o/t2.csv" "$OUTD/$r-$name.csv" 2>/dev/null
        echo "round $r $name done at $(dl_elapsed) s"
    done
done

# One line per (round, variant) CSV: name, in-memory TTFT, the level's TTFT,
# its runs, next token ms, all-ready ms; then the table per variant.
summarize() {
    local spec name f
    for spec in "${specs[@]}"; do
        name=${spec%%=*}
        for f in "$OUTD"/*-"$name".csv; do
            [ -f "$f" ] || continue
            awk -F, -v name="$name" -v level="$LEVEL" '
                NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
                $col["level"] == 100 { inm = $col["ttft_s"] }
                $col["level"] == level { t = $col["ttft_s"]; runs = $col["runs_s"]; nt = $col["next_token_ms"]; rd = $col["all_ready_ms"] }
                END { if (t != "" && inm != "") print name, inm, t, runs, nt, rd }' "$f"
        done
    done | awk '
        function med(a, n,   i, j, x) { for (i = 2; i <= n; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
                                       return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
        {
            v = $1; if (!(v in n)) order[++nv] = v
            k = ++n[v]; m[v, k] = $3; ratio = $3 / $2
            if (!(v in rlo) || ratio < rlo[v]) rlo[v] = ratio; if (!(v in rhi) || ratio > rhi[v]) rhi[v] = ratio
            for (i = 4; i <= 6; i++) { x = $i + 0; if (!(v in lo) || x < lo[v]) lo[v] = x; if (!(v in hi) || x > hi[v]) hi[v] = x }
            if (!(v in ntlo) || $7 < ntlo[v]) ntlo[v] = $7; if (!(v in nthi) || $7 > nthi[v]) nthi[v] = $7
            if (!(v in rdlo) || $8 < rdlo[v]) rdlo[v] = $8; if (!(v in rdhi) || $8 > rdhi[v]) rdhi[v] = $8
        }
        END {
            for (j = 1; j <= nv; j++) {
                v = order[j]; for (k = 1; k <= n[v]; k++) a[k] = m[v, k]
                printf "| %s | %d | %.3f | %.3f-%.3f | %.2f-%.2f | %.0f-%.0f | %.0f-%.0f |\n", v, n[v], med(a, n[v]),
                       lo[v], hi[v], rlo[v], rhi[v], ntlo[v], nthi[v], rdlo[v], rdhi[v]
            }
        }'
}

{
    dl_title device-target2.sh
    echo
    echo "$MODEL, ctx $CTX, $THREADS threads, level $LEVEL %, variants: $VARIANTS"
    echo
    dl_head variant rounds "TTFT s, median of round medians" "every run s" "x in-memory TTFT (by round)" "next token ms" "all restored ms"
    summarize
    echo
    dl_load end
} | tee "$OUTD/target2.md"
