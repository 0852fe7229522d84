#!/usr/bin/env bash
# Installs the llama.cpp peer (llama-cpp-python, built from source) used by
# the golden-data scripts and the benchmarks; tests never need it.
# Built for explicit ISA levels, not -march=native: these VMs list amx_tile
# in /proc/cpuinfo, but the first AMX instruction dies with SIGILL (the tile
# state is not granted), and a native build compiles ggml's AMX path in
# whatever GGML_AMX_* says. AVX2/FMA/F16C plus AVX-512 (F, BW, VL, VNNI) is
# what the CPU really runs, and what our kernels use too.
set -euo pipefail
VERSION=0.3.36
if python3 -c "import llama_cpp, sys; sys.exit(0 if llama_cpp.__version__ == '$VERSION' else 1)" 2>/dev/null \
   && [ -f "${XDG_CACHE_HOME:-$HOME/.cache}/mzcache/peer-noamx2-$VERSION" ]; then
    exit 0
fi
echo "mzcache: building llama-cpp-python $VERSION from source (several minutes, once)"
CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DGGML_OPENMP=ON" \
CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
    python3 -m pip install --quiet --force-reinstall --no-cache-dir --no-deps "llama-cpp-python==$VERSION"
python3 -m pip install --quiet numpy
mkdir -p "${XDG_CACHE_HOME:-$HOME/.cache}/mzcache"
touch "${XDG_CACHE_HOME:-$HOME/.cache}/mzcache/peer-noamx2-$VERSION"
