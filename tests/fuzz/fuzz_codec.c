/*
 * fuzz_codec.c — libFuzzer target for every codec's peek/decode, plus the q8
 * / q4 idempotency property on whatever decodes.
 *
 * Input: byte 0 selects the codec (bits 0-1 and 2) and mode, the rest is the
 * blob. A blob starting with q4's magic "MZQ4" selects q4 / q4-g32 / q4-g128
 * in place of the q8 family (bits 0-1 as for q8; raw's slot is q4 too);
 * one starting with "MZQR" selects q4r, with "MZKV" q8-q4r (bit 2 clear).
 *   - peek and decode with the blob's own count (if <= MAX_N) and with a
 *     wrong count: must never crash or read/write out of bounds (ASan);
 *   - q8 and q4, when decoding succeeds: e1 = encode(y), e2 =
 *     encode(decode(e1)) must be byte-identical (idempotency), and SIMD
 *     encode/decode must equal the scalar reference;
 *   - cachegen (bit 2): peek checks structure only, so decode may still fail
 *     (MZ_E_FORMAT, a corrupt stream); when it succeeds the scalar decode
 *     must agree and the same idempotency cycle must hold, with parameters
 *     taken from the blob's own sub-header;
 *   - q4r and q8-q4r, when peek accepts: decode must succeed and equal the
 *     scalar kernels' decode (they are not idempotent bit for bit);
 *   - decode_range (raw, q8, q4, q4r, q8-q4r), when peek accepts: a range
 *     of whole units (from the mode byte) decodes to exactly that slice of
 *     the whole decode, a misaligned one is MZ_E_RANGE; on any blob and any
 *     range it must fail cleanly;
 *   - mode bit 3: the bytes are raw F16 input to every encoder instead (the
 *     q8 and the q4 cycle both run, and q8-q4r's encode must decode and
 *     equal the scalar kernels' bytes).
 *
 * Build: `make fuzz` (CMake, build-fuzz). By hand: clang -std=c11 -g -O1
 *   -fsanitize=fuzzer,address,undefined -Isrc -Iinclude src/core/core.c
 *   src/codec/codec.c src/codec/codec_raw.c src/codec/codec_q8.c
 *   src/codec/codec_cachegen.c codec_q8_avx2.o codec_q8_avx512.o (the two
 *   SIMD files compiled with their -m flags, see CMakeLists.txt)
 *   tests/fuzz/fuzz_codec.c
 * Seeds: tests/fuzz/corpus/codec/.
 */
#include "codec/codec.h"
#include "codec/codec_cachegen.h"

#include <stdlib.h>
#include <string.h>

#define MAX_N 8192

static mz_f16 g_y[MAX_N + 1], g_y2[MAX_N + 1], g_y3[MAX_N + 1];
static uint8_t g_e1[MAX_N * 8 + 65536], g_e2[MAX_N * 8 + 65536];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* q8 (or q4 when q4, group even) */
static void check_quant_cycle(const mz_f16 *y, size_t n, unsigned group, bool q4)
{
    mz_codec c = q4 ? mz_codec_q4(group) : mz_codec_q8(group);
    size_t l1, l2;
    if (mz_codec_encode(&c, y, n, g_e1, sizeof g_e1, &l1) != MZ_OK) return; /* inf/NaN */
    mz_q8_force_scalar(true); /* scalar encode must match the SIMD one */
    mz_status st = mz_codec_encode(&c, y, n, g_e2, sizeof g_e2, &l2);
    mz_q8_force_scalar(false);
    if (st != MZ_OK || l1 != l2 || memcmp(g_e1, g_e2, l1) != 0) abort();
    if (mz_codec_decode(&c, g_e1, l1, g_y2, n) != MZ_OK) abort();
    if (mz_codec_encode(&c, g_y2, n, g_e2, sizeof g_e2, &l2) != MZ_OK) abort();
    if (l1 != l2 || memcmp(g_e1, g_e2, l1) != 0) abort(); /* not idempotent */
    if ((q4 ? mz_q4_decode_ref : mz_q8_decode_ref)(g_e2, l2, g_y3, n) != MZ_OK) abort();
    if (memcmp(g_y2, g_y3, n * 2) != 0) abort(); /* SIMD != scalar */
}

/* cachegen: e1 = encode(y), e2 = encode(decode(e1)) byte-identical, and the
 * scalar decode equal to the default one. */
