#!/usr/bin/env bash
# Installs the llama.cpp peer (llama-cpp-python, built from source) used by
# the golden-data scripts and the benchmarks; tests never need it.
# AMX is turned off: these VMs list amx_tile in /proc/cpuinfo, but the first
# AMX instruction dies with SIGILL (the kernel does not grant the tile state),
# so a -march=native build that dispatches to AMX crashes.
set -euo pipefail
VERSION=0.3.36
if python3 -c "import llama_cpp, sys; sys.exit(0 if llama_cpp.__version__ == '$VERSION' else 1)" 2>/dev/null \
   && [ -f "${XDG_CACHE_HOME:-$HOME/.cache}/mzcache/peer-amx-off-$VERSION" ]; then
    exit 0
fi
echo "mzcache: building llama-cpp-python $VERSION from source (several minutes, once)"
CMAKE_ARGS="-DGGML_NATIVE=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DGGML_OPENMP=ON" \
CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
    python3 -m pip install --quiet --force-reinstall --no-cache-dir --no-deps "llama-cpp-python==$VERSION"
python3 -m pip install --quiet numpy
mkdir -p "${XDG_CACHE_HOME:-$HOME/.cache}/mzcache"
touch "${XDG_CACHE_HOME:-$HOME/.cache}/mzcache/peer-amx-off-$VERSION"
