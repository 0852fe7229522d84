# bench/device-lib.sh — the bookkeeping the device benchmarks share, sourced
# (not run) by bench/device-sessions.sh, device-store.sh,
# device-peer-state.sh, device-restore.sh, device-pressure.sh,
# device-scaling.sh, device-phases.sh, device-join-ab.sh, device-target2.sh
# and device-f16-blocking.sh
# after they set OUTD:
#   - where the binaries are: MZ_LOCAL=1 this checkout's build (MZ_BUILD,
#     default ./build) and the first model in models/ as the vocabulary
#     (VOCAB), else the bundle (BUNDLE, default .bundle: bin/, lib/,
#     vocab.gguf); sets BIN, LIBP, VOCAB, BUNDLE;
#   - mz TOOL ARGS: runs a built program with the bundle's libraries;
#   - dl_gen_model PRESET TYPE FILE LOG: makes a generated model once (kept
#     in FILE for the next cell; its output and, on success, its time go
#     to LOG); fails as gen-model did;
#   - dl_elapsed: seconds since the script sourced this file (DL_T0);
#   - dl_title NAME, dl_load WHEN: the markdown's title and load-average lines;
#   - dl_head COLUMN...: a markdown table's header and rule;
#   - dl_row FIELD...: one table row ("| a | b |"; an empty field stays empty);
#   - dl_ratio A B [FORMAT]: A / B in FORMAT (default %.1fx), "-" when either
#     is empty or "-";
#   - dl_llama_bench LLAMA_BENCH MODEL THREADS P N: "pp tg", the tok/s of one
#     llama-bench repetition of pp P and tg N (its own warm-up first); "-"
#     for a side not run (0) and both when LLAMA_BENCH is not there.
# Errors of the measured programs go to $OUTD/errors.log where a script
# redirects them there (DL_ERRORS).
DL_T0=$(date +%s)
DL_ERRORS="$OUTD/errors.log"
if [ "${MZ_LOCAL:-0}" = 1 ]; then
    BIN=${MZ_BUILD:-$PWD/build} LIBP=
    VOCAB=${VOCAB:-$(ls models/*.gguf | head -1)}
else
    BUNDLE=${BUNDLE:-.bundle}
    BIN=$PWD/$BUNDLE/bin LIBP=$PWD/$BUNDLE/lib
    VOCAB=$BUNDLE/vocab.gguf
fi

mz() { LD_LIBRARY_PATH=$LIBP "$BIN/$1" "${@:2}"; }

dl_elapsed() { echo $(( $(date +%s) - DL_T0 )); }

dl_gen_model() { # preset type file log -> 0 when the file is there
    [ -f "$3" ] && return 0
    local t0
    t0=$(date +%s)
    mz mzcache gen-model --preset "$1" --type "$2" --vocab-from "$VOCAB" -o "$3" >>"$4" 2>&1 || return
    echo "gen-model $1 $2: $(( $(date +%s) - t0 )) s" >>"$4"
}

dl_title() { echo "## bench/$1 on $(nproc) vCPUs, $(date -u '+%Y-%m-%d %H:%M UTC')"; }

dl_load() { echo "load average at $1: $(cut -d' ' -f1-3 /proc/loadavg)"; }

dl_head() {
    local c
    printf '|'; for c in "$@"; do printf ' %s |' "$c"; done; echo
    printf '|'; for c in "$@"; do printf -- '---|'; done; echo
}

dl_row() {
    local c
    printf '|'; for c in "$@"; do printf ' %s |' "$c"; done; echo
}

dl_ratio() {
    if [ -n "$1" ] && [ "$1" != - ] && [ -n "$2" ] && [ "$2" != - ]; then
        awk -v a="$1" -v b="$2" -v f="${3:-%.1fx}" 'BEGIN{printf f, a/b}'
    else
        echo -
    fi
}

dl_llama_bench() {
    [ -x "$1" ] || { echo "- -"; return; }
    "$1" -m "$2" -t "$3" -p "$4" -n "$5" -r 1 -o csv 2>>"$DL_ERRORS" | python3 -c '
import csv, sys
p, n = sys.argv[1:]
pp = tg = "-"
for r in csv.DictReader(sys.stdin):
    if r.get("n_prompt") == p and r.get("n_gen") == "0": pp = "%.1f" % float(r["avg_ts"])
    if r.get("n_prompt") == "0" and r.get("n_gen") == n: tg = "%.1f" % float(r["avg_ts"])
print(pp, tg)' "$4" "$5"
}
