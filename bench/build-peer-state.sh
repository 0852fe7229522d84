#!/usr/bin/env bash
# Builds bench/peer/peer_state_reload.c (llama.cpp's answer to a kill: model load +
# llama_state_load_file + the question) against llama.cpp's libllama, CPU
# only, static, into OUT_DIR/peer_state_reload. llama.cpp is not a dependency
# of the project: this is outside the CMake build and only the benchmarks use
# it (bench_store ttft with MZ_PEER_STATE_BIN=OUT_DIR/peer_state_reload).
#
# The llama.cpp source is the one vendored by llama-cpp-python 0.3.36 (the
# version every peer figure of docs/BENCHMARKS.md uses), taken from, in order:
#   SRC given: a llama.cpp source folder, a .tgz of one (../shared/device/
#   bundle.sh --llama-cpp makes .bundle/llama.cpp.tgz) or llama-cpp-python's
#   sdist (.tar.gz, its vendor/llama.cpp);
#   else .bundle/llama.cpp.tgz if present;
#   else `pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36`.
# ISA flags are the ones scripts/install-peer.sh picks from /proc/cpuinfo
# (AVX2/AVX-512 by the listed flags, AMX always off: it dies with SIGILL on
# these VMs), so the peer runs the same instruction families as before.
# Needs gcc/g++, cmake, ninja (make if no ninja); no network with SRC or the
# bundle. About 45 s on 16 vCPUs, several minutes on 2.
#   usage: bench/build-peer-state.sh OUT_DIR [SRC]      (from the project root)
#   env:   JOBS (nproc)
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 OUT_DIR [SRC]" >&2; exit 2; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$1"
OUT=$(cd "$1" && pwd)
SRC=${2:-}
VERSION=0.3.36
JOBS=${JOBS:-$(nproc)}
work="$OUT/src"
if [ -z "$SRC" ] && [ -f "$ROOT/.bundle/llama.cpp.tgz" ]; then SRC="$ROOT/.bundle/llama.cpp.tgz"; fi
if [ -n "$SRC" ] && [ -d "$SRC" ]; then
    LSRC=$(cd "$SRC" && pwd)
elif [ -n "$SRC" ] || [ ! -f "$work/llama.cpp/CMakeLists.txt" ]; then
    rm -rf "$work"; mkdir -p "$work"
    if [ -z "$SRC" ]; then
        (cd "$work" && python3 -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d .)
        SRC=$(ls "$work"/llama_cpp_python-*.tar.gz)
    fi
    tar xzf "$SRC" -C "$work"
    if [ ! -d "$work/llama.cpp" ]; then   # the sdist: its vendored copy
        mv "$work"/llama_cpp_python-*/vendor/llama.cpp "$work/llama.cpp"
        rm -rf "$work"/llama_cpp_python-*
    fi
    LSRC="$work/llama.cpp"
else
    LSRC="$work/llama.cpp"
fi
[ -f "$LSRC/include/llama.h" ] || { echo "build-peer-state: no llama.cpp source in $LSRC" >&2; exit 1; }
FLAGS=$(MZ_PEER_PRINT_FLAGS=1 bash "$ROOT/scripts/install-peer.sh")
# A wrapper project: libllama as a subproject (static: the program runs
# without LD_LIBRARY_PATH), our program linked against its target.
proj="$OUT/proj"; mkdir -p "$proj"
cat > "$proj/CMakeLists.txt" <<EOF
cmake_minimum_required(VERSION 3.14)
project(peer_state_reload C CXX)
set(BUILD_SHARED_LIBS OFF CACHE BOOL "" FORCE)
add_subdirectory("$LSRC" llama.cpp EXCLUDE_FROM_ALL)
add_executable(peer_state_reload "$ROOT/bench/peer/peer_state_reload.c")
set_property(TARGET peer_state_reload PROPERTY C_STANDARD 11)
target_compile_options(peer_state_reload PRIVATE -Wall -Wextra -Werror)
target_link_libraries(peer_state_reload PRIVATE llama)
EOF
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
# shellcheck disable=SC2086
cmake -S "$proj" -B "$OUT/build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DLLAMA_BUILD_COMMON=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF \
    -DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF -DGGML_BACKEND_DL=OFF $FLAGS >"$OUT/cmake.log" 2>&1 \
    || { tail -30 "$OUT/cmake.log" >&2; exit 1; }
cmake --build "$OUT/build" --target peer_state_reload -j"$JOBS" >"$OUT/build.log" 2>&1 \
    || { tail -30 "$OUT/build.log" >&2; exit 1; }
cp "$OUT/build/peer_state_reload" "$OUT/peer_state_reload"
echo "$OUT/peer_state_reload (llama.cpp from $LSRC; $FLAGS)"
