#!/usr/bin/env bash
# device-pressure.sh — the multitasking scenario (paper Fig. 15) without Python:
# a daemon in a memory cgroup (v2: memory.max is the kill line, memory.high
# 16 MiB below it; v1: memory.limit_in_bytes), a long conversation, then
# rounds of a hog that grows to its peak in steps, holds and releases, and a
# question after each round. Daemons in turn: mzcache (pressure monitor on),
# os-paging with zram (the zram pool counted in the same budget) and
# os-paging without swap (both --no-pressure: only the kernel's reclaim).
# Every daemon runs with oom_score_adj 1000 (the kernel kills it, not the
# foreground hog, as Android's low-memory killer would); a hog step stalled
# STALL_S seconds (thrashing) kills the daemon as lmkd would. A killed daemon
# is restarted and pays the cold start (model load + the conversation
# prefilled again) in its TTFT.
#
# Prints per round survived/killed, TTFT, its ratio to the in-memory TTFT (the median of
# three new questions with everything resident, before the first round: every timed
# question prefills the same 16 tokens) and to the round's control, and the daemon's RSS
# at the hog's peak; per eviction (mzcache) what the
# signal needed, what was freed, their ratio and the eviction's time, and
# the weights-only evictions (issue 19: "a weights-only eviction took 2 s
# under memory.high"); per restore ahead its size and time. Writes
# $OUT/pressure.md (the same) and $OUT/devpress-logs.tgz (the daemons' logs, per-round CSVs).
#
# The hog is a file on a tmpfs of its own written by dd from /dev/urandom inside the
# cgroup (shmem pages are charged to the writer's cgroup and, without swap,
# cannot be reclaimed: anonymous memory in all but name; incompressible for
# zram); released by deleting the file. HTTP through bash's /dev/tcp.
#
# On the 16-vCPU machine (cgroup v2; see ../shared/DEVICE.md), from the
# project root, after `make build` and `../shared/device/bundle.sh build` here:
#   device run, carry [".bundle"]:   bash bench/device-pressure.sh
# (generates a SmolLM2-shaped Q4_1 model from .bundle/vocab.gguf; about
# 3-5 min with the defaults: each killed round costs a stall of up to STALL_S plus a cold
# start). mzcache alone, the issue's ten rounds (~3 min):
#   device run, carry [".bundle"]:   DAEMONS=mzcache ROUNDS=10 bash bench/device-pressure.sh
# Here (cgroup v1, 2 vCPUs, the real model):
#   MZ_LOCAL=1 MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf bash bench/device-pressure.sh
# Knobs (environment): ROUNDS (4), CTX_TOKENS (8192), DAEMONS ("mzcache
# os-paging-zram os-paging"), THREADS (4), HEADROOM (64M: mzcache's
# --pressure-headroom), MARGIN_MIB (96, v2 112: limit = mzcache's usage with
# everything resident + this), NEED_PCT (65: the hog's peak = MARGIN_MIB + this % of
# weights + KV), HOG_STEP_MIB (24), HOG_STEP_S (0.5), HOLD_S (2), STALL_S (10),
# MODEL (a GGUF to use instead of generating one), OUT (/tmp/devpress-out).
# Needs root. Leaves nothing behind: cgroups, hog files, zram device, daemons
# are removed on exit (also on SIGINT/SIGTERM).
set -uo pipefail
# Results: $OUT (the device tool brings back a few files only): pressure.md and
# devpress-logs.tgz (daemon logs, per-round CSVs); the files are written in $W/out first.
RESULTS=${OUT:-/tmp/devpress-out}; mkdir -p "$RESULTS"
ROUNDS=${ROUNDS:-4}; CTX_TOKENS=${CTX_TOKENS:-8192}; THREADS=${THREADS:-4}
DAEMONS=${DAEMONS:-"mzcache os-paging-zram os-paging"}
HEADROOM=${HEADROOM:-64M}; NEED_PCT=${NEED_PCT:-65}
HOG_STEP_MIB=${HOG_STEP_MIB:-24}; HOG_STEP_S=${HOG_STEP_S:-0.5}; HOLD_S=${HOLD_S:-2}; STALL_S=${STALL_S:-10}
HIGH_GAP_MIB=16
W=${WORK:-/tmp/devpress-work}; mkdir -p "$W"
OUTD=$W/out-$$; mkdir -p "$OUTD"
. "$(dirname "$0")/device-lib.sh" # BIN, LIBP, VOCAB, BUNDLE; mz
mzb() { LD_LIBRARY_PATH=$LIBP "$BIN/mzcache" "$@"; }
say() { echo "device-pressure: $*" >&2; }
now() { date +%s.%N; }
ms_since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.0f", (b - a) * 1000 }'; }
MiB=1048576
[ "$(id -u)" -eq 0 ] || { say "needs root (cgroups, zram)"; exit 77; }

