/*
 * codec_cachegen.c — a CacheGen-style KV chunk codec (Liu et al., SIGCOMM
 * 2024, as public encoders implement it): per-row symmetric quantization to a
 * few levels, probability tables built from the chunk's own histogram per
 * channel group and stored with it, and an entropy coder of our own (rANS,
 * 4 interleaved states). About 4x smaller than F16 at Q = 15, 5x at Q = 7;
 * idempotent bit for bit.
 *
 * Divisions: format · quantizer (and why it is idempotent) · probability
 * tables · rANS · decode · encode · vtables.
 *
 * ---- Format ---------------------------------------------------------------
 *
 * The n F16 values are cut into rows of G values (G = head_dim: one row is
 * one token of one KV head; the last row may be short) and rows into
 * segments of S rows (S = 256: one segment is one head's K or V in a KV
 * chunk). Segment k is a "K" segment when 2k < n_seg, else a "V" segment;
 * each half has its own level count Q and table grouping. Blob, little-endian:
 *
 *   16 B  codec.h header: magic "MZCG", version 1, param 0, n_values
 *   12 B  u16 G (1..1024), u16 S (>= 1), u8 Qk, u8 Qv (1..31),
 *         u8 gk, u8 gv (a table per 2^g channels, g <= 10),
 *         u8 A (0 = no anchor step, else 2..255 rows a group), u8 0, u16 0
 *   4*n_seg  u32 byte length of each segment (they add up to the rest)
 *   segments, each:
 *     u16 scale[rows]    f16 max |x| of the row: finite, sign bit clear
 *     tables, one per channel group (channels [g*2^gx, (g+1)*2^gx) ∩ [0, G)):
 *       u8 lo, u8 hi     symbol range, lo <= hi <= 2Q
 *       nibbles          one 4-bit weight code per symbol lo..hi, low nibble
 *                        first, (hi - lo + 2) / 2 bytes
 *     stream             u32 x0..x3 (the four rANS states, each >= 2^16),
 *                        then the renormalisation words (u16); the decoder
 *                        must end with every state at 2^16 having read
 *                        exactly the stream's bytes.
 *
 * Symbols are coded table by table; within a table channel by channel, and
 * within a channel row by row (so one table is live at a time). The t-th
 * symbol of a segment uses rANS state t mod 4. A symbol is q + Q for the
 * code q in -Q..Q; with the anchor step, a row that is not the first of its
 * group of A rows codes (sym - sym_first_row) mod (2Q+1) instead — a lossless
 * transform of the symbols, so it cannot change what decodes. It is measured
 * in docs/CODECS.md (it makes blobs larger: adjacent tokens are not similar
 * enough on a per-token scale).
 *
 * ---- Quantizer (per row of values x, all finite) ----------------------------
 *
 *   s     = max |x| (an f16 value, exact; stored with the sign bit clear)
 *   step  = f32(s / Q) truncated to 16 significant bits (as mz_q8_step), so
 *           q * step is exact in f32 for every q <= 31
 *   m(q)  = s                                   if q == Q
 *         = f16_rne(min(q * step, s))           for 0 <= q < Q
 *   dec(q) = m(q) for q >= 0, -m(-q) for q < 0; a zero result is +0.
 *   code(x) = sign(x) * c, where c = the smallest q in 0..Q whose m(q) is
 *           nearest |x| (ties go to the smaller magnitude); c = 0 → +0.
 *
 * m is monotone non-decreasing with m(0) = 0 and m(Q) = s; every m(q) <= s.
 *
 * Why encode(decode(encode(x))) == encode(x), byte for byte. Let y be the
 * decoded row.
 *   - max |y| = s: an element with |x| = s is at distance 0 from m(Q) = s, so
 *     its code decodes to ±s; no |dec(q)| exceeds s. So the scale, the step
 *     and m are unchanged.
 *   - codes: let c = code magnitude of |x_i|, v = m(c). If c > 0 then v > 0
 *     (c is the smallest nearest code and m(0) = 0, so m(c) = 0 would make 0
 *     win), so y_i = ±v keeps the sign of x_i. Every code whose m equals v is
 *     exactly as near |x_i| as c, so c, the smallest of all the nearest codes,
 *     is also the smallest code with m = v, which is the code of |y_i| = v.
 *     If c = 0, y_i = +0 and its code is 0 again.
 *   Same scales and symbols give the same histograms, tables and rANS bytes
 *   (the anchor transform is a function of the symbols). No special case for
 *   zero rows (s = 0: every code is 0), subnormals or tiny steps.
 *
 * Error: |dec(code(x)) - x| <= (step + ulp16 near x) / 2, i.e. about
 * max|row| / (2Q); scales are exact.
 *
 * ---- Probability tables -------------------------------------------------------
 *
 * Weight code k (4 bits) → weight W[k] = 1 for k = 0 (a symbol inside lo..hi
 * that the chunk does not use: still a nonzero count), round(4·2^(k/2)) for
 * k >= 1. The frequencies, summing to M = 2^12, are a pure function of the
 * nibbles (cg_table_freqs), shared by encoder and decoder: f = max(1,
 * W·M / ΣW), then the difference to M goes to the first largest. The encoder
 * picks k per symbol from the chunk's counts: the k whose weight is nearest
 * (geometrically) count · 724 / max count; present symbols get k >= 1.
 *
 * ---- rANS ---------------------------------------------------------------------
 *
 * rANS with 32-bit states and 16-bit renormalisation (Duda; the ryg_rans
 * "word" formulation): L = 2^16, states in [L, 2^32), precision 12 bits.
 * Encoding runs backwards over the symbols, writing words from the end;
 * decoding reads forwards: x = f · (x >> 12) + (x & 4095) - cum, then one
 * word in if x < L (one is always enough: f · (x >> 12) >= 16). Since
 * f · ((x >> 12) + 1) <= 2^32 nothing overflows whatever the state, and every
 * read is bounds-checked (a column runs unchecked only when 2 bytes a symbol
 * are left), so any bytes decode or fail cleanly. An interleaved rANS with
 * static tables is an arithmetic coder in all but name, and it decodes with
 * a multiply and no division (this sits on the restore path).
 *
 * ---- Threads and memory -----------------------------------------------------------
 *
 * Stateless, any thread, no allocation. Decode uses the destination itself
 * as symbol scratch (a segment's symbols are staged in the upper half of its
 * own output range and consumed front to back); encode stages symbols at the
 * end of dst (bound() includes room for one segment of them). Segments are
 * independent, so a caller could decode them in parallel.
 */
#include "codec_cachegen.h"
#include "codec_f16.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

#if defined(MZ_CODEC_HAVE_AVX2_FILE)
#include <immintrin.h>
#endif

#define CG_MAGIC 0x47435a4du /* "MZCG" */
#define CG_SUBHDR 12
#define CG_PREFIX (MZ_CODEC_HEADER_BYTES + CG_SUBHDR)
#define CG_PROB_BITS 12
#define CG_M (1u << CG_PROB_BITS)
#define CG_L (1u << 16)
#define CG_NSTATE 4
#define CG_ALPHA_MAX (2 * MZ_CG_LEVELS_MAX + 1) /* 63 */
#define CG_TABLE_MAX_BYTES (2 + (CG_ALPHA_MAX + 1) / 2)
#define CG_GLOG_MAX 10

static _Atomic int g_force_scalar;

static const uint16_t k_weight[16] = {1, 6, 8, 11, 16, 23, 32, 45, 64, 91, 128, 181, 256, 362, 512, 724};

/* ---- small helpers ------------------------------------------------------------ */

/* Layout of one blob, from the sub-header. */
typedef struct cg_layout {
    unsigned G, S, Qk, Qv, gk, gv, A;
    uint64_t n;        /* values */
    uint64_t n_rows;   /* ceil(n / G) */
    uint64_t n_seg;    /* ceil(n_rows / S) */
} cg_layout;

