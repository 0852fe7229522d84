/*
 * fuzz_loadavg.c — libFuzzer target for the thread pool's /proc/loadavg
 * reader (mz_loadavg_runnable, src/sched/threadpool.c).
 * Invariants: never crashes or reads past the text; a count it returns is
 * the decimal digits that open the fourth space-separated field, up to a
 * '/', with three non-empty fields before it.
 */
#include "sched/threadpool.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char s[256];
    const size_t n = size < sizeof s - 1 ? size : sizeof s - 1;
    memcpy(s, data, n);
    s[n] = '\0';
    const long r = mz_loadavg_runnable(s);
    if (r < -1) __builtin_trap();
    if (r >= 0) {
        /* walk the text independently: three fields, then the digits */
        const char *p = s;
        for (int f = 0; f < 3; f++) {
            while (*p == ' ') p++;
            if (!*p || *p == ' ') __builtin_trap();
            while (*p && *p != ' ') p++;
        }
        while (*p == ' ') p++;
        char digits[256];
        size_t k = 0;
        while (*p >= '0' && *p <= '9' && k < sizeof digits - 1) digits[k++] = *p++;
        digits[k] = '\0';
        if (k == 0 || *p != '/') __builtin_trap();
        char want[32];
        snprintf(want, sizeof want, "%ld", r);
        /* the same number, leading zeros aside */
        const char *d = digits;
        while (d[0] == '0' && d[1]) d++;
        if (strcmp(d, want) != 0) __builtin_trap();
    }
    (void)mz_pool_crowded(r, (long)(size % 64));
    return 0;
}
