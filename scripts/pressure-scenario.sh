#!/usr/bin/env bash
# pressure-scenario.sh — mzcache serve under real memory pressure (issue 9).
#
# Runs `mzcache serve` in a cgroup-v1 memory cgroup with a limit (created
# under this process's own memory cgroup and removed afterwards), builds a
# multi-turn conversation, then grows a memory hog in the same cgroup past
# what the limit leaves free. With no swap, the kernel's OOM killer is what
# happens to a server that does not give memory back; mzcache should evict
# (usage thresholds → mz_evict steps), survive, and answer the next request
# exactly as it would have without pressure. A control run does the same
# with --no-pressure (a server that keeps everything: it is expected to be
# OOM-killed). A third run is the llama.cpp-like baseline: `serve --mode
# os-paging --no-pressure` (weights mmap'd from the GGUF file, KV in
# anonymous memory, only the kernel's reclaim), with a zram swap device set up
# for it where the kernel offers zram (scripts/zram-swap.sh), as Android does;
# what happens to it — killed, or how slow its next answer is — is recorded.
#
# usage: scripts/pressure-scenario.sh [--quick] [--no-control] [--no-os-paging] [--out DIR]
#                                     [--png FILE] [--model FILE] [--bin FILE] [--codec raw|q8]
#        scripts/pressure-scenario.sh --multitask [--rounds N] [--ctx-tokens N] [--out DIR] [--png FILE]
#                                     [--daemons mzcache,os-paging-zram,os-paging]
#   --multitask    the paper's Fig. 15 scenario instead (scripts/multitask_scenario.py): a real
#                  conversation of >= 8k tokens, ten rounds of a hog growing and releasing, a
#                  question after each; mzcache, os-paging with zram (the cgroup limit follows
#                  the budget less zram's pool: zram keeps what it stores in RAM), os-paging
#                  without swap. --daemons runs some of them (the plan, limit and hog peak, is
#                  made by the first run and kept in OUT/plan.json for the others)
#   --headroom X   mzcache's --pressure-headroom in the multitask scenario (default 64M: ~3 hog
#                  steps, 32 MiB less than the 96 MiB the plan leaves above the full footprint, so that
#                  everything evicted fits back once the hog is gone)
#   --no-restore-ahead  mzcache leaves what pressure evicted for the question to restore
#   --quick        small conversation, no control or os-paging run (what the ctest test runs)
#   --no-os-paging skip the os-paging baseline run
#   --no-zram      run the os-paging baseline without swap even where zram is available
#   --png FILE     where the plot goes (default OUT/pressure-scenario.png)
#   --codec C      KV codec (default raw: lossless, so the answer after pressure must equal
#                  the one before bit for bit; with q8 it is reported, not required)
# Exit: 0 pass, 1 fail, 77 skipped (no writable v1 memory cgroup, no model, not root).
set -euo pipefail
cd "$(dirname "$0")/.."

MULTI=0; DAEMONS=mzcache,os-paging-zram,os-paging; ROUNDS=10; CTX_TOKENS=8192; QUICK=0; CONTROL=1; OSPAGING=1; USE_ZRAM=1; OUT=""; PNG=""; MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf; CODEC=raw
BIN="${MZ_BIN:-build/mzcache}"
MT_EXTRA=()
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) QUICK=1; CONTROL=0; OSPAGING=0 ;;
        --multitask) MULTI=1 ;;
        --rounds) ROUNDS="$2"; shift ;;
        --daemons) DAEMONS="$2"; shift ;;
        --headroom) MT_EXTRA+=(--headroom "$2"); shift ;;
        --no-restore-ahead) MT_EXTRA+=(--no-restore-ahead) ;;
        --ctx-tokens) CTX_TOKENS="$2"; shift ;;
        --no-control) CONTROL=0 ;;
        --no-os-paging) OSPAGING=0 ;;
        --no-zram) USE_ZRAM=0 ;;
        --out) OUT="$2"; shift ;;
        --png) PNG="$2"; shift ;;
        --model) MODEL="$2"; shift ;;
        --bin) BIN="$2"; shift ;;
        --codec) CODEC="$2"; shift ;;
        -h|--help) sed -n '2,37p' "$0"; exit 0 ;;
        *) echo "pressure-scenario: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