static void layout_counts(cg_layout *lo)
{
    lo->n_rows = lo->n ? (lo->n - 1) / lo->G + 1 : 0;
    lo->n_seg = lo->n_rows ? (lo->n_rows - 1) / lo->S + 1 : 0;
}

/* Values, rows, level count and table grouping of segment k. */
static void seg_shape(const cg_layout *lo, uint64_t k, size_t *nsym, unsigned *nr, unsigned *Q,
                      unsigned *glog)
{
    uint64_t r0 = k * lo->S;
    uint64_t rows = MZ_MIN((uint64_t)lo->S, lo->n_rows - r0);
    uint64_t v0 = r0 * lo->G;
    *nr = (unsigned)rows;
    *nsym = (size_t)MZ_MIN(rows * lo->G, lo->n - v0);
    bool is_k = 2 * k < lo->n_seg;
    *Q = is_k ? lo->Qk : lo->Qv;
    *glog = is_k ? lo->gk : lo->gv;
}

static inline unsigned n_tables(unsigned G, unsigned glog) { return ((G - 1) >> glog) + 1; }

/* ---- quantizer ------------------------------------------------------------------ */

/* Implied step of a row: f32(s / Q) truncated to 16 significant bits, so
 * q * step is exact for q < 256. */
static inline float cg_step(float s, unsigned Q)
{
    float d = s / (float)Q;
    uint32_t b;
    memcpy(&b, &d, sizeof b);
    b &= ~0xffu;
    memcpy(&d, &b, sizeof d);
    return d;
}

/* mag[q] = m(q) as a float and bits[q] its f16 pattern, q = 0..Q. */
static void row_levels(unsigned s_bits, unsigned Q, float *mag, uint16_t *bits)
{
    float s = mz_half_to_float((uint16_t)s_bits);
    float step = cg_step(s, Q);
    for (unsigned q = 0; q < Q; q++) {
        float v = (float)q * step;
        if (v > s) v = s;
        bits[q] = mz_float_to_half(v);
        mag[q] = mz_half_to_float(bits[q]);
    }
    bits[Q] = (uint16_t)s_bits;
    mag[Q] = s;
}

