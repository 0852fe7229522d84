/*
 * parse.c — sizes and percentages given as text (contract: parse.h).
 */
#include "core/parse.h"

#include <stdlib.h>
#include <string.h>

int mz_parse_amount(const char *s, double *value, bool *is_pct)
{
    while (*s == ' ') s++;
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s || !(v >= 0)) return -1;
    double mult = 1;
    *is_pct = false;
    switch (*end) {
    case '%': *is_pct = true; end++; break;
    case 'k': case 'K': mult = 1024.0; end++; break;
    case 'm': case 'M': mult = 1024.0 * 1024.0; end++; break;
    case 'g': case 'G': mult = 1024.0 * 1024.0 * 1024.0; end++; break;
    default: break;
    }
    if (!*is_pct && (*end == 'i' || *end == 'I') && mult > 1) end++;
    if (!*is_pct && (*end == 'B' || *end == 'b')) end++;
    if (*end) return -1;
    if (*is_pct && v > 100) return -1;
    *value = v * mult;
    return 0;
}

int mz_parse_size(const char *s, size_t *out)
{
    if (!s) return -1;
    for (const char *p = s; *p; p++) /* strtod would also take hex, inf and nan */
        if (!((*p >= '0' && *p <= '9') || *p == '.' || *p == ' ' || strchr("kKmMgGiIbB", *p))) return -1;
    double v;
    bool pct;
    if (mz_parse_amount(s, &v, &pct) || pct || !(v >= 1) || v > 1125899906842624.0) return -1;
    *out = (size_t)v;
    return 0;
}