USER_OUT="$OUT"; USER_PNG="$PNG"
OUT="${OUT:-build/pressure-scenario}"
PNG="${PNG:-$OUT/pressure-scenario.png}"
skip() { echo "pressure-scenario: SKIP: $*" >&2; exit 77; }

[ -f "$MODEL" ] || skip "no model $MODEL (run make model)"
[ -x "$BIN" ] || { echo "pressure-scenario: no binary $BIN (build first or set MZ_BIN)" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || skip "needs root to create a memory cgroup"
# This process's v1 memory cgroup: /proc/self/cgroup line "N:memory:/path".
REL=$(awk -F: '{ n = split($2, c, ","); for (i = 1; i <= n; i++) if (c[i] == "memory") print $3 }' /proc/self/cgroup)
MNT=$(awk '$9 == "cgroup" && $NF ~ /(^|,)memory(,|$)/ { print $5; exit }' /proc/self/mountinfo)
[ -n "$REL" ] && [ -n "$MNT" ] || skip "no cgroup-v1 memory controller here (cgroup v2 memory.max is not wired up in this script yet)"
PARENT="$MNT${REL%/}"
[ -d "$PARENT" ] || skip "memory cgroup directory $PARENT not visible"
mkdir -p "$OUT"
CGS=()
ZRAM=""
cleanup() {
    if [ -n "$ZRAM" ]; then scripts/zram-swap.sh down "$ZRAM" >/dev/null 2>&1 || true; fi
    for cg in "${CGS[@]}"; do
        [ -d "$cg" ] || continue
        # only our own processes are in there (the daemon and the hog)
        for pid in $(cat "$cg/cgroup.procs" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
        for _ in $(seq 50); do rmdir "$cg" 2>/dev/null && break; sleep 0.1; done
    done
}
trap cleanup EXIT
# Sets CG (not through $(...): the list for cleanup must live in this shell).
make_cg() {
    CG="$PARENT/mzcache-scenario-$$-$1"
    mkdir "$CG" 2>/dev/null || skip "cannot create a child memory cgroup under $PARENT"
    CGS+=("$CG")
}

# plot SCRIPT.gp EXTRA: the figure $PNG from the results in $OUT, where gnuplot exists
plot() {
    if ! command -v gnuplot >/dev/null; then
        echo "pressure-scenario: no gnuplot (apt-get install gnuplot-nox, or MZ_WITH_PLOT=1 scripts/install-deps.sh): no plot" >&2
        return 0
    fi
    gnuplot -e "dir='$OUT'; out='$PNG'; $2" "$1" 2>"$OUT/gnuplot.log" \
        && echo "pressure-scenario: plot in $PNG" >&2 \
        || echo "pressure-scenario: plotting failed (see $OUT/gnuplot.log)" >&2
}

if [ "$MULTI" -eq 1 ]; then
    OUT="${USER_OUT:-build/multitask}"
    PNG="${USER_PNG:-$OUT/multitask.png}"
    mkdir -p "$OUT"
    want() { case ",$DAEMONS," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
    # A new plan when mzcache (the first daemon) runs; else the kept one.
    if want mzcache || [ ! -f "$OUT/plan.json" ]; then rm -f "$OUT/plan.json"; fi
    MT=(python3 scripts/multitask_scenario.py --bin "$BIN" --model "$MODEL" --out "$OUT" --plan "$OUT/plan.json"
        --rounds "$ROUNDS" --ctx-tokens "$CTX_TOKENS" ${MT_EXTRA[@]+"${MT_EXTRA[@]}"})
    TAGS=""
    if want mzcache; then
        make_cg mt-mzcache
        echo "pressure-scenario: multitask, mzcache, cgroup $CG; output in $OUT" >&2
        "${MT[@]}" --cgroup "$CG" --tag mzcache --pressure > "$OUT/mzcache-result.json"
    fi
    [ -f "$OUT/mzcache-summary.json" ] && TAGS="mzcache"
    if want os-paging-zram; then
        make_cg mt-zram
        if scripts/zram-swap.sh check >/dev/null 2>&1 && ZRAM=$(scripts/zram-swap.sh up 1G); then
            echo "pressure-scenario: multitask, os-paging with zram swap on $ZRAM" >&2
            "${MT[@]}" --cgroup "$CG" --tag os-paging-zram --mode os-paging --zram "$ZRAM" \
                > "$OUT/os-paging-zram-result.json" || true
            scripts/zram-swap.sh down "$ZRAM" >/dev/null 2>&1 || true; ZRAM=""
        else
            echo "pressure-scenario: no zram here ($(scripts/zram-swap.sh check 2>&1 | tail -1)): os-paging+zram skipped" >&2
        fi
    fi
    [ -f "$OUT/os-paging-zram-summary.json" ] && TAGS="$TAGS os-paging-zram"
    if want os-paging; then
        make_cg mt-noswap
        echo "pressure-scenario: multitask, os-paging without swap" >&2
        "${MT[@]}" --cgroup "$CG" --tag os-paging --mode os-paging > "$OUT/os-paging-result.json" || true
    fi
    [ -f "$OUT/os-paging-summary.json" ] && TAGS="$TAGS os-paging"
    TAGS="${TAGS# }"
    python3 - "$OUT" $TAGS <<'EOF2'
import json, os, sys
out, tags = sys.argv[1], sys.argv[2:]
plan = json.load(open(os.path.join(out, "plan.json")))
print("multitask: limit %.0f MiB, hog peak %d MiB (planned on %s: usage %.0f MiB, KV %.0f MiB, weights %.0f MiB)" % (
    plan["limit_mib"], plan["hog_max_mib"], plan["planned_by"], plan["usage_mib"], plan["kv_mib"], plan["weights_mib"]))
print("| daemon | survived | TTFT in memory ms | TTFT per round ms | evictions | freed/need max (need >= 2 MiB) |")
print("|---|---|---|---|---|---|")
for t in tags:
    p = os.path.join(out, t + "-summary.json")
    if not os.path.exists(p):
        print("| %s | (no summary: see %s-daemon.log) | | | | |" % (t, t))
        continue
    r = json.load(open(p))
    marks = " ".join(("%.0f" % x["ttft_ms"]) + ("" if x["survived"] else "(K)") for x in r["round_rows"])
    rm = r.get("ratio_max_need_ge_2mib")
    print("| %s | %d/%d | %.0f | %s | %d | %s |" % (t, r["survived"], r["rounds"], r["ttft_in_memory_ms"], marks,
          r["evictions"], "%.2f" % rm if rm is not None else "-"))
EOF2
    plot scripts/multitask-plot.gp "tags='$TAGS'"
    exit 0
fi

if [ "$QUICK" -eq 1 ]; then
    ARGS=(--turns 2 --words 90 --answer-tokens 12 --headroom-mib 40 --hog-step-mib 24 --hog-step-s 1.0)
else
    ARGS=(--turns 7 --words 170 --answer-tokens 24 --headroom-mib 48 --hog-step-mib 16 --hog-step-s 1.5)
fi

make_cg mz
echo "pressure-scenario: cgroup $CG; output in $OUT" >&2
python3 scripts/pressure_scenario.py --bin "$BIN" --model "$MODEL" --cgroup "$CG" --out "$OUT" \
    --tag mzcache --codec "$CODEC" "${ARGS[@]}" > "$OUT/mzcache-result.json"
if [ "$CONTROL" -eq 1 ]; then
    make_cg control
    python3 scripts/pressure_scenario.py --bin "$BIN" --model "$MODEL" --cgroup "$CG" --out "$OUT" \
        --tag control --codec "$CODEC" --no-pressure "${ARGS[@]}" > "$OUT/control-result.json" || true
fi
if [ "$OSPAGING" -eq 1 ]; then
    make_cg ospaging
    if [ "$USE_ZRAM" -eq 1 ] && scripts/zram-swap.sh check >/dev/null 2>&1; then
        ZRAM=$(scripts/zram-swap.sh up 1G) || ZRAM=""
    fi
    if [ -n "$ZRAM" ]; then
        echo "pressure-scenario: os-paging run with zram swap on $ZRAM" >&2
        SWAPNOTE="zram $ZRAM"
    else
        why=$([ "$USE_ZRAM" -eq 0 ] && echo "--no-zram" || scripts/zram-swap.sh check 2>&1 | tail -1)
        echo "pressure-scenario: os-paging run WITHOUT swap ($why)" >&2
        SWAPNOTE="none"
    fi
    python3 scripts/pressure_scenario.py --bin "$BIN" --model "$MODEL" --cgroup "$CG" --out "$OUT" \
        --tag os-paging --mode os-paging --codec "$CODEC" --no-pressure "${ARGS[@]}" \
        > "$OUT/os-paging-result.json" || true
    echo "$SWAPNOTE" > "$OUT/os-paging-swap.txt"
    if [ -n "$ZRAM" ]; then scripts/zram-swap.sh down "$ZRAM" >/dev/null 2>&1 || true; ZRAM=""; fi
fi

# Verdict.
rc=0
python3 - "$OUT" "$CONTROL" "$OSPAGING" <<'EOF' || rc=$?
import json, sys, os
out, control = sys.argv[1], sys.argv[2] == "1"
r = json.load(open(os.path.join(out, "mzcache-summary.json")))
print("mzcache: context %d tokens, evictable %.1f MiB, limit %.1f MiB, hog %d/%d MiB" % (
    r["context_tokens"], r["evictable_mib"], r["limit_mib"], r["hog_reached_mib"], r["hog_max_mib"]))
print("  alive: %s; OOM kills: %s; pressure evictions: %s (%.1f MiB), stage %s" % (
    r["daemon_alive"], r["oom_kills"], r.get("pressure_evictions"), r.get("pressure_evicted_mib", 0), r.get("stage")))
print("  TTFT: new turn %.0f ms, repeat all resident %.0f ms, after pressure %.0f ms (%.1f MiB restored on demand); "
      "recompute estimate %.0f ms" % (r["ttft_new_turn_ms"], r["ttft_repeat_resident_ms"], r.get("ttft_after_ms", -1),
                                     r.get("evicted_mib_before_request", 0), r["recompute_est_ms"]))
print("  same greedy answer after pressure (codec %s): %s (first %s characters equal)" % (
    r["codec"], r.get("same_answer"), r.get("same_prefix_chars")))
ok = r["daemon_alive"] and (r.get("same_answer") or r["codec"] != "raw") and (r.get("pressure_evictions") or 0) >= 1 and not r["hog_killed"]
if control and os.path.exists(os.path.join(out, "control-summary.json")):
    c = json.load(open(os.path.join(out, "control-summary.json")))
    print("control (--no-pressure): alive %s, OOM kills %s, hog reached %d MiB, exit %s" % (
        c["daemon_alive"], c["oom_kills"], c["hog_reached_mib"], c["daemon_exit"]))
if sys.argv[3] == "1" and os.path.exists(os.path.join(out, "os-paging-summary.json")):
    o = json.load(open(os.path.join(out, "os-paging-summary.json")))
    swap = open(os.path.join(out, "os-paging-swap.txt")).read().strip()
    print("os-paging (llama.cpp-like, swap: %s): alive %s, OOM kills %s, hog reached %d/%d MiB" % (
        swap, o["daemon_alive"], o["oom_kills"], o["hog_reached_mib"], o["hog_max_mib"]))
    if o["daemon_alive"]:
        print("  TTFT after pressure %.0f ms (all resident before: %.0f ms); same answer: %s" % (
            o.get("ttft_after_ms", -1), o["ttft_repeat_resident_ms"], o.get("same_answer")))
elif sys.argv[3] == "1":
    print("os-paging: no summary (the run failed before the end; see its daemon log)")
sys.exit(0 if ok else 1)
EOF
plot scripts/pressure-plot.gp "control=$CONTROL"
exit $rc