/* Smallest q in [0, Q] with mag[q] >= t (mag[Q] >= t is guaranteed). */
static inline unsigned first_ge(const float *mag, unsigned Q, float t)
{
    unsigned lo = 0, hi = Q;
    while (lo < hi) {
        unsigned mid = (lo + hi) >> 1;
        if (mag[mid] >= t)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* Code magnitude of a (0 <= a <= s): the smallest q whose m(q) is nearest a. */
static inline unsigned code_mag(const float *mag, unsigned Q, float inv_step, float a)
{
    /* fast path: the guess brackets a and its lower neighbour starts a plateau */
    float t = a * inv_step;
    unsigned g = t >= (float)Q ? Q : (unsigned)(t + 0.5f);
    unsigned q;
    if (g > 0 && mag[g - 1] < a && a <= mag[g])
        q = g;
    else if (g < Q && mag[g] < a && a <= mag[g + 1])
        q = g + 1;
    else
        q = first_ge(mag, Q, a);
    if (q == 0) return 0;
    float lo = mag[q - 1], hi = mag[q];
    if ((double)hi - (double)a < (double)a - (double)lo) return q;
    if (q == 1 || mag[q - 2] < lo) return q - 1;
    return first_ge(mag, Q, lo);
}

/* ---- probability tables ----------------------------------------------------------- */

typedef struct cg_table {
    unsigned lo, hi;             /* symbol range */
    uint16_t freq[CG_ALPHA_MAX]; /* by symbol - lo */
    uint16_t cum[CG_ALPHA_MAX + 1];
} cg_table;

/* Frequencies (summing to CG_M, each >= 1) from the weight codes. */
static void cg_table_freqs(cg_table *t, const uint8_t *k)
{
    unsigned w = t->hi - t->lo + 1;
    uint32_t sum_w = 0;
    for (unsigned i = 0; i < w; i++) sum_w += k_weight[k[i]];
    /* W·M / ΣW by a multiply: with r = ceil(2^40 / ΣW), (n·r) >> 40 == n / ΣW
     * exactly for every n < 2^40 / ΣW (the rounding error n·(r·ΣW − 2^40) / 2^40
     * stays below n / 2^40 < 1 / ΣW); here n <= 724·2^12 < 2^22 and ΣW <= 63·724
     * < 2^16, far inside that. One division a table instead of one a symbol
     * (K has a table per channel: 64 tables for 16384 symbols). */
    const uint64_t r = ((uint64_t)1 << 40) / sum_w + 1;
    uint32_t sum = 0, best = 0;
    for (unsigned i = 0; i < w; i++) {
        uint32_t f = (uint32_t)(((uint64_t)k_weight[k[i]] * CG_M * r) >> 40);
        if (f == 0) f = 1;
        t->freq[i] = (uint16_t)f;
        sum += f;
        if (f > t->freq[best]) best = i;
    }
    /* |CG_M - sum| < w <= 63 and the largest f >= CG_M / 63 > 63: stays >= 1 */
    t->freq[best] = (uint16_t)((int32_t)t->freq[best] + (int32_t)CG_M - (int32_t)sum);
    t->cum[0] = 0;
    for (unsigned i = 0; i < w; i++) t->cum[i + 1] = (uint16_t)(t->cum[i] + t->freq[i]);
}

/* Parses one table at p (at most avail bytes) for an alphabet of 2Q+1
 * symbols; returns its byte length, 0 if malformed. */
static size_t cg_table_parse(const uint8_t *p, size_t avail, unsigned Q, cg_table *t)
{
    if (avail < 2) return 0;
    unsigned lo = p[0], hi = p[1];
    if (lo > hi || hi > 2 * Q) return 0;
    unsigned w = hi - lo + 1;
    size_t len = 2 + (w + 1) / 2;
    if (avail < len) return 0;
    uint8_t k[CG_ALPHA_MAX];
    for (unsigned i = 0; i < w; i++) k[i] = (uint8_t)((p[2 + i / 2] >> (4 * (i & 1))) & 15u);
    t->lo = lo;
    t->hi = hi;
    cg_table_freqs(t, k);
    return len;
}

/* Checks one table's structure like cg_table_parse, without computing its
 * frequencies (any nibbles give a valid table); returns its byte length, 0
 * if malformed. */
static size_t cg_table_check(const uint8_t *p, size_t avail, unsigned Q)
{
    if (avail < 2) return 0;
    unsigned lo = p[0], hi = p[1];
    if (lo > hi || hi > 2 * Q) return 0;
    size_t len = 2 + (hi - lo + 2) / 2;
    return avail < len ? 0 : len;
}

/* Weight code of a symbol seen c times (c >= 1) when the commonest is seen
 * cmax times: the k >= 1 whose weight is geometrically nearest c·724/cmax. */
static unsigned weight_code(uint32_t c, uint32_t cmax)
{
    uint64_t r2 = (uint64_t)c * 724u * ((uint64_t)c * 724u);
    uint64_t m2 = (uint64_t)cmax * cmax;
    unsigned k = 1;
    while (k < 15 && r2 > (uint64_t)k_weight[k] * k_weight[k + 1] * m2) k++;
    return k;
}

/* Writes the table for a histogram (2Q+1 counts, not all zero unless the
 * group has no symbol); returns its length. */
static size_t cg_table_write(uint8_t *p, const uint32_t *hist, unsigned Q, cg_table *t)
{
    unsigned alpha = 2 * Q + 1, lo = alpha, hi = 0;
    uint32_t cmax = 0;
    for (unsigned s = 0; s < alpha; s++)
        if (hist[s]) {
            if (lo == alpha) lo = s;
            hi = s;
            if (hist[s] > cmax) cmax = hist[s];
        }
    if (lo == alpha) lo = hi = Q; /* empty group (a short last row): any valid table */
    unsigned w = hi - lo + 1;
    uint8_t k[CG_ALPHA_MAX];
    for (unsigned i = 0; i < w; i++) k[i] = hist[lo + i] ? (uint8_t)weight_code(hist[lo + i], cmax) : 0;
    p[0] = (uint8_t)lo;
    p[1] = (uint8_t)hi;
    size_t nb = (w + 1) / 2;
    memset(p + 2, 0, nb);
    for (unsigned i = 0; i < w; i++) p[2 + i / 2] |= (uint8_t)(k[i] << (4 * (i & 1)));
    t->lo = lo;
    t->hi = hi;
    cg_table_freqs(t, k);
    return 2 + nb;
}

/* ---- header and structure ------------------------------------------------------------ */

static mz_status cg_parse_layout(const uint8_t *src, size_t len, cg_layout *lo)
{
    if (!src || len < MZ_CODEC_HEADER_BYTES)
        return mz_fail(MZ_E_FORMAT, "cachegen blob: truncated header (%zu bytes)", len);
    if (mz_get_le32(src) != CG_MAGIC)
        return mz_fail(MZ_E_FORMAT, "cachegen blob: bad magic 0x%08x", (unsigned)mz_get_le32(src));
    if (mz_get_le16(src + 4) != MZ_CODEC_VERSION)
        return mz_fail(MZ_E_FORMAT, "cachegen blob: unsupported version %u", mz_get_le16(src + 4));
    if (mz_get_le16(src + 6) != 0)
        return mz_fail(MZ_E_FORMAT, "cachegen blob: bad parameter %u", mz_get_le16(src + 6));
    if (len < CG_PREFIX)
        return mz_fail(MZ_E_FORMAT, "cachegen blob: truncated sub-header (%zu bytes)", len);
    const uint8_t *h = src + MZ_CODEC_HEADER_BYTES;
    const uint64_t n = mz_get_le64(src + 8);
    lo->n = n;
    lo->G = mz_get_le16(h);
    lo->S = mz_get_le16(h + 2);
    lo->Qk = h[4];
    lo->Qv = h[5];
    lo->gk = h[6];
    lo->gv = h[7];
    lo->A = h[8];
    if (lo->G < 1 || lo->G > MZ_CG_ROW_MAX || lo->S < 1 || lo->Qk < 1 ||
        lo->Qk > MZ_CG_LEVELS_MAX || lo->Qv < 1 || lo->Qv > MZ_CG_LEVELS_MAX ||
        lo->gk > CG_GLOG_MAX || lo->gv > CG_GLOG_MAX || lo->A == 1 || h[9] || mz_get_le16(h + 10))
        return mz_fail(MZ_E_FORMAT, "cachegen blob: bad parameters (G %u, S %u, Q %u/%u, "
                       "g %u/%u, A %u)", lo->G, lo->S, lo->Qk, lo->Qv, lo->gk, lo->gv, lo->A);
    if (n > ((uint64_t)1 << 48))
        return mz_fail(MZ_E_FORMAT, "cachegen blob: value count %llu too large",
                       (unsigned long long)n);
    layout_counts(lo);
    /* every segment needs at least 4 bytes of directory: bounds n_seg by len */
    if (lo->n_seg > (len - CG_PREFIX) / 4)
        return mz_fail(MZ_E_FORMAT, "cachegen blob: %llu values need %llu segments, blob has "
                       "%zu bytes", (unsigned long long)n, (unsigned long long)lo->n_seg, len);
    uint64_t sum = 0;
    const uint8_t *dir = src + CG_PREFIX;
    for (uint64_t k = 0; k < lo->n_seg; k++) sum += mz_get_le32(dir + 4 * k);
    if (sum != len - CG_PREFIX - 4 * lo->n_seg)
        return mz_fail(MZ_E_FORMAT, "cachegen blob: segments add up to %llu bytes, blob has %zu",
                       (unsigned long long)sum, (size_t)(len - CG_PREFIX - 4 * lo->n_seg));
    return MZ_OK;
}

/* Checks a segment's scales and tables; returns the stream offset in *off. */
static mz_status cg_check_segment(const uint8_t *seg, size_t seg_len, unsigned nr, unsigned G,
                                  unsigned Q, unsigned glog, uint64_t k, size_t *off)
{
    if (seg_len < 2 * (size_t)nr)
        return mz_fail(MZ_E_FORMAT, "cachegen blob: segment %llu truncated in its scales",
                       (unsigned long long)k);
    for (unsigned i = 0; i < nr; i++) {
        unsigned s = mz_get_le16(seg + 2 * i);
        if ((s & 0x8000u) || (s & 0x7c00u) == 0x7c00u)
            return mz_fail(MZ_E_FORMAT, "cachegen blob: segment %llu row %u has a bad scale "
                           "0x%04x", (unsigned long long)k, i, s);
    }
    size_t p = 2 * (size_t)nr;
    unsigned nt = n_tables(G, glog);
    for (unsigned g = 0; g < nt; g++) {
        size_t l = cg_table_check(seg + p, seg_len - p, Q);
        if (!l)
            return mz_fail(MZ_E_FORMAT, "cachegen blob: segment %llu table %u is malformed",
                           (unsigned long long)k, g);
        p += l;
    }
    if (seg_len - p < 4 * CG_NSTATE)
        return mz_fail(MZ_E_FORMAT, "cachegen blob: segment %llu has no stream",
                       (unsigned long long)k);
    for (int j = 0; j < CG_NSTATE; j++) {
        uint32_t x = mz_get_le32(seg + p + 4 * j);
        if (x < CG_L)
            return mz_fail(MZ_E_FORMAT, "cachegen blob: segment %llu has a bad coder state",
                           (unsigned long long)k);
    }
    *off = p;
    return MZ_OK;
}

/* ---- decode ------------------------------------------------------------------------ */

/* Dequantizes nsym symbols (row-major, rows of G) into out, reading them from
 * sym, which may lie inside out's own bytes at or above out + nsym bytes:
 * every symbol is read before anything overwrites it. */
static void dequant_rows_ref(const uint8_t *seg_scales, unsigned nr, unsigned G, unsigned Q,
                             size_t nsym, const uint8_t *sym, mz_f16 *out)
{
    float mag[MZ_CG_LEVELS_MAX + 1];
    uint16_t bits[MZ_CG_LEVELS_MAX + 1];
    uint16_t lut[CG_ALPHA_MAX];
    for (unsigned i = 0; i < nr; i++) {
        row_levels(mz_get_le16(seg_scales + 2 * i), Q, mag, bits);
        lut[Q] = 0;
        for (unsigned q = 1; q <= Q; q++) {
            lut[Q + q] = bits[q];
            lut[Q - q] = bits[q] ? (uint16_t)(bits[q] | 0x8000u) : 0;
        }
        size_t t0 = (size_t)i * G, k = MZ_MIN((size_t)G, nsym - t0);
        for (size_t j = 0; j < k; j++) out[t0 + j] = lut[sym[t0 + j]];
    }
}

#if defined(MZ_CODEC_HAVE_AVX2_FILE)
/* AVX2 + F16C dequantization: the levels of a row computed 8 (and 16) at a
 * time with the same f32 arithmetic, converted by vcvtps2ph (RNE, identical
 * to mz_float_to_half), then a byte shuffle lookup of 16-bit codes. Same
 * bits as dequant_rows_ref (tested). */
__attribute__((target("avx2,fma,f16c"))) static void
dequant_rows_avx2(const uint8_t *seg_scales, unsigned nr, unsigned G, unsigned Q, size_t nsym,
                  const uint8_t *sym, mz_f16 *out)
{
    static const float iota[32] = {0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15,
                                   16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31};
    uint16_t lut[64] __attribute__((aligned(32)));
    uint16_t pos[32] __attribute__((aligned(32)));
    for (unsigned i = 0; i < nr; i++) {
        unsigned s_bits = mz_get_le16(seg_scales + 2 * i);
        float s = mz_half_to_float((uint16_t)s_bits);
        __m256 vs = _mm256_set1_ps(s), vstep = _mm256_set1_ps(cg_step(s, Q));
        for (unsigned q0 = 0; q0 <= Q; q0 += 8) {
            __m256 v = _mm256_mul_ps(_mm256_loadu_ps(iota + q0), vstep);
            v = _mm256_min_ps(v, vs); /* v > s ? s : v; v is never NaN */
            _mm_store_si128((__m128i *)(pos + q0), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
        }
        pos[Q] = (uint16_t)s_bits;
        lut[Q] = 0;
        for (unsigned q = 1; q <= Q; q++) {
            lut[Q + q] = pos[q];
            lut[Q - q] = pos[q] ? (uint16_t)(pos[q] | 0x8000u) : 0;
        }
        size_t t0 = (size_t)i * G, k = MZ_MIN((size_t)G, nsym - t0);
        const uint8_t *sp = sym + t0;
        mz_f16 *op = out + t0;
        size_t j = 0;
        if (2 * Q + 1 <= 32) {
            /* symbols < 32: low/high bytes of the 32 codes in two 32-byte
             * shuffle tables, indexed by sym & 15 within each 16-lane half */
            uint8_t lob[32], hib[32];
            for (unsigned q = 0; q < 32; q++) {
                uint16_t v = q < 2 * Q + 1 ? lut[q] : 0;
                lob[q] = (uint8_t)v;
                hib[q] = (uint8_t)(v >> 8);
            }
            __m256i lo_a = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)lob));
            __m256i lo_b = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(lob + 16)));
            __m256i hi_a = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)hib));
            __m256i hi_b = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(hib + 16)));
            const __m256i m15 = _mm256_set1_epi8(15), m16 = _mm256_set1_epi8(16);
            for (; j + 32 <= k; j += 32) {
                __m256i sv = _mm256_loadu_si256((const __m256i *)(sp + j));
                __m256i idx = _mm256_and_si256(sv, m15);
                __m256i upper = _mm256_cmpeq_epi8(_mm256_and_si256(sv, m16), m16);
                __m256i lo = _mm256_blendv_epi8(_mm256_shuffle_epi8(lo_a, idx),
                                                _mm256_shuffle_epi8(lo_b, idx), upper);
                __m256i hi = _mm256_blendv_epi8(_mm256_shuffle_epi8(hi_a, idx),
                                                _mm256_shuffle_epi8(hi_b, idx), upper);
                /* interleave bytes: unpack works per 128-bit lane, so fix the order */
                __m256i w0 = _mm256_unpacklo_epi8(lo, hi); /* values 0-7, 16-23 */
                __m256i w1 = _mm256_unpackhi_epi8(lo, hi); /* values 8-15, 24-31 */
                __m256i r0 = _mm256_permute2x128_si256(w0, w1, 0x20);
                __m256i r1 = _mm256_permute2x128_si256(w0, w1, 0x31);
                _mm256_storeu_si256((__m256i *)(op + j), r0);
                _mm256_storeu_si256((__m256i *)(op + j + 16), r1);
            }
        }
        for (; j < k; j++) op[j] = lut[sp[j]];
    }
}
#endif