static void check_cg_cycle(const mz_f16 *y, size_t n, const mz_cachegen_params *p)
{
    mz_codec c = mz_codec_cachegen(p);
    size_t l1, l2, cap = mz_codec_bound(&c, n);
    if (cap == 0 || cap > sizeof g_e1) return;
    if (mz_codec_encode(&c, y, n, g_e1, cap, &l1) != MZ_OK) return; /* inf/NaN */
    if (l1 > cap) abort();
    if (mz_codec_decode(&c, g_e1, l1, g_y2, n) != MZ_OK) abort();
    if (mz_cachegen_decode_ref(g_e1, l1, g_y3, n) != MZ_OK) abort();
    if (memcmp(g_y2, g_y3, n * 2) != 0) abort(); /* SIMD != scalar */
    if (mz_codec_encode(&c, g_y2, n, g_e2, cap, &l2) != MZ_OK) abort();
    if (l1 != l2 || memcmp(g_e1, g_e2, l1) != 0) abort(); /* not idempotent */
}

/* q8-q4r (d a power of two): encode; the scalar kernels give the same bytes;
 * the blob decodes. */
static void check_split(const mz_f16 *y, size_t n, unsigned d)
{
    mz_codec c = mz_codec_q8_q4r(d);
    size_t l1, l2, cap = mz_codec_bound(&c, n);
    if (cap == 0 || cap > sizeof g_e1) return;
    if (mz_codec_encode(&c, y, n, g_e1, cap, &l1) != MZ_OK) return; /* inf/NaN, f16 overflow */
    mz_q8_force_scalar(true);
    mz_status st = mz_codec_encode(&c, y, n, g_e2, cap, &l2);
    mz_q8_force_scalar(false);
    if (st != MZ_OK || l1 != l2 || memcmp(g_e1, g_e2, l1) != 0) abort();
    if (mz_codec_decode(&c, g_e1, l1, g_y2, n) != MZ_OK) abort();
}

/* decode_range on a blob peek accepted (n values, whole decode y): a range
 * of whole units equals y's slice; one starting a value past a unit is
 * MZ_E_RANGE unless the unit is 1. */
static void check_range(const mz_codec *c, const uint8_t *blob, size_t len, size_t n, const mz_f16 *y,
                        unsigned mode)
{
    if (!c->decode_range) return;
    const unsigned param = (unsigned)blob[6] | (unsigned)blob[7] << 8;
    size_t unit = param ? param : 1;
    if (c->decode == mz_codec_q8_q4r_vt.decode) {
        if (unit < MZ_Q8_GROUP_DEFAULT) unit = MZ_Q8_GROUP_DEFAULT;
        if ((n / 2) % unit) return; /* each half's ranges start at its own units */
    }
    const size_t v0 = MZ_MIN((size_t)(mode >> 4) * unit, n);
    const size_t k = MZ_MIN(unit * (1 + (mode & 3)), n - v0);
    if (c->decode_range(c, blob, len, n, v0, g_y3, k) != MZ_OK) abort();
    if (memcmp(g_y3, y + v0, k * 2) != 0) abort(); /* not the whole decode's values */
    if (unit > 1 && v0 + 1 < n && c->decode_range(c, blob, len, n, v0 + 1, g_y3, 0) != MZ_E_RANGE) abort();
}

