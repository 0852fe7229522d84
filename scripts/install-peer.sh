#!/usr/bin/env bash
# Installs the llama.cpp peer (llama-cpp-python, built from source) used by
# the golden-data scripts and the benchmarks; tests never need it.
# Built for explicit ISA levels picked from this CPU's /proc/cpuinfo, not
# -march=native: these VMs list amx_tile in /proc/cpuinfo, but the first AMX
# instruction dies with SIGILL (the tile state is not granted), and a native
# build compiles ggml's AMX path in whatever GGML_AMX_* says. AMX stays off
# always. AVX-512 (F, BW, VL, VNNI) is enabled only when all four flags are
# listed (our Xeons); AMD EPYC machines of our kind have AVX2 only, and a
# peer built with AVX-512 there would die with SIGILL. Without AVX2/FMA/F16C
# the peer is built for the baseline x86-64 (or the host ISA off x86).
# Also builds llama.cpp's llama-bench from the same source and flags
# (MZ_PEER_PRINT_LLAMA_BENCH=1 prints where).
# MZ_PEER_PRINT_FLAGS=1 prints the chosen CMake flags and exits
# (MZ_PEER_CPUINFO=file reads the flags from another cpuinfo).
set -euo pipefail
VERSION=0.3.36
peer_cmake_flags() {
    local flags="-DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DGGML_OPENMP=ON"
    local cpu
    # One line of flags (the first "flags" line; every core lists the same).
    cpu=" $(grep -m1 '^flags' "${MZ_PEER_CPUINFO:-/proc/cpuinfo}" 2>/dev/null | sed 's/^[^:]*://') "
    has() { case "$cpu" in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
    if has avx2 && has fma && has f16c; then
        flags="$flags -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
        if has bmi2; then flags="$flags -DGGML_BMI2=ON"; else flags="$flags -DGGML_BMI2=OFF"; fi
        if has avx512f && has avx512bw && has avx512vl && has avx512_vnni; then
            flags="$flags -DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON"
        else
            flags="$flags -DGGML_AVX512=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_BF16=OFF"
        fi
        # AVX-VNNI (the VEX form) is not used by our kernels either: keep it off
        # so both sides run the same instruction families.
        flags="$flags -DGGML_AVX_VNNI=OFF"
    fi
    echo "$flags"
}
if [ "${MZ_PEER_PRINT_FLAGS:-0}" = 1 ]; then peer_cmake_flags; exit 0; fi
FLAGS="$(peer_cmake_flags)"
# The stamp names the ISA level, so a home directory shared between an
# AVX-512 and an AVX2-only machine rebuilds instead of reusing a wrong peer.
case "$FLAGS" in *GGML_AVX512=ON*) LEVEL=avx512 ;; *GGML_AVX2=ON*) LEVEL=avx2 ;; *) LEVEL=base ;; esac
STAMP="${XDG_CACHE_HOME:-$HOME/.cache}/mzcache/peer-noamx2-$LEVEL-$VERSION"
# llama.cpp's own llama-bench (bench/device-scaling.sh: the thread-scaling
# table), built from the same vendored source with the same flags.
LB_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/mzcache/llama-bench-$LEVEL-$VERSION"
if [ "${MZ_PEER_PRINT_LLAMA_BENCH:-0}" = 1 ]; then echo "$LB_DIR/bin/llama-bench"; exit 0; fi
build_llama_bench() {
    [ -x "$LB_DIR/bin/llama-bench" ] && return 0
    command -v cmake >/dev/null || { echo "mzcache: no cmake: llama-bench not built" >&2; return 0; }
    local tmp
    tmp=$(mktemp -d)
    echo "mzcache: building llama-bench $VERSION (a few minutes, once)"
    if (cd "$tmp" && python3 -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d . \
          && tar xzf llama_cpp_python-*.tar.gz) \
       && cmake -S "$tmp"/llama_cpp_python-*/vendor/llama.cpp -B "$LB_DIR" -DCMAKE_BUILD_TYPE=Release \
            -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
            -DLLAMA_BUILD_TOOLS=ON $FLAGS >/dev/null \
       && cmake --build "$LB_DIR" --target llama-bench -j"$(nproc)" >/dev/null; then :; else
        echo "mzcache: building llama-bench failed (the thread-scaling table leaves its columns empty)" >&2
    fi
    rm -rf "$tmp"
}
if python3 -c "import llama_cpp, sys; sys.exit(0 if llama_cpp.__version__ == '$VERSION' else 1)" 2>/dev/null \
   && { [ -f "$STAMP" ] || { [ "$LEVEL" = avx512 ] && [ -f "${STAMP%-avx512-$VERSION}-$VERSION" ]; }; }; then
    # (the stamp without a level was written by the AVX-512-only version of this script)
    build_llama_bench
    exit 0
fi
echo "mzcache: building llama-cpp-python $VERSION from source (several minutes, once): $FLAGS"
CMAKE_ARGS="$FLAGS" \
CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
    python3 -m pip install --quiet --force-reinstall --no-cache-dir --no-deps "llama-cpp-python==$VERSION"
python3 -m pip install --quiet numpy diskcache  # llama_cpp imports diskcache (the build above is --no-deps)
mkdir -p "${XDG_CACHE_HOME:-$HOME/.cache}/mzcache"
rm -f "${XDG_CACHE_HOME:-$HOME/.cache}"/mzcache/peer-noamx2-*
touch "$STAMP"
build_llama_bench
