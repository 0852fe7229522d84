#!/usr/bin/env bash
# Soak test of `mzcache serve` with wrk (issue 10): for a bounded time, wrk
# sends a mix of chat / completion requests (some streamed), status and
# metrics polls, evictions, restores and bad requests over loopback
# (scripts/soak.lua), while the daemon's RSS is sampled every 0.5 s.
#
#   scripts/soak.sh [SECONDS]         default 60
#
# Environment: MZ_BIN (default build/mzcache), MZ_MODEL (default the bundled
# SmolLM2), SOAK_CONNS (wrk connections, default 8), SOAK_WRK_THREADS (2),
# SOAK_SERVER_THREADS (compute threads, 2), SOAK_OUT (where the RSS trace,
# wrk output and server log go; default a temp dir that is kept).
#
# Pass (exit 0) when: the daemon is alive at the end; no socket errors
# (connect/read/write/timeout: every request got an answer, nothing reset);
# every status is 2xx, 429 or another 4xx (no 5xx); after POST /mz/restore
# and the warm-up request again, RSS is within max(32 MiB, 10%) of the
# baseline taken after the same warm-up; SIGTERM ends it with status 0 and
# the swap file removed. Exit 1 otherwise, 77 when wrk/binary/model is missing.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DURATION=${1:-60}
BIN=${MZ_BIN:-$ROOT/build/mzcache}
MODEL=${MZ_MODEL:-$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf}
CONNS=${SOAK_CONNS:-8}
WRK_THREADS=${SOAK_WRK_THREADS:-2}
SRV_THREADS=${SOAK_SERVER_THREADS:-2}

command -v wrk >/dev/null || { echo "soak: SKIP: wrk is missing (scripts/install-deps.sh installs it)"; exit 77; }
[ -x "$BIN" ] || { echo "soak: SKIP: no binary at $BIN (make build, or set MZ_BIN)"; exit 77; }
[ -f "$MODEL" ] || { echo "soak: SKIP: no model at $MODEL (make model)"; exit 77; }

OUT=${SOAK_OUT:-$(mktemp -d /tmp/mzcache-soak.XXXXXX)}
mkdir -p "$OUT"
SWAP="$OUT/swap"
LOG="$OUT/server.log"
"$BIN" serve -m "$MODEL" --port 0 --port-file "$OUT/port" --swap-dir "$SWAP" --no-pressure \
    -t "$SRV_THREADS" -c 1024 --max-queue 4 --timeout 30 -n 8 >"$LOG" 2>&1 &
PID=$!
SAMPLER=
cleanup() {
    [ -n "$SAMPLER" ] && kill "$SAMPLER" 2>/dev/null
    kill -0 "$PID" 2>/dev/null && kill -KILL "$PID" 2>/dev/null
}
trap cleanup EXIT

for _ in $(seq 1 600); do
    [ -s "$OUT/port" ] && break
    kill -0 "$PID" 2>/dev/null || { echo "soak: FAIL: the server did not start"; cat "$LOG"; exit 1; }
    sleep 0.1
done
PORT=$(cat "$OUT/port")

# http METHOD PATH [BODY]: prints the status code (body in $OUT/last-body).
http() {
    local body=${3:-} line
    exec 3<>"/dev/tcp/127.0.0.1/$PORT" || { echo 000; return; }
    printf '%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s' \
        "$1" "$2" "${#body}" "$body" >&3
    cat <&3 >"$OUT/last-response"
    exec 3<&-
    line=$(head -n1 "$OUT/last-response")
    sed '1,/^\r$/d' "$OUT/last-response" >"$OUT/last-body"
    echo "$line" | awk '{print $2}'
}
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$PID/status" 2>/dev/null; }

WARM='{"messages": [{"role": "system", "content": "You are a concise assistant."}, {"role": "user", "content": "What is the capital of France?"}], "max_tokens": 8, "temperature": 0}'
st=$(http POST /v1/chat/completions "$WARM")
[ "$st" = 200 ] || { echo "soak: FAIL: warm-up chat got $st"; cat "$OUT/last-body"; exit 1; }
BASE_KB=$(rss_kb)

T0=$(date +%s.%N)
(
    while kill -0 "$PID" 2>/dev/null; do
        awk -v now="$(date +%s.%N)" -v t0="$T0" -v rss="$(rss_kb)" 'BEGIN {printf "%.1f %s\n", now - t0, rss}'
        sleep 0.5
    done
) >"$OUT/rss.tsv" &
SAMPLER=$!