static bool use_simd(void)
{
#if defined(MZ_CODEC_HAVE_AVX2_FILE)
    return !atomic_load_explicit(&g_force_scalar, memory_order_relaxed) && mz_codec_cpu_has_avx2();
#else
    return false;
#endif
}

const char *mz_cachegen_isa(void) { return use_simd() ? "avx2" : "scalar"; }

void mz_cachegen_force_scalar(bool on)
{
    atomic_store_explicit(&g_force_scalar, on ? 1 : 0, memory_order_relaxed);
}

/* One decoding step: returns the new state, the symbol (relative to the
 * table's lo) in *sym. 16-bit renormalisation, at most one word a step
 * (x >= L after it, since f·(x >> 12) >= 16). No bounds check: callers run
 * it only where 2 bytes a symbol are known to be left. */
static inline uint32_t rans_dec_fast(uint32_t x, const uint8_t *s2s, const uint16_t *freq,
                                     const uint16_t *cum, const uint8_t **pp, unsigned *sym)
{
    uint32_t slot = x & (CG_M - 1);
    unsigned s = s2s[slot];
    x = (uint32_t)freq[s] * (x >> CG_PROB_BITS) + slot - cum[s];
    const uint8_t *p = *pp;
    uint32_t r = x < CG_L;
    uint32_t w = mz_get_le16(p);
    /* Branch-free on purpose: a word comes in for about one symbol in four,
     * at random, and compilers turn the plain select into a branch whose
     * mispredictions cost more than the rest of the step (measured: decode
     * 1.4x faster without it). x86: one cmov; elsewhere a mask. */
    uint32_t xr = x << 16 | w;
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
    __asm__("cmpl %[lim], %[x]\n\tcmovb %[xr], %[x]"
            : [x] "+r"(x)
            : [xr] "r"(xr), [lim] "i"(CG_L)
            : "cc");
#else
    uint32_t m = 0u - r;
    x = (xr & m) | (x & ~m);
#endif
    *pp = p + 2 * r;
    *sym = s;
    return x;
}

/* The same with a bounds check; false when the stream ends too early. */
static inline bool rans_dec_checked(uint32_t *x, const uint8_t *s2s, const uint16_t *freq,
                                    const uint16_t *cum, const uint8_t **pp, const uint8_t *end,
                                    unsigned *sym)
{
    uint32_t slot = *x & (CG_M - 1);
    unsigned s = s2s[slot];
    uint32_t v = (uint32_t)freq[s] * (*x >> CG_PROB_BITS) + slot - cum[s];
    if (v < CG_L) {
        if (end - *pp < 2) return false;
        v = v << 16 | mz_get_le16(*pp);
        *pp += 2;
    }
    *x = v;
    *sym = s;
    return true;
}

/* Decodes one segment (already structurally checked; stream at seg + off)
 * into out (nsym values). */
