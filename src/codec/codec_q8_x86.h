/*
 * codec_q8_x86.h — what the x86 q8 / q4 kernels (codec_q8_avx2.c,
 * codec_q8_avx512.c) read of a group the same way: the little-endian 16-bit
 * fields and the group header. Needs F16C.
 */
#ifndef MZ_CODEC_Q8_X86_H
#define MZ_CODEC_Q8_X86_H

#include "codec_f16.h"

#include <immintrin.h>
#include <stdbool.h>

/* The min, max and step (top code top) of the group header at p; false for
 * a header the scalar decoder refuses too (min or max not finite, max < min). */
static inline __attribute__((always_inline)) bool group_header(const uint8_t *p, unsigned top, float *mn,
                                                               float *mx, float *step)
{
    unsigned bmn = mz_get_le16(p), bmx = mz_get_le16(p + 2);
    *mn = _cvtsh_ss((unsigned short)bmn);
    *mx = _cvtsh_ss((unsigned short)bmx);
    if ((bmn & 0x7c00u) == 0x7c00u || (bmx & 0x7c00u) == 0x7c00u || *mx < *mn) return false;
    *step = mz_quant_step(*mn, *mx, top);
    return true;
}

#endif /* MZ_CODEC_Q8_X86_H */
