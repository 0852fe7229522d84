/*
 * parse.h — sizes and percentages given as text (command-line options,
 * environment variables, API fields). Fuzzed by tests/fuzz/fuzz_session.c
 * (sizes) and tests/fuzz/fuzz_pressure.c (headrooms, built on these).
 */
#ifndef MZ_CORE_PARSE_H
#define MZ_CORE_PARSE_H

#include <stdbool.h>
#include <stddef.h>

/* "512M", "2G", "300K", "12345", "40%" (percent → *is_pct, at most 100):
 * 0 on success, -1 leaving *value and *is_pct unspecified. K/M/G are
 * 1024-based; "iB"/"B" may follow them, "B" a plain number. */
int mz_parse_amount(const char *s, double *value, bool *is_pct);
/* A byte size: "512M", "2G", "300K", "1.5G", "12345" (mz_parse_amount's
 * units). 0 on success; -1 for anything else: a percentage, hex, inf/nan,
 * zero, or more than 1 PiB. */
int mz_parse_size(const char *s, size_t *out);

#endif /* MZ_CORE_PARSE_H */
