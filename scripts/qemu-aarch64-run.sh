#!/usr/bin/env bash
# qemu-aarch64-run.sh PROGRAM [ARG...]: runs an AArch64 program under
# qemu-user with the cross sysroot, the one definition of how for both
# stages of `make test-arm` (scripts/kernel-tests.sh's RUN, and
# scripts/arm-cli-test.sh).
# qemu-aarch64-run.sh --check: exit 0 when it can run one, else 77 with what
# is missing on stdout.
#
# The C library comes from the cross sysroot, as its loader does: with the
# arm64 multiarch packages installed, the loader's search (the host's
# ld.so.cache) finds /lib/aarch64-linux-gnu's libc first, a different build
# than the cross loader (2.36-9+deb12u14 against 2.36-8cross1 on Debian 12),
# and threads then hang under qemu (test_threadpool ran for over 12 minutes
# instead of 1.3 s). The other libraries still come from multiarch. (It
# also hung about one run in 50 until the thread pool's caller wrote its
# hand-off flags with exchanges: src/sched/threadpool.c, above wake_workers.)
SYSROOT=/usr/aarch64-linux-gnu
if [ "${1:-}" = --check ]; then
    command -v qemu-aarch64 >/dev/null || {
        echo "qemu-aarch64 not installed (Debian: qemu-user; scripts/install-deps.sh)"
        exit 77
    }
    [ -e "$SYSROOT/lib/ld-linux-aarch64.so.1" ] || {
        echo "$SYSROOT/lib/ld-linux-aarch64.so.1 missing (Debian: libc6-dev-arm64-cross; scripts/install-deps.sh)"
        exit 77
    }
    exit 0
fi
# A program that runs past MZ_QEMU_TIMEOUT seconds (900) is stopped and
# fails, so a hang under emulation costs minutes, not the whole CI run.
limit=${MZ_QEMU_TIMEOUT:-900}
timeout -k 10 "$limit" qemu-aarch64 -L "$SYSROOT" -E "LD_LIBRARY_PATH=$SYSROOT/lib" "$@"
rc=$?
if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    echo "qemu-aarch64-run.sh: ${1##*/} ran past ${limit} s under qemu and was stopped (a hang?)" >&2
fi
exit $rc
