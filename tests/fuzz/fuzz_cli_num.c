/*
 * fuzz_cli_num.c — libFuzzer target for the command-line number parser
 * (app/cli/cli_num.c, compiled in here: the CLI is not a library).
 * Invariants: never crashes; an accepted value is within the bounds asked
 * for, and the text it came from is entirely digits with at most a leading
 * sign (integers) or a plain decimal (no inf/nan/hex floats); *out is left
 * alone on refusal.
 */
#include "../../app/cli/cli_num.c"

#include <math.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2) return 0;
    /* First byte picks the bounds; the rest is the text. */
    static const long long lo[] = {0, -1, 1, LLONG_MIN, 0};
    static const long long hi[] = {256, 1 << 24, 65535, LLONG_MAX, 0};
    unsigned k = data[0] % 5;
    char s[128];
    size_t n = size - 1 < sizeof s - 1 ? size - 1 : sizeof s - 1;
    memcpy(s, data + 1, n);
    s[n] = '\0';

    long long v = 12345;
    cli_num_err e = cli_num_i64(s, lo[k], hi[k], &v);
    if (e == CLI_NUM_OK) {
        if (v < lo[k] || v > hi[k]) __builtin_trap();
        for (const char *p = s + (s[0] == '-' || s[0] == '+'); *p; p++)
            if (*p < '0' || *p > '9') __builtin_trap();
    } else if (v != 12345) {
        __builtin_trap();
    }

    unsigned long long u = 7;
    if (cli_num_u64(s, &u) != CLI_NUM_OK && u != 7) __builtin_trap();
    if (s[0] == '-' && cli_num_u64(s, &u) == CLI_NUM_OK) __builtin_trap();

    double d = 0.5;
    e = cli_num_double(s, -100.0, 100.0, &d);
    if (e == CLI_NUM_OK) {
        if (!isfinite(d) || d < -100.0 || d > 100.0) __builtin_trap();
        if (strpbrk(s, "xXnNiI")) __builtin_trap(); /* no hex, nan, inf */
    } else if (d != 0.5) {
        __builtin_trap();
    }
    return 0;
}