echo "soak: $DURATION s, $CONNS connections, server pid $PID on port $PORT, baseline RSS $((BASE_KB / 1024)) MiB; output in $OUT"
wrk -t"$WRK_THREADS" -c"$CONNS" -d"${DURATION}s" --timeout 60s --latency -s "$ROOT/scripts/soak.lua" \
    "http://127.0.0.1:$PORT" >"$OUT/wrk.txt" 2>&1
WRK_RC=$?
grep '^soak:' "$OUT/wrk.txt"

fail=0
kill -0 "$PID" 2>/dev/null || { echo "soak: FAIL: the server died"; tail -n 30 "$LOG"; exit 1; }
[ $WRK_RC -eq 0 ] || { echo "soak: FAIL: wrk exited $WRK_RC"; fail=1; }
read -r c r w t < <(sed -n 's/^soak: socket_errors connect=\([0-9]*\) read=\([0-9]*\) write=\([0-9]*\) timeout=\([0-9]*\)/\1 \2 \3 \4/p' "$OUT/wrk.txt")
if [ "${c:-x}" != 0 ] || [ "${r:-x}" != 0 ] || [ "${w:-x}" != 0 ] || [ "${t:-x}" != 0 ]; then
    echo "soak: FAIL: socket errors (connect=$c read=$r write=$w timeout=$t)"; fail=1
fi
bad_codes=$(sed -n 's/^soak: status //p' "$OUT/wrk.txt" | tr ' ' '\n' | awk -F= '$1 !~ /^(2..|4..)$/ {print}')
[ -z "$bad_codes" ] || { echo "soak: FAIL: unexpected statuses: $bad_codes"; fail=1; }
grep -q '^soak: status' "$OUT/wrk.txt" || { echo "soak: FAIL: no wrk summary"; fail=1; }

# wrk has closed its connections, but requests it sent may still be queued or
# running (an eviction among them): wait until the daemon is idle.
for _ in $(seq 1 600); do
    st=$(http GET /mz/status)
    [ "$st" = 200 ] && grep -q '"busy":false' "$OUT/last-body" && grep -q '"queued":0' "$OUT/last-body" && break
    sleep 0.2
done
PEAK_KB=$(awk 'BEGIN {m = 0} $2 > m {m = $2} END {print m}' "$OUT/rss.tsv")
MIN_KB=$(awk 'BEGIN {m = -1} $2 != "" && (m < 0 || $2 < m) {m = $2} END {print m}' "$OUT/rss.tsv")
st=$(http POST /mz/restore '')
[ "$st" = 200 ] || { echo "soak: FAIL: restore after the soak got $st"; fail=1; }
st=$(http POST /v1/chat/completions "$WARM")
[ "$st" = 200 ] || { echo "soak: FAIL: warm-up chat after the soak got $st"; fail=1; }
END_KB=$(rss_kb)
http GET /metrics >/dev/null
grep -E '^mzcache_(responses_total|rejected_busy_total|evictions_total|requests_total)' "$OUT/last-body" >"$OUT/metrics.txt"
TOL_KB=$((BASE_KB / 10 > 32768 ? BASE_KB / 10 : 32768))
echo "soak: rss_mib baseline=$((BASE_KB / 1024)) min=$((MIN_KB / 1024)) peak=$((PEAK_KB / 1024)) after_restore=$((END_KB / 1024)) (allowed <= $(((BASE_KB + TOL_KB) / 1024)))"
[ "$END_KB" -le $((BASE_KB + TOL_KB)) ] || { echo "soak: FAIL: RSS did not come back to the baseline"; fail=1; }
echo "soak: server $(grep -E 'responses_total|rejected_busy' "$OUT/metrics.txt" | tr '\n' ' ')"

kill "$SAMPLER" 2>/dev/null
SAMPLER=
kill -TERM "$PID"
wait "$PID"
rc=$?
[ $rc -eq 0 ] || { echo "soak: FAIL: exit status $rc after SIGTERM"; fail=1; }
left=$(find "$SWAP" -name 'mzswap-*' 2>/dev/null | wc -l)
[ "$left" -eq 0 ] || { echo "soak: FAIL: $left swap file(s) left after exit"; fail=1; }
[ $fail -eq 0 ] && echo "soak: PASS" || echo "soak: FAIL (server log: $LOG)"
exit $fail