# ---- the cgroup: v2 at the root of the hierarchy, else v1 under our own ----
CGV=0; CGROOT=""
if [ "$(stat -fc %T /sys/fs/cgroup 2>/dev/null)" = cgroup2fs ] && grep -qw memory /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null; then
    CGV=2; CGROOT=/sys/fs/cgroup
else
    rel=$(awk -F: '{ n = split($2, c, ","); for (i = 1; i <= n; i++) if (c[i] == "memory") print $3 }' /proc/self/cgroup)
    mnt=$(awk '$9 == "cgroup" && $NF ~ /(^|,)memory(,|$)/ { print $5; exit }' /proc/self/mountinfo)
    [ -n "$rel" ] && [ -n "$mnt" ] && [ -d "$mnt${rel%/}" ] && { CGV=1; CGROOT="$mnt${rel%/}"; }
fi
[ "$CGV" != 0 ] || { say "no cgroup v2 memory controller at the root and no v1 memory cgroup"; exit 77; }
# The margin above the full footprint: the headroom (64 MiB, ~3 hog steps) + 32 MiB, so that
# everything evicted fits back below the target once the hog is gone; on v2 the target is
# measured from memory.high, HIGH_GAP_MIB below the kill line.
MARGIN_MIB=${MARGIN_MIB:-$(( 96 + (CGV == 2 ? HIGH_GAP_MIB : 0) ))}
cg_usage() { if [ $CGV = 2 ]; then cat "$1/memory.current"; else cat "$1/memory.usage_in_bytes"; fi; }
cg_limit() { # dir bytes: the kill line (and v2's memory.high below it)
    if [ $CGV = 2 ]; then echo "$2" > "$1/memory.max"; echo $(( $2 - HIGH_GAP_MIB * MiB )) > "$1/memory.high"
    else echo "$2" > "$1/memory.limit_in_bytes"; fi
}
cg_ooms() {
    if [ $CGV = 2 ]; then awk '$1 == "oom_kill" { print $2 }' "$1/memory.events"
    else awk '$1 == "oom_kill" { print $2 }' "$1/memory.oom_control"; fi
}

# ---- the hog's tmpfs ----
# Our own tmpfs (a container's /dev/shm is often 64 MiB); /dev/shm only if mounting is refused
# and it has room for the hog's peak (at most 2 GiB here).
HOGDIR=$W/hogfs-$$; mkdir -p "$HOGDIR"
if mount -t tmpfs -o size=8G tmpfs "$HOGDIR" 2>/dev/null; then MOUNTED=1
else
    rmdir "$HOGDIR"
    free_kib=$(df -k --output=avail /dev/shm 2>/dev/null | tail -1 | tr -d ' ')
    [ "$(stat -fc %T /dev/shm 2>/dev/null)" = tmpfs ] && [ "${free_kib:-0}" -ge $(( 2 * 1024 * 1024 )) ] \
        || { say "no tmpfs for the hog (mount refused, /dev/shm has ${free_kib:-0} KiB free)"; exit 77; }
    HOGDIR=/dev/shm/devpress-$$; mkdir -p "$HOGDIR"
fi