static mz_status cg_decode_segment(const uint8_t *seg, size_t seg_len, size_t off, unsigned nr,
                                   size_t nsym, unsigned G, unsigned Q, unsigned glog,
                                   unsigned A, bool simd, mz_f16 *out, uint64_t k)
{
    uint8_t *symb = (uint8_t *)out + nsym; /* staging: the upper half of out's bytes */
    const uint8_t *p = seg + off, *end = seg + seg_len;
    uint32_t x[CG_NSTATE];
    for (int j = 0; j < CG_NSTATE; j++) x[j] = mz_get_le32(p + 4 * j);
    p += 4 * CG_NSTATE;
    const unsigned alpha = 2 * Q + 1;
    const unsigned nt = n_tables(G, glog);
    const size_t full_rows = nsym / G, last_len = nsym % G;
    uint8_t s2s[CG_M];
    size_t tp = 2 * (size_t)nr;
    size_t tidx = 0; /* symbol counter: state = tidx & 3 */
    for (unsigned g = 0; g < nt; g++) {
        cg_table t;
        tp += cg_table_parse(seg + tp, off - tp, Q, &t); /* checked before */
        for (unsigned s = 0; s <= t.hi - t.lo; s++) memset(s2s + t.cum[s], (int)s, t.freq[s]);
        unsigned j0 = g << glog, j1 = MZ_MIN(G, (g + 1) << glog);
        for (unsigned j = j0; j < j1; j++) {
            size_t rows = full_rows + (j < last_len ? 1 : 0);
            uint8_t *col = symb + j;
            size_t i = 0;
            unsigned sy;
            const uint8_t lo = (uint8_t)t.lo;
            if (!A) {
                /* four symbols per round, one per state, once the symbol
                 * counter is a multiple of 4 (it is at every column when the
                 * rows are a multiple of 4) */
                for (; i < rows && (tidx & 3); i++, tidx++) {
                    if (!rans_dec_checked(&x[tidx & 3], s2s, t.freq, t.cum, &p, end, &sy))
                        goto out_truncated;
                    col[i * G] = (uint8_t)(sy + lo);
                }
                if ((size_t)(end - p) >= 2 * rows + 2) {
                    /* enough bytes left for any outcome: no bounds checks */
                    uint32_t x0 = x[0], x1 = x[1], x2 = x[2], x3 = x[3];
                    unsigned s0, s1, s2, s3;
                    for (; i + 4 <= rows; i += 4, tidx += 4) {
                        x0 = rans_dec_fast(x0, s2s, t.freq, t.cum, &p, &s0);
                        x1 = rans_dec_fast(x1, s2s, t.freq, t.cum, &p, &s1);
                        x2 = rans_dec_fast(x2, s2s, t.freq, t.cum, &p, &s2);
                        x3 = rans_dec_fast(x3, s2s, t.freq, t.cum, &p, &s3);
                        col[i * G] = (uint8_t)(s0 + lo);
                        col[(i + 1) * G] = (uint8_t)(s1 + lo);
                        col[(i + 2) * G] = (uint8_t)(s2 + lo);
                        col[(i + 3) * G] = (uint8_t)(s3 + lo);
                    }
                    x[0] = x0;
                    x[1] = x1;
                    x[2] = x2;
                    x[3] = x3;
                }
                for (; i < rows; i++, tidx++) {
                    if (!rans_dec_checked(&x[tidx & 3], s2s, t.freq, t.cum, &p, end, &sy))
                        goto out_truncated;
                    col[i * G] = (uint8_t)(sy + lo);
                }
            } else {
                for (; i < rows; i++, tidx++) {
                    if (!rans_dec_checked(&x[tidx & 3], s2s, t.freq, t.cum, &p, end, &sy))
                        goto out_truncated;
                    unsigned v = sy + lo;
                    if (i % A) {
                        v += col[(i - i % A) * G];
                        if (v >= alpha) v -= alpha;
                    }
                    col[i * G] = (uint8_t)v;
                }
            }
        }
    }
    if (p != end || x[0] != CG_L || x[1] != CG_L || x[2] != CG_L || x[3] != CG_L)
        return mz_fail(MZ_E_FORMAT, "cachegen blob: segment %llu stream is corrupt",
                       (unsigned long long)k);
#if defined(MZ_CODEC_HAVE_AVX2_FILE)
    if (simd) {
        dequant_rows_avx2(seg, nr, G, Q, nsym, symb, out);
        return MZ_OK;
    }
#endif
    (void)simd;
    dequant_rows_ref(seg, nr, G, Q, nsym, symb, out);
    return MZ_OK;
out_truncated:
    return mz_fail(MZ_E_FORMAT, "cachegen blob: segment %llu stream is truncated",
                   (unsigned long long)k);
}

/* ---- paired decode: two segments of one shape in lockstep ----------------------------
 *
 * One segment's four states form one dependency chain through the stream
 * pointer (every step's renormalisation moves it), so a single segment keeps
 * a core waiting on load and multiply latencies. Two segments with the same
 * shape (every K head, every V head of a chunk) have the same tables at the
 * same symbol positions, so their steps can alternate: eight states, two
 * independent pointer chains, the same bytes out as decoding them one after
 * the other (tested against mz_cachegen_decode_ref, which never pairs). */

typedef struct cg_lane {
    const uint8_t *seg, *p, *end;
    size_t off, tp;             /* stream offset; next table */
    uint32_t x[CG_NSTATE];
    uint8_t *symb;              /* symbol staging (upper half of the lane's output) */
    cg_table t;
    uint8_t s2s[CG_M];
} cg_lane;

static void lane_init(cg_lane *ln, const uint8_t *seg, size_t seg_len, size_t off, unsigned nr,
                      size_t nsym, mz_f16 *out)
{
    ln->seg = seg;
    ln->off = off;
    ln->tp = 2 * (size_t)nr;
    ln->p = seg + off;
    ln->end = seg + seg_len;
    for (int j = 0; j < CG_NSTATE; j++) ln->x[j] = mz_get_le32(ln->p + 4 * j);
    ln->p += 4 * CG_NSTATE;
    ln->symb = (uint8_t *)out + nsym;
}

static void lane_table(cg_lane *ln, unsigned Q)
{
    ln->tp += cg_table_parse(ln->seg + ln->tp, ln->off - ln->tp, Q, &ln->t); /* checked before */
    for (unsigned s = 0; s <= ln->t.hi - ln->t.lo; s++)
        memset(ln->s2s + ln->t.cum[s], (int)s, ln->t.freq[s]);
}

/* Rows [i0, i1) of one column with bounds checks; row i uses state
 * (tidx0 + i - i0) & 3. */
static bool lane_col_checked(cg_lane *ln, size_t i0, size_t i1, size_t tidx0, unsigned G,
                             uint8_t *col)
{
    const uint8_t lo = (uint8_t)ln->t.lo;
    for (size_t i = i0; i < i1; i++) {
        unsigned sy;
        if (!rans_dec_checked(&ln->x[(tidx0 + i - i0) & 3], ln->s2s, ln->t.freq, ln->t.cum,
                              &ln->p, ln->end, &sy))
            return false;
        col[i * G] = (uint8_t)(sy + lo);
    }
    return true;
}

/* Rows [0, 4 * rounds) of one column of both lanes, no bounds checks (both
 * have 2 bytes a symbol left); the symbol counter is a multiple of 4. */
static void lanes_col_fast2(cg_lane *a, cg_lane *b, size_t rounds, unsigned G, uint8_t *ca,
                            uint8_t *cb)
{
    uint32_t a0 = a->x[0], a1 = a->x[1], a2 = a->x[2], a3 = a->x[3];
    uint32_t b0 = b->x[0], b1 = b->x[1], b2 = b->x[2], b3 = b->x[3];
    const uint8_t *pa = a->p, *pb = b->p;
    const uint8_t *sa = a->s2s, *sb = b->s2s;
    const uint16_t *fa = a->t.freq, *fb = b->t.freq, *ua = a->t.cum, *ub = b->t.cum;
    const uint8_t la = (uint8_t)a->t.lo, lb = (uint8_t)b->t.lo;
    const size_t G2 = 2 * (size_t)G, G3 = 3 * (size_t)G, G4 = 4 * (size_t)G;
    for (size_t r = 0; r < rounds; r++, ca += G4, cb += G4) {
        unsigned s0, s1, s2, s3, t0, t1, t2, t3; /* alternate: two independent chains */
        a0 = rans_dec_fast(a0, sa, fa, ua, &pa, &s0);
        b0 = rans_dec_fast(b0, sb, fb, ub, &pb, &t0);
        a1 = rans_dec_fast(a1, sa, fa, ua, &pa, &s1);
        b1 = rans_dec_fast(b1, sb, fb, ub, &pb, &t1);
        a2 = rans_dec_fast(a2, sa, fa, ua, &pa, &s2);
        b2 = rans_dec_fast(b2, sb, fb, ub, &pb, &t2);
        a3 = rans_dec_fast(a3, sa, fa, ua, &pa, &s3);
        b3 = rans_dec_fast(b3, sb, fb, ub, &pb, &t3);
        ca[0] = (uint8_t)(s0 + la);
        ca[G] = (uint8_t)(s1 + la);
        ca[G2] = (uint8_t)(s2 + la);
        ca[G3] = (uint8_t)(s3 + la);
        cb[0] = (uint8_t)(t0 + lb);
        cb[G] = (uint8_t)(t1 + lb);
        cb[G2] = (uint8_t)(t2 + lb);
        cb[G3] = (uint8_t)(t3 + lb);
    }
    a->x[0] = a0, a->x[1] = a1, a->x[2] = a2, a->x[3] = a3;
    b->x[0] = b0, b->x[1] = b1, b->x[2] = b2, b->x[3] = b3;
    a->p = pa;
    b->p = pb;
}

