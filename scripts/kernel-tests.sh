#!/usr/bin/env bash
# Builds and runs the kernel unit tests (test_kernels, test_kernels_kquant, test_kernels_q5iq, test_attn,
# test_threadpool) and the KV codecs' SIMD checks (test_codec: q8 / q4 decode
# by every kernel set against the formula; test_codec_q4r: the rotation's
# kernels against the scalar one; test_codec_split) from src/kernels,
# src/codec, src/core and src/sched alone, with any C compiler, optionally
# under an emulator — the cross-architecture check:
#
#   scripts/kernel-tests.sh                       native, cc
#   CC=aarch64-linux-gnu-gcc RUN=scripts/qemu-aarch64-run.sh scripts/kernel-tests.sh build-aarch64
#
# Needs none of the library's other dependencies (PCRE2, liburing). Exits 77
# (skip) when CC or the emulator is not installed, so `make test` can call it
# unconditionally; the reason also goes to $MZ_SKIP_LOG when set.
set -euo pipefail
OUT=${1:-build-kernels}
CC=${CC:-cc}
RUN=${RUN:-}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# skip WHY: says so, also into $MZ_SKIP_LOG when set (scripts/test-skips.sh).
skip() {
    echo "kernel-tests: skipped: $*"
    if [ -n "${MZ_SKIP_LOG:-}" ]; then echo "kernel-tests: $*" >>"$MZ_SKIP_LOG"; fi
    exit 77
}
command -v "$CC" >/dev/null || skip "$CC not installed (scripts/install-deps.sh installs the cross tools)"
if [ -n "$RUN" ] && ! command -v "${RUN%% *}" >/dev/null; then
    skip "${RUN%% *} not installed (scripts/install-deps.sh installs qemu-user)"
fi
# The qemu runner knows what it needs (qemu-aarch64, the cross sysroot).
if [ "${RUN##*/}" = qemu-aarch64-run.sh ]; then why=$($RUN --check) || skip "$why"; fi
mkdir -p "$OUT"
CFLAGS="-std=c11 -O2 -g -Wall -Wextra -Wpedantic -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wcast-qual -Wno-unused-parameter -Werror -fno-strict-aliasing -I$ROOT/src -I$ROOT/include -I$ROOT/tests/unit"
machine=$($CC -dumpmachine)
objs=()
for src in "$ROOT"/src/kernels/*.c "$ROOT"/src/codec/*.c "$ROOT"/src/core/*.c "$ROOT"/src/sched/*.c; do
    flags=""
    case "$machine" in
    x86_64*)
        case "$src" in
        *_avx2.c) flags="-mavx2 -mfma -mf16c" ;;
        *_avx512.c) flags="-mavx512f -mavx512bw -mavx512vl -mavx512vnni -mavx2 -mfma -mf16c" ;;
        esac ;;
    esac
    o="$OUT/$(basename "${src%.c}").o"
    # shellcheck disable=SC2086
    $CC $CFLAGS $flags -c "$src" -o "$o"
    objs+=("$o")
done
rc=0
for t in test_kernels test_kernels_kquant test_kernels_q5iq test_attn test_threadpool test_codec test_codec_q4r \
    test_codec_split; do
    # shellcheck disable=SC2086
    $CC $CFLAGS -o "$OUT/$t" "$ROOT/tests/unit/$t.c" "$ROOT/tests/unit/testutil.c" "${objs[@]}" -lm -lpthread
    echo "kernel-tests: $t ($machine${RUN:+, under $RUN})"
    # shellcheck disable=SC2086
    if ! (cd "$ROOT" && $RUN "$OUT/$t"); then rc=1; fi
done
exit $rc
