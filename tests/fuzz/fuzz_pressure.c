/*
 * fuzz_pressure.c — libFuzzer target for the eviction sizing's parsers
 * (src/pressure/evict_size.c): cgroup value files, memory.stat, and the
 * headroom setting (serve's --pressure-headroom and MZCACHE_PRESSURE_HEADROOM),
 * with src/core/parse.c under it. Invariants: never crashes; a value is 0,
 * MZ_PSIG_NOLIMIT or the number its digits spell; an accepted headroom is a
 * percent in [0, MZ_ESIZE_HEADROOM_MAX_PCT] or a size mz_parse_size accepts
 * too (1 byte to 1 PiB), and a refused one leaves the params as they were;
 * sizing with any parsed figures never asks more than is held.
 */
#include "core/parse.h"
#include "pressure/evict_size.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s) return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    uint64_t v = mz_psig_parse_value(s);
    if (v && v != MZ_PSIG_NOLIMIT && (s[0] < '0' || s[0] > '9')) __builtin_trap();
    uint64_t st = mz_psig_parse_stat(s, "inactive_file");
    (void)st;
    mz_esize_params p = mz_esize_params_default(), q = p;
    if (mz_esize_parse_headroom(s, &q) == 0) {
        size_t n = 0;
        if (q.headroom_pct < 0 || q.headroom_pct > MZ_ESIZE_HEADROOM_MAX_PCT) __builtin_trap();
        if (q.headroom_bytes && (mz_parse_size(s, &n) || n != q.headroom_bytes)) __builtin_trap();
        if (!q.headroom_bytes && s[0] && s[strlen(s) - 1] != '%') __builtin_trap();
    } else if (memcmp(&p, &q, sizeof p) != 0) {
        __builtin_trap();
    }
    mz_esize_state es;
    mz_esize_state_init(&es, &q);
    mz_psig sig = {.source = (mz_pressure_source)(size % MZ_PRESSURE_N_SOURCES), .v1_limit = v, .v1_usage = st,
                   .v2_current = st, .v2_high = v};
    mz_esize_held h = {.held = v / 3, .total = v / 2, .unit = 1u << 20};
    mz_esize_out o;
    mz_esize(&q, &es, &sig, &h, &o);
    if (o.bytes > h.held) __builtin_trap();
    free(s);
    return 0;
}