static mz_status lane_finish(const cg_lane *ln, uint64_t k)
{
    if (ln->p != ln->end || ln->x[0] != CG_L || ln->x[1] != CG_L || ln->x[2] != CG_L ||
        ln->x[3] != CG_L)
        return mz_fail(MZ_E_FORMAT, "cachegen blob: segment %llu stream is corrupt",
                       (unsigned long long)k);
    return MZ_OK;
}

/* Two lanes: three were measured no faster (twelve states no longer fit the
 * registers; the spills lengthen every chain). */
#define CG_LANES_MAX 2

/* Decodes segments k .. k+n-1 (n = 2; all structurally checked, same
 * shape, no anchor step; segment i at seg[i], seg_len[i], stream at off[i])
 * into out[i]. */
static mz_status cg_decode_lanes(unsigned n, const uint8_t *const *seg, const size_t *seg_len,
                                 const size_t *off, unsigned nr, size_t nsym, unsigned G,
                                 unsigned Q, unsigned glog, bool simd, mz_f16 *const *out,
                                 uint64_t k)
{
    cg_lane ln[CG_LANES_MAX];
    MZ_ASSERT(n >= 2 && n <= CG_LANES_MAX);
    for (unsigned i = 0; i < n; i++) lane_init(&ln[i], seg[i], seg_len[i], off[i], nr, nsym, out[i]);
    const unsigned nt = n_tables(G, glog);
    const size_t full_rows = nsym / G, last_len = nsym % G;
    size_t tidx = 0;
    unsigned bad = 0;
    for (unsigned g = 0; g < nt; g++) {
        for (unsigned i = 0; i < n; i++) lane_table(&ln[i], Q);
        unsigned j0 = g << glog, j1 = MZ_MIN(G, (g + 1) << glog);
        for (unsigned j = j0; j < j1; j++) {
            size_t rows = full_rows + (j < last_len ? 1 : 0);
            size_t head = MZ_MIN(rows, (4 - (tidx & 3)) & 3), i = head;
            for (bad = 0; bad < n; bad++)
                if (!lane_col_checked(&ln[bad], 0, head, tidx, G, ln[bad].symb + j))
                    goto out_truncated;
            size_t rounds = (rows - i) / 4;
            bool room = rounds > 0;
            for (unsigned l = 0; l < n; l++)
                room = room && (size_t)(ln[l].end - ln[l].p) >= 2 * rows + 2;
            if (room) {
                size_t o = i * G + j;
                lanes_col_fast2(&ln[0], &ln[1], rounds, G, ln[0].symb + o, ln[1].symb + o);
                i += 4 * rounds;
            }
            for (bad = 0; bad < n; bad++)
                if (!lane_col_checked(&ln[bad], i, rows, tidx + i, G, ln[bad].symb + j))
                    goto out_truncated;
            tidx += rows;
        }
    }
    for (unsigned i = 0; i < n; i++) {
        mz_status st = lane_finish(&ln[i], k + i);
        if (st != MZ_OK) return st;
    }
    for (unsigned i = 0; i < n; i++) {
#if defined(MZ_CODEC_HAVE_AVX2_FILE)
        if (simd) {
            dequant_rows_avx2(seg[i], nr, G, Q, nsym, ln[i].symb, out[i]);
            continue;
        }
#endif
        dequant_rows_ref(seg[i], nr, G, Q, nsym, ln[i].symb, out[i]);
    }
    (void)simd;
    return MZ_OK;
out_truncated:
    return mz_fail(MZ_E_FORMAT, "cachegen blob: segment %llu stream is truncated",
                   (unsigned long long)(k + bad));
}

/* pair: decode same-shaped segments two at a time (any ISA; off in the
 * reference decode); simd: AVX2 dequantization. */
static mz_status cg_walk(const uint8_t *src, size_t len, mz_f16 *dst, size_t n_want, bool decode,
                         bool simd, bool pair, size_t *n_out)
{
    cg_layout lo = {0};
    mz_status st = cg_parse_layout(src, len, &lo);
    if (st != MZ_OK) return st;
    if (decode && lo.n != n_want)
        return mz_fail(MZ_E_FORMAT, "cachegen blob: holds %llu values, caller expects %zu",
                       (unsigned long long)lo.n, n_want);
    if (lo.n > SIZE_MAX / 2)
        return mz_fail(MZ_E_FORMAT, "cachegen blob: %llu values is too many",
                       (unsigned long long)lo.n);
    const uint8_t *dir = src + CG_PREFIX;
    const uint8_t *seg = dir + 4 * lo.n_seg;
    size_t v0 = 0;
    for (uint64_t k = 0; k < lo.n_seg; k++) {
        size_t seg_len = mz_get_le32(dir + 4 * k), nsym, off = 0;
        unsigned nr, Q, glog;
        seg_shape(&lo, k, &nsym, &nr, &Q, &glog);
        st = cg_check_segment(seg, seg_len, nr, lo.G, Q, glog, k, &off);
        if (st != MZ_OK) return st;
        if (decode && pair && !lo.A && k + 1 < lo.n_seg) {
            /* decode it together with the next segment when that has the
             * same shape */
            const uint8_t *sg[CG_LANES_MAX] = {seg};
            size_t sl[CG_LANES_MAX] = {seg_len}, so[CG_LANES_MAX] = {off};
            mz_f16 *so_out[CG_LANES_MAX] = {dst + v0};
            unsigned nl = 1;
            const uint8_t *next = seg + seg_len;
            while (nl < CG_LANES_MAX && k + nl < lo.n_seg) {
                size_t l2 = mz_get_le32(dir + 4 * (k + nl)), nsym2, off2 = 0;
                unsigned nr2, Q2, glog2;
                seg_shape(&lo, k + nl, &nsym2, &nr2, &Q2, &glog2);
                if (nsym2 != nsym || nr2 != nr || Q2 != Q || glog2 != glog) break;
                st = cg_check_segment(next, l2, nr, lo.G, Q, glog, k + nl, &off2);
                if (st != MZ_OK) return st;
                sg[nl] = next;
                sl[nl] = l2;
                so[nl] = off2;
                so_out[nl] = dst + v0 + nl * nsym;
                next += l2;
                nl++;
            }
            if (nl >= 2) {
                st = cg_decode_lanes(nl, sg, sl, so, nr, nsym, lo.G, Q, glog, simd, so_out, k);
                if (st != MZ_OK) return st;
                seg = next;
                v0 += nl * nsym;
                k += nl - 1;
                continue;
            }
        }
        if (decode) {
            st = cg_decode_segment(seg, seg_len, off, nr, nsym, lo.G, Q, glog, lo.A, simd,
                                   dst + v0, k);
            if (st != MZ_OK) return st;
        }
        seg += seg_len;
        v0 += nsym;
    }
    if (n_out) *n_out = (size_t)lo.n;
    return MZ_OK;
}

static mz_status cg_peek(const mz_codec *c, const uint8_t *src, size_t len, size_t *n_values)
{
    return cg_walk(src, len, NULL, 0, false, false, false, n_values);
}

