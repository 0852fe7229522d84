/*
 * x8_util.h — a check the kernel tests share: every row of a repacked (x8)
 * tensor read back alone (mz_x8_row_to_plain, the lookup of a tied
 * embedding) equals the plain row it came from.
 */
#ifndef MZ_TEST_X8_UTIL_H
#define MZ_TEST_X8_UTIL_H

#include "kernels/kernels_impl.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Rows of `x8` (repacked) whose single-row read differs from `plain`'s;
 * -1 when no buffer could be had. */
static inline int x8_row_lookup_mismatches(int type, const void *x8, const uint8_t *plain, size_t n_rows,
                                           size_t n_cols)
{
    const size_t wrb = mz_dtype_row_bytes(type, n_cols);
    uint8_t *row = malloc(wrb);
    if (!row) return -1;
    int bad = 0;
    for (size_t r = 0; r < n_rows; r++) {
        mz_x8_row_to_plain(type, x8, r, n_cols, row);
        bad += memcmp(row, plain + r * wrb, wrb) != 0;
    }
    free(row);
    return bad;
}

#endif