CGS=(); PIDS=(); ZRAM=""; BUDGET_PID=""
cleanup() {
    [ -n "$BUDGET_PID" ] && kill "$BUDGET_PID" 2>/dev/null
    for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
    rm -rf "$HOGDIR"/hog* 2>/dev/null
    [ "${MOUNTED:-0}" = 1 ] && umount "$HOGDIR" 2>/dev/null
    rmdir "$HOGDIR" 2>/dev/null
    [ -n "$ZRAM" ] && sh scripts/zram-swap.sh down "$ZRAM" >/dev/null 2>&1
    for cg in "${CGS[@]}"; do
        [ -d "$cg" ] || continue
        for p in $(cat "$cg/cgroup.procs" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
        for _ in $(seq 50); do rmdir "$cg" 2>/dev/null && break; sleep 0.1; done
    done
    [ -f "$OUTD/pressure.md" ] && cp "$OUTD/pressure.md" "$RESULTS/"
    tar czf "$RESULTS/devpress-logs.tgz" -C "$OUTD" . 2>/dev/null && rm -rf "$OUTD"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- the model ----
if [ -n "${MODEL:-}" ]; then M=$MODEL
else
    M=$W/smollm2-135m-Q4_1.gguf
    [ -f "$M" ] || mzb gen-model --preset smollm2-135m --type Q4_1 --vocab-from "$VOCAB" -o "$M" >/dev/null 2>"$OUTD/gen-model.log" \
        || { say "gen-model failed (see $OUTD/gen-model.log)"; exit 1; }
fi
drop_model_cache() { dd if="$M" iflag=nocache count=0 status=none 2>/dev/null || true; }

# ---- HTTP over /dev/tcp: POST PORT PATH JSON → the response body ----
http() {
    local port=$1 method=$2 path=$3 body=${4:-} resp
    exec 3<>"/dev/tcp/127.0.0.1/$port" || return 1
    printf '%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s' \
        "$method" "$path" "${#body}" "$body" >&3
    resp=$(cat <&3); exec 3<&-
    printf '%s' "${resp#*$'\r\n\r\n'}"
}
jnum() { grep -o "\"$1\":[-0-9.e+]*" | head -1 | cut -d: -f2; } # first "KEY":number of stdin

# The conversation: one long passage of plain words (ASCII, no quotes) sized
# to CTX_TOKENS with the model's tokenizer, then a question per round.
WORDS=(memory pressure kernel page cache swap weights layer token context model answer process budget
       eviction restore storage device thread queue signal limit cgroup daemon session chunk block codec
       system service user phone application foreground background latency throughput bandwidth disk
       compress decompress prefill decode attention head vector matrix tensor number record table round)
passage() { # N words
    local n=$1 i out=""
    for ((i = 0; i < n; i++)); do out+="${WORDS[$(( (i * 7 + i / 13) % ${#WORDS[@]} ))]} "; [ $((i % 17)) = 16 ] && out+=". "; done
    printf '%s' "$out"
}
n_words=$(( CTX_TOKENS * 10 / 13 ))
for _ in 1 2 3 4; do
    TEXT=$(passage "$n_words")
    nt=$(printf '%s' "$TEXT" | mzb tokenize -m "$M" --stdin 2>/dev/null | wc -l)
    [ "${nt:-0}" -gt 0 ] || break
    [ "$nt" -ge "$CTX_TOKENS" ] && break
    n_words=$(( n_words * CTX_TOKENS / nt + 50 ))
done
N_CTX=$(( CTX_TOKENS + 2048 ))
SYS='{"role":"system","content":"You are a helpful assistant. Answer briefly."}'
USER="{\"role\":\"user\",\"content\":\"Read this: $TEXT\"}"
ASK() { printf '{"messages":[%s,%s,{"role":"assistant","content":"I have read it."},{"role":"user","content":"Question %d: what is the passage about?"}],"temperature":0,"max_tokens":8,"user":"devpress"}' "$SYS" "$USER" "$1"; }
# Every timed question is new and costs the same prefill: each question cuts the previous
# one's turn (one named session), so a question prefills its own tokens from the first one
# that differs. The numbers have three digits (one token each) and each differs from the
# one asked before it in the first digit: round rd asks 100 + rd, its control 500 + rd, the
# in-memory reference 700, 800, 900 (16 tokens prefilled over the conversation each, with
# the SmolLM2 tokenizer). Asking the prefilled question again is no reference: it prefills
# one token (a decode step; 20 ms where a new question took 66-74 ms on the 16-vCPU device).
[ "$ROUNDS" -le 99 ] || { say "ROUNDS must be at most 99 (three-digit question numbers)"; exit 2; }

start_daemon() { # tag mode cg → sets DPID, PORT, START_MS
    local tag=$1 mode=$2 cg=$3 pf=$W/$1.port t0 extra=()
    rm -f "$pf"; drop_model_cache
    if [ "$mode" = mzcache ]; then
        extra=(--pressure-headroom "$HEADROOM")
        [ $CGV = 1 ] && extra+=(--usage-threshold "60%,70%,80%,90%" --pressure-sources "cg1-usage,cg1-level,psi")
    else extra=(--no-pressure); fi
    t0=$(now)
    ( echo "$BASHPID" > "$cg/cgroup.procs"; echo 1000 > /proc/self/oom_score_adj
      exec env LD_LIBRARY_PATH="$LIBP" "$BIN/mzcache" serve -m "$M" --port 0 --port-file "$pf" -t "$THREADS" -c "$N_CTX" \
          --codec q8 --swap-dir "$W/swap-$tag" --mode "$mode" --alias "$tag" --no-store "${extra[@]}"
    ) >> "$OUTD/$tag-daemon.log" 2>&1 &
    DPID=$!; PIDS+=("$DPID")
    for _ in $(seq 3000); do [ -s "$pf" ] && break; kill -0 "$DPID" 2>/dev/null || return 1; sleep 0.02; done
    PORT=$(cat "$pf")
    for _ in $(seq 500); do http "$PORT" GET /health >/dev/null 2>&1 && break; sleep 0.02; done
    START_MS=$(ms_since "$t0")
}

hog_grow() { # cg MiB → 0 ok, 1 stalled (timeout), 2 failed
    timeout "$STALL_S" sh -c 'echo $$ > "$1/cgroup.procs" && exec dd if=/dev/urandom of="$2" bs=1M count="$3" oflag=append conv=notrunc status=none' \
        _ "$1" "$HOGDIR/hog" "$2"
    case $? in 0) return 0 ;; 124) return 1 ;; *) return 2 ;; esac
}