static mz_status cg_decode(const mz_codec *c, const uint8_t *src, size_t len, mz_f16 *dst,
                           size_t n)
{
    bool scalar = atomic_load_explicit(&g_force_scalar, memory_order_relaxed) != 0;
    return cg_walk(src, len, dst, n, true, use_simd(), !scalar, NULL);
}

mz_status mz_cachegen_decode_ref(const uint8_t *src, size_t len, mz_f16 *dst, size_t n)
{
    return cg_walk(src, len, dst, n, true, false, false, NULL);
}

/* ---- encode ------------------------------------------------------------------------ */

/* Instance parameters packed in mz_codec.param:
 *   bits 0-10 G, 11-15 Qk, 16-20 Qv, 21-23 gk, 24-26 gv, 27-29 log2 anchor (0 = off),
 *   bit 30 the layer schedule (mz_cachegen_for_layer; no effect on the format). */
#define CG_SCHEDULE_BIT (1u << 30)
static unsigned pack_params(const mz_cachegen_params *p)
{
    unsigned alog = 0;
    if (p->anchor)
        while ((1u << alog) < p->anchor) alog++;
    return p->row | p->levels_k << 11 | p->levels_v << 16 | p->k_chans_log2 << 21 |
           p->v_chans_log2 << 24 | alog << 27;
}

mz_cachegen_params mz_cachegen_params_of(const mz_codec *c)
{
    unsigned v = c->param, alog = (v >> 27) & 7u;
    mz_cachegen_params p = {.row = v & 0x7ffu,
                            .levels_k = (v >> 11) & 31u,
                            .levels_v = (v >> 16) & 31u,
                            .k_chans_log2 = (v >> 21) & 7u,
                            .v_chans_log2 = (v >> 24) & 7u,
                            .anchor = alog ? 1u << alog : 0};
    return p;
}

static bool params_ok(const mz_cachegen_params *p)
{
    bool anchor_ok = p->anchor == 0 || (p->anchor >= 2 && p->anchor <= 128 &&
                                        (p->anchor & (p->anchor - 1)) == 0);
    return p->row >= 1 && p->row <= MZ_CG_ROW_MAX && p->levels_k >= 1 &&
           p->levels_k <= MZ_CG_LEVELS_MAX && p->levels_v >= 1 &&
           p->levels_v <= MZ_CG_LEVELS_MAX && p->k_chans_log2 <= 7 && p->v_chans_log2 <= 7 &&
           anchor_ok;
}

static bool enc_layout(const mz_cachegen_params *p, size_t n, cg_layout *lo)
{
    if ((uint64_t)n > ((uint64_t)1 << 40)) return false;
    lo->G = p->row;
    lo->S = MZ_CG_SEG_ROWS;
    lo->Qk = p->levels_k;
    lo->Qv = p->levels_v;
    lo->gk = p->k_chans_log2;
    lo->gv = p->v_chans_log2;
    lo->A = p->anchor;
    lo->n = n;
    layout_counts(lo);
    return true;
}

/* Worst case of one segment's bytes: scales, full tables, states, 2 bytes a
 * symbol (a step emits at most one 16-bit word). */
static size_t seg_bound(unsigned nr, size_t nsym, unsigned nt)
{
    return 2 * (size_t)nr + (size_t)nt * CG_TABLE_MAX_BYTES + 4 * CG_NSTATE + 2 * nsym;
}

static size_t cg_bound(const mz_codec *c, size_t n)
{
    mz_cachegen_params p = mz_cachegen_params_of(c);
    cg_layout lo = {0};
    if (!params_ok(&p) || !enc_layout(&p, n, &lo)) return 0;
    size_t total = CG_PREFIX + 4 * (size_t)lo.n_seg;
    size_t max_nsym = 0;
    for (uint64_t k = 0; k < lo.n_seg; k++) {
        size_t nsym;
        unsigned nr, Q, glog;
        seg_shape(&lo, k, &nsym, &nr, &Q, &glog);
        total += seg_bound(nr, nsym, n_tables(lo.G, glog));
        if (nsym > max_nsym) max_nsym = nsym;
    }
    return total + max_nsym; /* + symbol staging for one segment */
}

/* Encodes one segment of nsym values (nr rows) at out; symbols are staged at
 * stage (nsym bytes, beyond the segment's worst case). Returns the length. */
static size_t cg_encode_segment(const mz_f16 *x, size_t nsym, unsigned nr, unsigned G,
                                unsigned Q, unsigned glog, unsigned A, uint8_t *out,
                                uint8_t *stage)
{
    const unsigned alpha = 2 * Q + 1;
    const unsigned nt = n_tables(G, glog);
    float mag[MZ_CG_LEVELS_MAX + 1];
    uint16_t bits[MZ_CG_LEVELS_MAX + 1];
    /* scales and symbols, row by row */
    for (unsigned i = 0; i < nr; i++) {
        size_t t0 = (size_t)i * G, k = MZ_MIN((size_t)G, nsym - t0);
        unsigned s = 0;
        for (size_t j = 0; j < k; j++) {
            unsigned a = x[t0 + j] & 0x7fffu; /* finite: bit order = value order */
            if (a > s) s = a;
        }
        mz_put_le16(out + 2 * (size_t)i, s);
        row_levels(s, Q, mag, bits);
        float step = cg_step(mag[Q], Q);
        float inv = step > 0.0f ? 1.0f / step : 0.0f;
        uint8_t *sy = stage + t0;
        for (size_t j = 0; j < k; j++) {
            mz_f16 v = x[t0 + j];
            unsigned c = code_mag(mag, Q, inv, mz_half_to_float((uint16_t)(v & 0x7fffu)));
            sy[j] = (uint8_t)((v & 0x8000u) && c ? Q - c : Q + c);
        }
    }
    if (A) {
        /* anchor step: later rows of each group code the difference (mod
         * alpha) from the group's first row; go backwards so anchors stay raw */
        for (unsigned i = nr; i-- > 0;) {
            if (i % A == 0) continue;
            size_t t0 = (size_t)i * G, k = MZ_MIN((size_t)G, nsym - t0);
            const uint8_t *an = stage + (size_t)(i - i % A) * G;
            for (size_t j = 0; j < k; j++) {
                unsigned v = stage[t0 + j] + alpha - an[j];
                stage[t0 + j] = (uint8_t)(v >= alpha ? v - alpha : v);
            }
        }
    }
    /* tables, one per channel group */
    const size_t full_rows = nsym / G, last_len = nsym % G;
    size_t tp = 2 * (size_t)nr;
    uint32_t toff[MZ_CG_ROW_MAX];
    for (unsigned g = 0; g < nt; g++) {
        uint32_t hist[CG_ALPHA_MAX] = {0};
        unsigned j0 = g << glog, j1 = MZ_MIN(G, (g + 1) << glog);
        for (unsigned j = j0; j < j1; j++) {
            size_t rows = full_rows + (j < last_len ? 1 : 0);
            for (size_t i = 0; i < rows; i++) hist[stage[i * G + j]]++;
        }
        cg_table t;
        toff[g] = (uint32_t)tp;
        tp += cg_table_write(out + tp, hist, Q, &t);
    }
    /* rANS, backwards over the symbols, bytes written down from the top of
     * the segment's worst case, then moved into place */
    uint8_t *top = out + tp + 4 * CG_NSTATE + 2 * nsym, *p = top;
    uint32_t xs[CG_NSTATE] = {CG_L, CG_L, CG_L, CG_L};
    size_t tidx = nsym;
    for (unsigned g = nt; g-- > 0;) {
        cg_table t;
        (void)cg_table_parse(out + toff[g], CG_TABLE_MAX_BYTES, Q, &t);
        unsigned j0 = g << glog, j1 = MZ_MIN(G, (g + 1) << glog);
        for (unsigned j = j1; j-- > j0;) {
            size_t rows = full_rows + (j < last_len ? 1 : 0);
            for (size_t i = rows; i-- > 0;) {
                unsigned s = stage[i * G + j] - t.lo;
                uint32_t *xp = &xs[--tidx & 3];
                uint32_t f = t.freq[s], xv = *xp;
                if ((uint64_t)xv >= (uint64_t)f << (32 - CG_PROB_BITS)) { /* one word at most */
                    p -= 2;
                    mz_put_le16(p, xv & 0xffffu);
                    xv >>= 16;
                }
                *xp = ((xv / f) << CG_PROB_BITS) + (xv % f) + t.cum[s];
            }
        }
    }
    MZ_ASSERT(tidx == 0);
    for (int j = CG_NSTATE; j-- > 0;) {
        p -= 4;
        mz_put_le32(p, xs[j]);
    }
    MZ_ASSERT(p >= out + tp);
    size_t slen = (size_t)(top - p);
    memmove(out + tp, p, slen);
    return tp + slen;
}

