/*
 * cli_num.c — the one place where numbers on a command line are parsed.
 *
 * Every numeric option of every subcommand goes through cli_opt_* so that a
 * value that is not entirely a number of the right kind ("abc", "2.5" for a
 * count, "8x", "", " 8"), or is out of the option's range, is refused with
 * the option's name in the message instead of silently becoming 0 or a
 * truncated value (what atoi/atof do). The cli_num_* cores print nothing and
 * are what tests/fuzz/fuzz_cli_num.c exercises.
 */
#include "cli_num.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* strto* skip leading white space and accept a sign; a command-line number
 * must start with a digit, or one sign followed by a digit (decimals may
 * start with '.'). */
static bool starts_like_number(const char *s, bool allow_minus, bool allow_dot)
{
    if (*s == '-' || *s == '+') {
        if (*s == '-' && !allow_minus) return false;
        s++;
    }
    return (*s >= '0' && *s <= '9') || (allow_dot && *s == '.' && s[1] >= '0' && s[1] <= '9');
}

cli_num_err cli_num_i64(const char *s, long long min, long long max, long long *out)
{
    if (!s || !*s) return CLI_NUM_EMPTY;
    if (!starts_like_number(s, true, false)) return CLI_NUM_SYNTAX;
    errno = 0;
    char *end = NULL;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end) return CLI_NUM_SYNTAX;
    if (errno == ERANGE || v < min || v > max) return CLI_NUM_RANGE;
    *out = v;
    return CLI_NUM_OK;
}

cli_num_err cli_num_u64(const char *s, unsigned long long *out)
{
    if (!s || !*s) return CLI_NUM_EMPTY;
    if (!starts_like_number(s, false, false)) return CLI_NUM_SYNTAX;
    bool hex = s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
    errno = 0;
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, hex ? 16 : 10);
    if (end == s || *end || (hex && end == s + 2)) return CLI_NUM_SYNTAX;
    if (errno == ERANGE) return CLI_NUM_RANGE;
    *out = v;
    return CLI_NUM_OK;
}

cli_num_err cli_num_double(const char *s, double min, double max, double *out)
{
    if (!s || !*s) return CLI_NUM_EMPTY;
    if (!starts_like_number(s, true, true)) return CLI_NUM_SYNTAX; /* also refuses inf, nan */
    /* Decimal only: strtod would read "0x1p3" as 8. */
    for (const char *p = s; *p; p++)
        if (*p == 'x' || *p == 'X') return CLI_NUM_SYNTAX;
    errno = 0;
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s || *end) return CLI_NUM_SYNTAX;
    if (!isfinite(v) || errno == ERANGE || v < min || v > max) return CLI_NUM_RANGE;
    *out = v;
    return CLI_NUM_OK;
}

/* ---- option wrappers: print "mzcache: OPT: ..." and return -1 on a bad value ---------- */

static int report(cli_num_err e, const char *opt, const char *v, const char *kind, const char *range)
{
    switch (e) {
    case CLI_NUM_OK: return 0;
    case CLI_NUM_EMPTY: fprintf(stderr, "mzcache: %s needs a value: %s %s\n", opt, kind, range); break;
    case CLI_NUM_SYNTAX:
        fprintf(stderr, "mzcache: %s: '%s' is not %s (%s)\n", opt, v, kind, range);
        break;
    case CLI_NUM_RANGE: fprintf(stderr, "mzcache: %s: %s is out of range (%s)\n", opt, v, range); break;
    }
    return -1;
}

int cli_opt_int(const char *opt, const char *v, int min, int max, int *out)
{
    long long x = 0;
    char range[96];
    snprintf(range, sizeof range, "%d to %d", min, max);
    int r = report(cli_num_i64(v, min, max, &x), opt, v, "a whole number", range);
    if (!r) *out = (int)x;
    return r;
}

int cli_opt_size(const char *opt, const char *v, size_t min, size_t max, size_t *out)
{
    long long x = 0;
    char range[96];
    snprintf(range, sizeof range, "%zu to %zu", min, max);
    long long lo = (long long)min, hi = max > (size_t)LLONG_MAX ? LLONG_MAX : (long long)max;
    int r = report(cli_num_i64(v, lo, hi, &x), opt, v, "a whole number", range);
    if (!r) *out = (size_t)x;
    return r;
}

int cli_opt_u64(const char *opt, const char *v, uint64_t *out)
{
    unsigned long long x = 0;
    int r = report(cli_num_u64(v, &x), opt, v, "a whole number", "0 to 18446744073709551615, or 0x hex");
    if (!r) *out = (uint64_t)x;
    return r;
}

int cli_opt_double(const char *opt, const char *v, double min, double max, double *out)
{
    double x = 0;
    char range[96];
    snprintf(range, sizeof range, "%g to %g", min, max);
    int r = report(cli_num_double(v, min, max, &x), opt, v, "a number", range);
    if (!r) *out = x;
    return r;
}

int cli_opt_float(const char *opt, const char *v, double min, double max, float *out)
{
    double x = 0;
    int r = cli_opt_double(opt, v, min, max, &x);
    if (!r) *out = (float)x;
    return r;
}
