#!/usr/bin/env bash
# llama.cpp's side of docs/CODECS.md's "one method" table: its own
# llama-perplexity, built from the vendored llama.cpp of llama-cpp-python
# (the version and ISA flags of scripts/install-peer.sh, AMX off), run on one
# model and text with an F16 KV cache (the base: its logits go to a file) and
# then with each quantized KV cache type (-ctk/-ctv, flash attention on, as
# llama.cpp needs for a quantized V cache), each with --kl-divergence
# against the base. Prints a Markdown table: perplexity, its ratio to the
# base, mean KLD, same top-1 token.
#
# usage: scripts/llama-perplexity.sh [-m MODEL] [-f TEXT] [-c 512] [-t 2]
#            [--chunks N] [--kv "q8_0 q4_0"] [--no-rot]
#   -c        window (context) size; llama-perplexity scores the second half
#             of each window, as eval_codec --method full does
#   --chunks  windows to run (default 6; 0 = the whole text)
#   --kv      KV cache types to compare with F16 (same type for K and V;
#             "q8_0/q4_0" means K q8_0, V q4_0)
#   --no-rot  LLAMA_ATTN_ROT_DISABLE=1: without llama.cpp's Hadamard rotation
#             of K and V (on by default in this version for quantized caches)
# Where the binary comes from, in order: $LLAMA_PERPLEXITY; llama-perplexity
# beside install-peer.sh's llama-bench; a build of the target in
# llama-bench's build tree (when its source is still there); else the
# source from .bundle/llama.cpp.tgz (../shared/device/bundle.sh --llama-cpp)
# or pip's sdist, built in $XDG_CACHE_HOME/mzcache/llama-perplexity-LEVEL-VERSION
# (a full ggml build: many CPU minutes on two cores).
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=0.3.36
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
TEXT=/usr/share/common-licenses/GPL-3
CTX=512 THREADS=2 CHUNKS=6 KV="q8_0 q4_0" NOROT=0
while [ $# -gt 0 ]; do
    case "$1" in
        -m) MODEL=$2; shift 2 ;;
        -f) TEXT=$2; shift 2 ;;
        -c) CTX=$2; shift 2 ;;
        -t) THREADS=$2; shift 2 ;;
        --chunks) CHUNKS=$2; shift 2 ;;
        --kv) KV=$2; shift 2 ;;
        --no-rot) NOROT=1; shift ;;
        *) echo "llama-perplexity.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
for v in "$CTX" "$THREADS" "$CHUNKS"; do
    case "$v" in ''|*[!0-9]*) echo "llama-perplexity.sh: '$v' is not a number" >&2; exit 2 ;; esac
done
[ -f "$MODEL" ] || { echo "llama-perplexity.sh: no model $MODEL" >&2; exit 1; }
[ -f "$TEXT" ] || { echo "llama-perplexity.sh: no text $TEXT" >&2; exit 1; }