static mz_status cg_encode(const mz_codec *c, const mz_f16 *src, size_t n, uint8_t *dst,
                           size_t dst_cap, size_t *n_written)
{
    mz_cachegen_params prm = mz_cachegen_params_of(c);
    size_t need = cg_bound(c, n);
    *n_written = 0;
    MZ_ASSERT(params_ok(&prm));
    if (need == 0) return mz_fail(MZ_E_RANGE, "cachegen encode: %zu values is too many", n);
    if (dst_cap < need)
        return mz_fail(MZ_E_RANGE, "cachegen encode: need %zu bytes, have %zu", need, dst_cap);
    for (size_t i = 0; i < n; i++)
        if ((src[i] & 0x7c00u) == 0x7c00u)
            return mz_fail(MZ_E_FORMAT, "cachegen encode: value %zu is %s (0x%04x); use the "
                           "raw codec", i, (src[i] & 0x3ffu) ? "NaN" : "infinite", src[i]);
    cg_layout lo = {0};
    enc_layout(&prm, n, &lo);
    mz_codec_header_write(dst, CG_MAGIC, 0, n);
    uint8_t *h = dst + MZ_CODEC_HEADER_BYTES;
    mz_put_le16(h, lo.G);
    mz_put_le16(h + 2, lo.S);
    h[4] = (uint8_t)lo.Qk;
    h[5] = (uint8_t)lo.Qv;
    h[6] = (uint8_t)lo.gk;
    h[7] = (uint8_t)lo.gv;
    h[8] = (uint8_t)lo.A;
    h[9] = 0;
    mz_put_le16(h + 10, 0);
    uint8_t *dir = dst + CG_PREFIX, *pos = dir + 4 * lo.n_seg;
    size_t v0 = 0;
    for (uint64_t k = 0; k < lo.n_seg; k++) {
        size_t nsym;
        unsigned nr, Q, glog;
        seg_shape(&lo, k, &nsym, &nr, &Q, &glog);
        size_t len = cg_encode_segment(src + v0, nsym, nr, lo.G, Q, glog, lo.A, pos,
                                       dst + need - nsym);
        mz_put_le32(dir + 4 * k, (uint32_t)len);
        pos += len;
        v0 += nsym;
    }
    *n_written = (size_t)(pos - dst);
    return MZ_OK;
}

/* ---- parameters and vtables --------------------------------------------------------- */

mz_cachegen_params mz_cachegen_params_default(unsigned head_dim)
{
    mz_cachegen_params p = {.row = head_dim, .levels_k = 15, .levels_v = 15,
                            .k_chans_log2 = 0, .v_chans_log2 = 3, .anchor = 0};
    return p;
}

mz_cachegen_params mz_cachegen_params_layer(unsigned head_dim, unsigned layer, unsigned n_layer)
{
    mz_cachegen_params p = mz_cachegen_params_default(head_dim);
    if (3 * layer >= n_layer) p.levels_k = p.levels_v = 7;
    return p;
}

#define CG_VT(nm, prm)                                                                    \
    {                                                                                     \
        .name = nm, .param = (prm), .bound = cg_bound, .encode = cg_encode,               \
        .decode = cg_decode, .peek = cg_peek                                              \
    }

/* G 64 (bits 0-10), Q (bits 11-15, 16-20), gk 0, gv 3 (bits 24-26), anchor log2 (27-29) */
#define CG_PARAM(G, QK, QV, GK, GV, ALOG)                                                 \
    ((unsigned)(G) | (unsigned)(QK) << 11 | (unsigned)(QV) << 16 | (unsigned)(GK) << 21 | \
     (unsigned)(GV) << 24 | (unsigned)(ALOG) << 27)

const mz_codec mz_codec_cachegen_vt = CG_VT("cachegen", CG_PARAM(64, 15, 15, 0, 3, 0));
const mz_codec mz_codec_cachegen_q7_vt = CG_VT("cachegen-q7", CG_PARAM(64, 7, 7, 0, 3, 0));
const mz_codec mz_codec_cachegen_anchor_vt = CG_VT("cachegen-anchor", CG_PARAM(64, 15, 15, 0, 3, 3));
const mz_codec mz_codec_cachegen_layer_vt =
    CG_VT("cachegen-layer", CG_PARAM(64, 15, 15, 0, 3, 0) | CG_SCHEDULE_BIT);

bool mz_codec_is_cachegen(const mz_codec *c) { return c && c->encode == cg_encode; }

bool mz_cachegen_has_schedule(const mz_codec *c)
{
    return mz_codec_is_cachegen(c) && (c->param & CG_SCHEDULE_BIT);
}

mz_codec mz_cachegen_for_layer(const mz_codec *c, unsigned head_dim, unsigned layer,
                               unsigned n_layer)
{
    MZ_ASSERT(mz_codec_is_cachegen(c));
    mz_cachegen_params p = mz_cachegen_params_of(c);
    if (head_dim >= 1 && head_dim <= MZ_CG_ROW_MAX) p.row = head_dim;
    if (mz_cachegen_has_schedule(c) && 3 * (uint64_t)layer >= n_layer) {
        /* the schedule of mz_cachegen_params_layer(), from c's own levels */
        p.levels_k = MZ_MIN(p.levels_k, 7u);
        p.levels_v = MZ_MIN(p.levels_v, 7u);
    }
    mz_codec out = *c;
    out.param = pack_params(&p); /* the schedule bit is not carried over: this is one layer's */
    return out;
}

/* Bits per value of the measured Q = 7, 15, 31 blobs on SmolLM2 KV (scales,
 * tables and stream; docs/CODECS.md: ratios 5.48, 4.00, 3.12) follow
 * log2(2Q+1) - 0.95 within 0.1 bit. The schedule is averaged over layers. */
static double bits_per_value(unsigned Q)
{
    double b = log2(2.0 * Q + 1.0) - 0.95;
    return b > 0.25 ? b : 0.25;
}

double mz_cachegen_ratio_hint(const mz_codec *c)
{
    mz_cachegen_params p = mz_cachegen_params_of(c);
    double bits = (bits_per_value(p.levels_k) + bits_per_value(p.levels_v)) / 2;
    if (mz_cachegen_has_schedule(c)) {
        /* one third at c's levels, two thirds at min(Q, 7) */
        double late = (bits_per_value(MZ_MIN(p.levels_k, 7u)) + bits_per_value(MZ_MIN(p.levels_v, 7u))) / 2;
        bits = bits / 3 + 2 * late / 3;
    }
    if (p.anchor) bits *= 4.00 / 3.39; /* measured: the anchor step costs 18 % */
    return bits / 16.0;
}

mz_codec mz_codec_cachegen(const mz_cachegen_params *p)
{
    MZ_ASSERT(params_ok(p));
    mz_codec c = CG_VT("cachegen", pack_params(p));
    return c;
}