{
echo "machine: $(nproc) vCPUs, cgroup v$CGV, kernel $(uname -r), $(date -u +%FT%TZ); model $(basename "$M"), ~$CTX_TOKENS-token conversation, $THREADS threads, q8"
echo "plan: limit = mzcache's usage with everything resident + $MARGIN_MIB MiB$([ $CGV = 2 ] && echo " (memory.max; memory.high $HIGH_GAP_MIB MiB below)"); hog peak = $MARGIN_MIB MiB + $NEED_PCT % of weights + KV, $HOG_STEP_MIB MiB every $HOG_STEP_S s, held $HOLD_S s; stall $STALL_S s = killed (lmkd)"
} | tee "$OUTD/pressure.md"
LIMIT=0; HOG_MAX=0; SUMMARY=(); MEMREF=()
for tag in $DAEMONS; do
    mode=mzcache; [ "$tag" = mzcache ] || mode=os-paging
    if [ "$tag" = os-paging-zram ]; then
        ZRAM=$(sh scripts/zram-swap.sh up 1G 2>>"$OUTD/zram.log") || { say "no zram here: $tag skipped"; ZRAM=""; continue; }
    fi
    if [ "$tag" != mzcache ] && [ "$LIMIT" = 0 ]; then say "$tag needs the plan of an mzcache run first"; continue; fi
    CG=$CGROOT/devpress-$$-$tag; mkdir "$CG" || { say "cannot create $CG"; exit 1; }; CGS+=("$CG")
    if [ $CGV = 2 ] && [ -f "$CG/memory.swap.max" ]; then # swap only for the zram daemon
        if [ -n "$ZRAM" ]; then echo max; else echo 0; fi > "$CG/memory.swap.max"
    fi
    if [ $CGV = 1 ] && [ -z "$ZRAM" ]; then echo 0 > "$CG/memory.swappiness" 2>/dev/null; fi # another zram swap here
    : > "$OUTD/$tag-daemon.log"
    start_daemon "$tag" "$mode" "$CG" || { say "$tag: daemon did not start (see $OUTD/$tag-daemon.log)"; continue; }
    t0=$(now); r=$(http "$PORT" POST /v1/chat/completions "$(ASK 0)")
    prefill_ms=$(ms_since "$t0"); ptoks=$(jnum prompt_tokens <<<"$r")
    r=$(http "$PORT" POST /v1/chat/completions "$(ASK 0)")
    ttft_rep=$(jnum ttft_ms <<<"$r" | awk '{ printf "%.0f", $1 }'); n_rep=$(jnum prompt_n <<<"$r")
    # The in-memory reference: the median of three new questions, everything resident.
    mem=""; n_mem=""
    for qn in 700 800 900; do
        r=$(http "$PORT" POST /v1/chat/completions "$(ASK $qn)")
        mem+="$(jnum ttft_ms <<<"$r" | awk '{ printf "%.0f", $1 }') "; n_mem+="$(jnum prompt_n <<<"$r") "
    done
    ttft_mem=$(printf '%s\n' $mem | sort -g | awk '{ v[NR] = $1 } END { printf "%.0f", NR ? v[int((NR + 1) / 2)] : 0 }')
    say "$tag: started in $START_MS ms; conversation of $ptoks tokens prefilled in $prefill_ms ms; in-memory TTFT of a new question $ttft_mem ms (median of ${mem% } ms; ${n_mem% } tokens prefilled); the prefilled question again: $ttft_rep ms ($n_rep token prefilled)"
    MEMREF+=("| $tag | $ptoks | ${mem% } | ${n_mem% } | $ttft_rep ($n_rep) |")
    if [ "$tag" = mzcache ]; then
        st=$(http "$PORT" GET /mz/status)
        wt=$(grep -o '"weights":{"total_bytes":[0-9.e+]*' <<<"$st" | grep -o '[0-9.e+]*$')
        kt=$(grep -o '"kv":{"total_bytes":[0-9.e+]*' <<<"$st" | grep -o '[0-9.e+]*$')
        drop_model_cache; sleep 0.5
        use=$(cg_usage "$CG")
        LIMIT=$(( use + MARGIN_MIB * MiB ))
        HOG_MAX=$(awk -v m="$MARGIN_MIB" -v p="$NEED_PCT" -v w="${wt:-0}" -v k="${kt:-0}" 'BEGIN { printf "%d", m + p / 100 * (w + k) / 1048576 }')
        echo "plan (from mzcache): usage $(( use / MiB )) MiB with weights $(awk -v w="${wt:-0}" 'BEGIN{printf "%.1f", w/1048576}') MiB + KV $(awk -v k="${kt:-0}" 'BEGIN{printf "%.1f", k/1048576}') MiB resident; limit $(( LIMIT / MiB )) MiB; hog peak $HOG_MAX MiB" | tee -a "$OUTD/pressure.md"
    fi
    cg_limit "$CG" "$LIMIT"
    if [ -n "$ZRAM" ]; then # the pool is RAM of the same budget: the kill line follows budget − pool
        ( z=$(basename "$ZRAM"); cur=$LIMIT
          while :; do read -r _ _ used _ < "/sys/block/$z/mm_stat"; u=$(cg_usage "$CG")
              echo $(( LIMIT - u > 4 * MiB ? LIMIT - u : 4 * MiB )) > "/sys/block/$z/mem_limit" 2>/dev/null
              want=$(( LIMIT - used > 16 * MiB ? LIMIT - used : 16 * MiB ))
              [ $(( want - cur )) -ge $MiB ] || [ $(( cur - want )) -ge $MiB ] && cg_limit "$CG" "$want" 2>/dev/null && cur=$want
              sleep 0.1; done ) &
        BUDGET_PID=$!
    fi
    sleep 2.5 # the monitor re-arms its thresholds for the new limit
    ooms0=$(cg_ooms "$CG"); surv=0; ttfts=""; xs=""; xms=""; rsss=""; n_ok=0; n_le3=0
    echo "round,survived,lmk_kill,hog_mib,peak_usage_mib,daemon_rss_at_peak_mib,ttft_ms,prefilled_tokens,restart_ms,evicted_mib_before,queue_ms,control_ttft_ms,control_prefilled_tokens,ttft_over_control,ttft_over_in_memory" > "$OUTD/$tag-rounds.csv"
    for rd in $(seq "$ROUNDS"); do
        grown=0; lmk=0
        while [ "$grown" -lt "$HOG_MAX" ]; do
            step=$(( HOG_MAX - grown < HOG_STEP_MIB ? HOG_MAX - grown : HOG_STEP_MIB ))
            hog_grow "$CG" "$step"; rc=$?
            if [ $rc = 1 ] && kill -0 "$DPID" 2>/dev/null; then
                say "$tag round $rd: a hog step stalled $STALL_S s (thrashing): killing the daemon, as lmkd would"
                kill -9 "$DPID"; lmk=1
            fi
            [ $rc = 0 ] || break
            grown=$(( grown + step )); sleep "$HOG_STEP_S"
        done
        sleep "$HOLD_S"
        peak=$(( $(cg_usage "$CG") / MiB ))
        # the daemon's own RSS at the hog's peak (with everything it gave back)
        rss=$(awk '$1 == "VmRSS:" { printf "%.0f", $2 / 1024 }' "/proc/$DPID/status" 2>/dev/null)
        alive=1; kill -0 "$DPID" 2>/dev/null || alive=0
        [ $alive = 0 ] && wait "$DPID" 2>/dev/null
        rm -f "$HOGDIR/hog"; sleep 1
        restart=0
        if [ $alive = 0 ]; then
            start_daemon "$tag" "$mode" "$CG" || { say "$tag: restart failed"; break; }
            restart=$START_MS
        fi
        r=$(http "$PORT" POST /v1/chat/completions "$(ASK $(( 100 + rd )))")
        t=$(jnum ttft_ms <<<"$r"); ev=$(jnum evicted_bytes_before <<<"$r"); q=$(jnum queue_ms <<<"$r" | awk '{ printf "%.0f", $1 }')
        np=$(jnum prompt_n <<<"$r")
        [ -n "$t" ] || say "$tag round $rd: no answer: ${r:0:200}"
        tt=$(awk -v a="${t:-0}" -v b="$restart" 'BEGIN { printf "%.0f", a + b }')
        evm=$(awk -v e="${ev:-0}" 'BEGIN { printf "%.1f", e / 1048576 }')
        # Control: one more new question right away, nothing evicted since (the same machine
        # at the same moment); the ratio to it is what the round's pressure cost.
        rc_=$(http "$PORT" POST /v1/chat/completions "$(ASK $(( 500 + rd )))")
        tc=$(jnum ttft_ms <<<"$rc_" | awk '{ printf "%.0f", $1 }'); npc=$(jnum prompt_n <<<"$rc_")
        x=$(awk -v a="$tt" -v b="${tc:-0}" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')
        xm=$(awk -v a="$tt" -v b="${ttft_mem:-0}" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')
        surv=$(( surv + alive ))
        ttfts+="$tt$([ $alive = 0 ] && echo K) "; xs+="$x "; xms+="$xm "
        [ $alive = 1 ] && { n_ok=$(( n_ok + 1 )); awk -v v="$xm" 'BEGIN { exit !(v != "-" && v <= 3) }' && n_le3=$(( n_le3 + 1 )); }
        rsss+="${rss:--} "
        echo "$rd,$alive,$lmk,$grown,$peak,${rss:-},$tt,${np:-},$restart,$evm,${q:-0},${tc:-},${npc:-},$x,$xm" >> "$OUTD/$tag-rounds.csv"
        say "$tag round $rd: $([ $alive = 1 ] && echo survived || echo KILLED); hog $grown MiB, peak usage $peak MiB (daemon RSS ${rss:-?} MiB); TTFT $tt ms (${np:-?} tokens prefilled; x$xm the in-memory TTFT; $evm MiB evicted before; queue ${q:-0} ms); control ${tc:-?} ms (${npc:-?} tokens; x$x)"
        sleep 1
    done
    ooms=$(( $(cg_ooms "$CG") - ooms0 ))
    [ -n "$BUDGET_PID" ] && { kill "$BUDGET_PID" 2>/dev/null; wait "$BUDGET_PID" 2>/dev/null; BUDGET_PID=""; }
    kill "$DPID" 2>/dev/null; wait "$DPID" 2>/dev/null
    [ -n "$ZRAM" ] && { zs=$(cat "/sys/block/$(basename "$ZRAM")/mm_stat"); sh scripts/zram-swap.sh down "$ZRAM" >/dev/null 2>&1; ZRAM=""; }
    SUMMARY+=("| $tag | $surv / $ROUNDS | $ttft_mem | ${ttfts% } | ${xms% } | $n_le3 / $n_ok | ${xs% } | $ooms | ${rsss% } |")
done

{
echo
echo "| daemon | survived | TTFT in memory ms (new question) | TTFT after each round ms (K = killed: cold start) | ÷ TTFT in memory | surviving rounds <= 3x | ÷ control TTFT of the round | kernel OOM kills | daemon RSS at each hog peak MiB |"
echo "|---|---|---:|---|---|---|---|---:|---|"
printf '%s\n' "${SUMMARY[@]}"
echo
echo "In-memory reference, everything resident, before the first round (each timed question is new and prefills the same number of tokens; a round's tokens are in its CSV):"
echo
echo "| daemon | conversation tokens | new questions 700 / 800 / 900: TTFT ms | tokens prefilled | the prefilled question asked again: TTFT ms (tokens) |"
echo "|---|---:|---|---|---|"
printf '%s\n' "${MEMREF[@]}"
if [ -s "$OUTD/mzcache-daemon.log" ]; then
    echo
    echo "mzcache, per pressure eviction (need = usage - (limit - headroom); ratio = freed / need):"
    echo
    echo "| # | source | need MiB | freed MiB | ratio | ms | KV compressed / stored / moved | weight blocks |"
    echo "|---:|---|---:|---:|---:|---:|---|---:|"
    sed -n 's/.*pressure \([a-z0-9-]*\) (.*need \([0-9.]*\) MiB \[[a-z]*\] -> evict [^>]*-> freed \([0-9.]*\) MiB (\([0-9.]*\)x the need) in \([0-9.]*\) ms (KV \([0-9]*\) compressed, \([0-9]*\) stored, \([0-9]*\) moved; \([0-9]*\) weight blocks dropped).*/\1 \2 \3 \4 \5 \6 \7 \8 \9/p' \
        "$OUTD/mzcache-daemon.log" | awk '{ printf "| %d | %s | %s | %s | %s | %s | %s / %s / %s | %s |\n", NR, $1, $2, $3, $4, $5, $6, $7, $8, $9 }'
    sed -n 's/.*need \([0-9.]*\) MiB \[[a-z]*\] -> evict [^>]*-> freed \([0-9.]*\) MiB (\([0-9.]*\)x the need) in \([0-9.]*\) ms (KV \([0-9]*\) compressed, \([0-9]*\) stored, \([0-9]*\) moved; \([0-9]*\) weight blocks dropped).*/\1 \2 \3 \4 \5 \6 \7 \8/p' \
        "$OUTD/mzcache-daemon.log" | awk '
        { n++; fr += $2; nd += $1; if ($1 >= 2) { big++; if ($3 <= 1.5) ok++; if ($3 > mx) mx = $3 }
          if ($5 + $6 + $7 == 0 && $8 > 0) { wo++; if ($4 > wmx) wmx = $4 } if ($4 > emx) emx = $4 }
        END { printf "\nevictions %d: needs >= 2 MiB %d, of which within 1.5x %d (max ratio %.2f); freed total / need total %.2f; slowest eviction %.1f ms; weights-only evictions %d, slowest %.1f ms\n",
              n, big, ok, mx, (nd > 0 ? fr / nd : 0), emx, wo, wmx }'
    nra=$(grep -c 'relief: .* restored' "$OUTD/mzcache-daemon.log")
    echo
    echo "restores ahead (relief): $nra; sizes and times:" \
        "$(sed -n 's/.*-> restored \([0-9.]*\) MiB ahead in \([0-9.]*\) ms.*/\1 MiB in \2 ms;/p' "$OUTD/mzcache-daemon.log" | tr '\n' ' ')"
fi
} | tee -a "$OUTD/pressure.md"