# ---- the binary ----------------------------------------------------------------
find_or_build() {
    if [ -n "${LLAMA_PERPLEXITY:-}" ]; then echo "$LLAMA_PERPLEXITY"; return; fi
    local lb lb_dir src flags level cache own srcdir tmp
    lb=$(MZ_PEER_PRINT_LLAMA_BENCH=1 scripts/install-peer.sh)
    lb_dir=$(dirname "$(dirname "$lb")")
    if [ -x "$lb_dir/bin/llama-perplexity" ]; then echo "$lb_dir/bin/llama-perplexity"; return; fi
    if [ -f "$lb_dir/CMakeCache.txt" ]; then
        src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$lb_dir/CMakeCache.txt")
        if [ -f "$src/tools/perplexity/perplexity.cpp" ]; then
            echo "llama-perplexity.sh: building llama-perplexity in $lb_dir" >&2
            nice cmake --build "$lb_dir" --target llama-perplexity -j"$(nproc)" >&2
            echo "$lb_dir/bin/llama-perplexity"
            return
        fi
    fi
    flags=$(MZ_PEER_PRINT_FLAGS=1 scripts/install-peer.sh)
    case "$flags" in *GGML_AVX512=ON*) level=avx512 ;; *GGML_AVX2=ON*) level=avx2 ;; *) level=base ;; esac
    cache="${XDG_CACHE_HOME:-$HOME/.cache}/mzcache"
    own="$cache/llama-perplexity-$level-$VERSION"
    srcdir="$cache/llama.cpp-src-$VERSION"
    if [ -x "$own/bin/llama-perplexity" ]; then echo "$own/bin/llama-perplexity"; return; fi
    if [ ! -f "$srcdir/llama.cpp/CMakeLists.txt" ]; then
        mkdir -p "$srcdir"
        if [ -f .bundle/llama.cpp.tgz ]; then
            tar xzf .bundle/llama.cpp.tgz -C "$srcdir"
        else
            tmp=$(mktemp -d)
            (cd "$tmp" && python3 -m pip download --quiet --no-deps --no-binary :all: \
                 "llama-cpp-python==$VERSION" -d . && tar xzf llama_cpp_python-*.tar.gz)
            mv "$tmp"/llama_cpp_python-*/vendor/llama.cpp "$srcdir/"
            rm -rf "$tmp"
        fi
    fi
    echo "llama-perplexity.sh: building llama-perplexity $VERSION ($flags), once" >&2
    # shellcheck disable=SC2086 # flags is a list of -D options
    cmake -S "$srcdir/llama.cpp" -B "$own" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
        -DLLAMA_BUILD_TOOLS=ON $flags >&2
    nice cmake --build "$own" --target llama-perplexity -j"$(nproc)" >&2
    echo "$own/bin/llama-perplexity"
}
LP=$(find_or_build)
[ -x "$LP" ] || { echo "llama-perplexity.sh: no llama-perplexity at $LP" >&2; exit 1; }

# ---- the runs -----------------------------------------------------------------------
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(-m "$MODEL" -f "$TEXT" -c "$CTX" -b "$CTX" -t "$THREADS" -fa on)
[ "$CHUNKS" -gt 0 ] && common+=(--chunks "$CHUNKS")
[ "$NOROT" = 1 ] && export LLAMA_ATTN_ROT_DISABLE=1
echo "# llama-perplexity $VERSION ($LP): model $MODEL, text $TEXT, -c $CTX, chunks ${CHUNKS/#0/all}, -t $THREADS, rotation $([ "$NOROT" = 1 ] && echo off || echo default)"
"$LP" "${common[@]}" -ctk f16 -ctv f16 --kl-divergence-base "$work/base.kld" >"$work/f16.log" 2>&1 \
    || { tail -20 "$work/f16.log" >&2; exit 1; }
# "Final estimate: PPL = 16.1234 +/- 0.5" (the base run's perplexity)
ppl0=$(sed -n 's/.*Final estimate: PPL = \([0-9.]*\).*/\1/p' "$work/f16.log" | tail -1)
echo
echo "| KV cache (K/V) | perplexity | ratio to F16 | mean KLD (nats) | same top-1 |"
echo "|---|---:|---:|---:|---:|"
echo "| f16 | $ppl0 | 1.0000 | 0 | 100 % |"
for kv in $KV; do
    k=${kv%/*} v=${kv#*/}
    log="$work/${k}_$v.log"
    "$LP" "${common[@]}" -ctk "$k" -ctv "$v" --kl-divergence-base "$work/base.kld" --kl-divergence \
        >"$log" 2>&1 || { tail -20 "$log" >&2; exit 1; }
    ppl=$(sed -n 's/^Mean PPL(Q) *: *\([0-9.]*\).*/\1/p' "$log")
    ratio=$(sed -n 's/^Mean PPL(Q)\/PPL(base) *: *\([0-9.]*\).*/\1/p' "$log")
    kld=$(sed -n 's/^Mean    KLD: *\([0-9.]*\).*/\1/p' "$log")
    top=$(sed -n 's/^Same top p: *\([0-9.]*\).*/\1/p' "$log")
    echo "| $k/$v | $ppl | $ratio | $kld | $top % |"
    echo "llama kv=$k/$v ctx=$CTX ppl=$ppl ppl_ratio=$ratio kld=$kld same_top1_pct=$top" >&2
done