/* Valid encoder parameters from arbitrary bytes. */
static mz_cachegen_params cg_params_from(const uint8_t *b)
{
    unsigned g = (unsigned)b[0] | (unsigned)b[1] << 8;
    mz_cachegen_params p = {.row = 1 + g % MZ_CG_ROW_MAX,
                            .levels_k = 1 + b[4] % MZ_CG_LEVELS_MAX,
                            .levels_v = 1 + b[5] % MZ_CG_LEVELS_MAX,
                            .k_chans_log2 = b[6] % 8u,
                            .v_chans_log2 = b[7] % 8u,
                            .anchor = b[8] % 8u ? 1u << (b[8] % 8u) : 0};
    return p;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    static const char *names[] = {"raw",      "q8",          "q8-g32",          "q8-g128",
                                  "cachegen", "cachegen-q7", "cachegen-anchor", "cachegen"};
    unsigned mode = data[0];
    bool cg = (mode & 4) != 0;
    static const char *q4_names[] = {"q4", "q4", "q4-g32", "q4-g128"};
    const mz_codec *c = mz_codec_find(names[mode & 7]);
    data++;
    size--;
    bool q4 = !cg && size >= 4 && memcmp(data, "MZQ4", 4) == 0;
    bool rot = !cg && size >= 4 && memcmp(data, "MZQR", 4) == 0;
    bool split = !cg && size >= 4 && memcmp(data, "MZKV", 4) == 0;
    if (q4) c = mz_codec_find(q4_names[mode & 3]);
    if (rot) c = mz_codec_find("q4r");
    if (split) c = mz_codec_find("q8-q4r");
    if (mode & 8) {
        /* encoder side: bytes are F16 values */
        size_t n = MZ_MIN(size / 2, (size_t)MAX_N);
        memcpy(g_y, data, n * 2);
        unsigned group = 1 + (mode >> 4) * 9; /* 1, 10, ... 136 */
        if (cg) {
            uint8_t pb[9] = {(uint8_t)(group * 7), 0, 0, 0, (uint8_t)(mode >> 4),
                             (uint8_t)(mode >> 3), (uint8_t)(mode >> 5), (uint8_t)mode,
                             (uint8_t)(mode >> 4)};
            mz_cachegen_params p = cg_params_from(pb);
            check_cg_cycle(g_y, n, &p);
        } else {
            check_quant_cycle(g_y, n, group, false);
            check_quant_cycle(g_y, n, group + (group & 1), true); /* 2, 10, 20, ... 136 */
            check_split(g_y, n, 2u << (mode >> 4) % 10);         /* d = 2 .. 1024 */
        }
        size_t l;
        if (mz_codec_encode(c, g_y, n, g_e1, sizeof g_e1, &l) == MZ_OK &&
            mz_codec_decode(c, g_e1, l, g_y2, n) != MZ_OK)
            abort();
        return 0;
    }
    size_t n = 0;
    if (cg && c->peek(c, data, size, &n) == MZ_OK && n <= MAX_N) {
        mz_status st = mz_codec_decode(c, data, size, g_y, n);
        if (st != MZ_OK && st != MZ_E_FORMAT) abort();
        /* the paired decode and the reference (one segment at a time) must
         * also agree that a blob is bad */
        if (st != MZ_OK && mz_cachegen_decode_ref(data, size, g_y2, n) == MZ_OK) abort();
        if (st == MZ_OK) {
            if (mz_cachegen_decode_ref(data, size, g_y2, n) != MZ_OK) abort();
            if (memcmp(g_y, g_y2, n * 2) != 0) abort();
            mz_cachegen_params p = cg_params_from(data + 16);
            check_cg_cycle(g_y, n, &p);
        }
        if (n > 0 && mz_codec_decode(c, data, size, g_y, n - 1) != MZ_E_FORMAT) abort();
    } else if (!cg && c->peek(c, data, size, &n) == MZ_OK && n <= MAX_N) {
        if (mz_codec_decode(c, data, size, g_y, n) != MZ_OK) abort(); /* peek said valid */
        check_range(c, data, size, n, g_y, mode);
        if (rot || split) {
            mz_q8_force_scalar(true);
            mz_status st = mz_codec_decode(c, data, size, g_y2, n);
            mz_q8_force_scalar(false);
            if (st != MZ_OK || memcmp(g_y, g_y2, n * 2) != 0) abort(); /* SIMD != scalar */
        } else if (c->name[0] == 'q') {
            if ((q4 ? mz_q4_decode_ref : mz_q8_decode_ref)(data, size, g_y2, n) != MZ_OK) abort();
            if (memcmp(g_y, g_y2, n * 2) != 0) abort();
            unsigned group = (unsigned)data[6] | (unsigned)data[7] << 8;
            check_quant_cycle(g_y, n, group, q4);
        }
        if (n > 0 && mz_codec_decode(c, data, size, g_y, n - 1) != MZ_E_FORMAT) abort();
    }
    /* a wrong or arbitrary count must fail cleanly */
    (void)mz_codec_decode(c, data, size, g_y, (size_t)(mode >> 4));
    (void)mz_codec_decode(c, data, size, g_y, MAX_N);
    if (c->decode_range) {
        (void)c->decode_range(c, data, size, MAX_N, (size_t)mode * 64, g_y, MAX_N / 8);
        (void)c->decode_range(c, data, size, n, (size_t)mode, g_y, MZ_MIN(n, (size_t)64));
    }
    return 0;
}
