#!/usr/bin/env bash
# The pool's two joins in one call: our bench_throughput with the claimed
# join (the default: a job waits only for the workers that entered it) and
# with MZ_POOL_JOIN=all (every job waits for every worker, the join before
# it), alternating run by run and cell by cell, so a spell of steal time
# falls on both. Each run's decode steal (bench_throughput's tg_steal_ms,
# all CPUs) and pool counters (MZ_POOL_STATS=1) go to runs.csv; the table
# (also $OUT/join-ab.md) gives per cell and join min / median / max tg128,
# the spread, the runs below 3/4 of the cell's median over both joins, and
# the median tg128 of the runs with at least STEAL_MS of steal in their
# decode. docs/BENCHMARKS.md, "The claimed join".
#
# On the 16-vCPU machine, after `../shared/device/bundle.sh build` here:
#   device run, carry [".bundle"]:  bash bench/device-join-ab.sh
# Locally: MZ_LOCAL=1 THREADS=2 MODELS="tiny-qwen3:Q8_0" BUDGET_S=20 bash bench/device-join-ab.sh
# Knobs: THREADS (16), MODELS ("preset:TYPE ..."), BUDGET_S (no round starts
# after this many seconds; 420), MAX_ROUNDS (30), STEAL_MS (500).
set -uo pipefail
OUTD=${OUT:-/tmp/join-ab}; mkdir -p "$OUTD"
THREADS=${THREADS:-16}
MODELS=${MODELS:-"qwen3-0.6b:Q4_0 qwen3-0.6b:Q4_1 qwen3-0.6b:Q8_0 qwen3-0.6b:F16"}
BUDGET_S=${BUDGET_S:-420}
MAX_ROUNDS=${MAX_ROUNDS:-30}
STEAL_MS=${STEAL_MS:-500}
W=${WORK:-/tmp/scaling-models}; mkdir -p "$W"
. "$(dirname "$0")/device-lib.sh" # BIN, LIBP, VOCAB; mz, dl_gen_model, dl_elapsed

for spec in $MODELS; do
    dl_gen_model "${spec%%:*}" "${spec#*:}" "$W/${spec%%:*}-${spec#*:}.gguf" "$OUTD/gen.log" ||
        echo "gen-model ${spec} failed: $OUTD/gen.log" >&2
done

one() { # file join -> "pp tg tg_steal_ms worker_sleeps late_arrivals"
    MZ_POOL_STATS=1 MZ_POOL_JOIN=$2 mz bench_throughput -m "$1" -t "$THREADS" -p 512 -n 128 -r 1 2>&1 | awk '
        /^threadpool:/ { for (i = 1; i <= NF; i++) { if ($(i+1) == "worker") ws += $i; if ($(i+1) == "late") la += $i } }
        /^run=1 / { for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } }
        END { printf "%s %s %s %d %d\n", v["pp512"] ? v["pp512"] : "-", v["tg128"] ? v["tg128"] : "-",
              v["tg_steal_ms"] != "" ? v["tg_steal_ms"] : "-", ws, la }'
}

echo "cell,join,round,pp512,tg128,tg_steal_ms,worker_sleeps,late_arrivals" >"$OUTD/runs.csv"
for r in $(seq 1 "$MAX_ROUNDS"); do
    [ "$(dl_elapsed)" -ge "$BUDGET_S" ] && break
    for spec in $MODELS; do
        f="$W/${spec%%:*}-${spec#*:}.gguf"
        [ -f "$f" ] || continue
        order="claimed all"; [ $((r % 2)) = 0 ] && order="all claimed"
        for j in $order; do
            read -r pp tg st ws la <<<"$(one "$f" "$j")"
            echo "$spec,$j,$r,$pp,$tg,$st,$ws,$la" >>"$OUTD/runs.csv"
        done
    done
done

python3 - "$OUTD/runs.csv" "$STEAL_MS" "$THREADS" <<'PY' | tee "$OUTD/join-ab.md"
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
steal_ms, threads = int(sys.argv[2]), sys.argv[3]
def num(r, k):
    try: return float(r[k])
    except ValueError: return None
rounds = max((int(r["round"]) for r in rows), default=0)
print("%s threads, %d alternating rounds; slow = under 3/4 of the cell's median tg128 over both joins;" % (threads, rounds))
print("stolen = runs with at least %d ms of steal (all CPUs) during their decode" % steal_ms)
print()
print("| cell | join | runs | tg128 min / median / max | spread | slow runs | stolen runs: tg128 median (n) | pp512 median | worker sleeps (median a run) | late arrivals (median) |")
print("|---|---|---|---|---|---|---|---|---|---|")
for cell in dict.fromkeys(r["cell"] for r in rows):
    both = [num(r, "tg128") for r in rows if r["cell"] == cell and num(r, "tg128")]
    if not both: continue
    slow_at = 0.75 * statistics.median(both)
    for j in ("claimed", "all"):
        rs = [r for r in rows if r["cell"] == cell and r["join"] == j and num(r, "tg128")]
        if not rs: continue
        tg = [num(r, "tg128") for r in rs]
        pp = [num(r, "pp512") for r in rs if num(r, "pp512")]
        st = [num(r, "tg128") for r in rs if num(r, "tg_steal_ms") is not None and num(r, "tg_steal_ms") >= steal_ms]
        print("| %s | %s | %d | %.1f / %.1f / %.1f | %.2f | %d | %s | %s | %d | %d |" % (
            cell, j, len(rs), min(tg), statistics.median(tg), max(tg), max(tg) / min(tg),
            sum(t < slow_at for t in tg),
            "%.1f (%d)" % (statistics.median(st), len(st)) if st else "- (0)",
            "%.1f" % statistics.median(pp) if pp else "-",
            statistics.median(int(r["worker_sleeps"]) for r in rs), statistics.median(int(r["late_arrivals"]) for r in rs)))
PY
echo "total $(dl_elapsed) s" | tee -a "$OUTD/join-ab.md"
