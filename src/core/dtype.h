/*
 * dtype.h — tensor element types, numbered as GGUF/ggml number them.
 *
 * Block layouts (ggml spec): a row of ne0 values is split into blocks of
 * mz_dtype_block_len() values stored in mz_dtype_block_bytes() bytes.
 *   F32   1 value  / 4 bytes
 *   F16   1 value  / 2 bytes (IEEE half)
 *   BF16  1 value  / 2 bytes (upper half of an F32)
 *   Q8_0  32 values / 34 bytes: f16 d; int8 q[32];           x = d*q
 *   Q4_0  32 values / 18 bytes: f16 d; uint8 qs[16];         x = d*(nib-8)
 *         value j (j<16) is the low nibble of qs[j], value j+16 the high nibble
 *   Q4_1  32 values / 20 bytes: f16 d; f16 m; uint8 qs[16];  x = d*nib + m
 *   Q8_1  32 values / 36 bytes: f16 d; f16 s (= d*sum q); int8 q[32]
 *         (activation-side type only, never in a file we load)
 *   Q5_0  32 values / 22 bytes: f16 d; uint8 qh[4]; uint8 qs[16]; x = d*(q-16),
 *         q = nibble | (bit j of qh as little-endian u32) << 4
 *   Q5_1  32 values / 24 bytes: f16 d; f16 m; qh[4]; qs[16];    x = d*q + m
 *   IQ4_NL 32 values / 18 bytes: f16 d; uint8 qs[16]; x = d*kvalues_iq4nl[nib]
 * Super-blocks of MZ_QK_K = 256 values (the "K-quants"; ggml's layouts):
 *   Q2_K  84 bytes: scales[16] (4-bit scale | 4-bit min per 16 values), qs[64]
 *         (2 bits), f16 d, f16 dmin
 *   Q3_K  110 bytes: hmask[32] (high bit), qs[64] (low 2 bits), scales[12]
 *         (sixteen 6-bit scales), f16 d
 *   Q4_K  144 bytes: f16 d, f16 dmin, scales[12] (eight 6-bit scales and mins
 *         per 32 values), qs[128]
 *   Q5_K  176 bytes: as Q4_K plus qh[32] (fifth bit)
 *   Q6_K  210 bytes: ql[128] (low 4 bits), qh[64] (high 2 bits), int8
 *         scales[16], f16 d
 *   IQ4_XS 136 bytes: f16 d, uint16 scales_h, uint8 scales_l[4], qs[128]
 *         (eight 6-bit scales, values from kvalues_iq4nl)
 *   Q8_K  292 bytes: float d; int8 qs[256]; int16 bsums[16] (sum of each
 *         16 q): the activation type of the K-quants and IQ4_XS, never in a
 *         file we load
 */
#ifndef MZ_DTYPE_H
#define MZ_DTYPE_H

#include <stddef.h>
#include <stdint.h>

typedef enum mz_dtype {
    MZ_DT_F32 = 0,
    MZ_DT_F16 = 1,
    MZ_DT_Q4_0 = 2,
    MZ_DT_Q4_1 = 3,
    MZ_DT_Q5_0 = 6,
    MZ_DT_Q5_1 = 7,
    MZ_DT_Q8_0 = 8,
    MZ_DT_Q8_1 = 9,
    MZ_DT_Q2_K = 10,
    MZ_DT_Q3_K = 11,
    MZ_DT_Q4_K = 12,
    MZ_DT_Q5_K = 13,
    MZ_DT_Q6_K = 14,
    MZ_DT_Q8_K = 15,
    MZ_DT_IQ4_NL = 20,
    MZ_DT_IQ4_XS = 23,
    MZ_DT_BF16 = 30,
    MZ_DT_COUNT = 40, /* one past the largest ggml type id we know of */
} mz_dtype;

#define MZ_QK 32          /* values per quantized block */
#define MZ_QK_K 256       /* values per K-quant super-block */
#define MZ_K_SCALE_SIZE 12 /* bytes of packed 6-bit scales and mins (Q3_K..Q5_K) */

typedef uint16_t mz_f16;  /* IEEE binary16 bits */
typedef uint16_t mz_bf16; /* bfloat16 bits */

typedef struct { mz_f16 d; int8_t qs[MZ_QK]; } mz_block_q8_0;
typedef struct { mz_f16 d; uint8_t qs[MZ_QK / 2]; } mz_block_q4_0;
typedef struct { mz_f16 d; mz_f16 m; uint8_t qs[MZ_QK / 2]; } mz_block_q4_1;
typedef struct { mz_f16 d; mz_f16 s; int8_t qs[MZ_QK]; } mz_block_q8_1;

typedef struct { mz_f16 d; uint8_t qh[4]; uint8_t qs[MZ_QK / 2]; } mz_block_q5_0;
typedef struct { mz_f16 d; mz_f16 m; uint8_t qh[4]; uint8_t qs[MZ_QK / 2]; } mz_block_q5_1;
typedef struct { mz_f16 d; uint8_t qs[MZ_QK / 2]; } mz_block_iq4_nl;
typedef struct {
    uint8_t scales[MZ_QK_K / 16];
    uint8_t qs[MZ_QK_K / 4];
    mz_f16 d;
    mz_f16 dmin;
} mz_block_q2_K;
typedef struct {
    uint8_t hmask[MZ_QK_K / 8];
    uint8_t qs[MZ_QK_K / 4];
    uint8_t scales[MZ_K_SCALE_SIZE];
    mz_f16 d;
} mz_block_q3_K;
typedef struct {
    mz_f16 d;
    mz_f16 dmin;
    uint8_t scales[MZ_K_SCALE_SIZE];
    uint8_t qs[MZ_QK_K / 2];
} mz_block_q4_K;
typedef struct {
    mz_f16 d;
    mz_f16 dmin;
    uint8_t scales[MZ_K_SCALE_SIZE];
    uint8_t qh[MZ_QK_K / 8];
    uint8_t qs[MZ_QK_K / 2];
} mz_block_q5_K;
typedef struct {
    uint8_t ql[MZ_QK_K / 2];
    uint8_t qh[MZ_QK_K / 4];
    int8_t scales[MZ_QK_K / 16];
    mz_f16 d;
} mz_block_q6_K;
typedef struct {
    mz_f16 d;
    uint16_t scales_h;
    uint8_t scales_l[MZ_QK_K / 64];
    uint8_t qs[MZ_QK_K / 2];
} mz_block_iq4_xs;
typedef struct {
    float d;
    int8_t qs[MZ_QK_K];
    int16_t bsums[MZ_QK_K / 16];
} mz_block_q8_K;

_Static_assert(sizeof(mz_block_q8_0) == 34, "q8_0 layout");
_Static_assert(sizeof(mz_block_q5_0) == 22, "q5_0 layout");
_Static_assert(sizeof(mz_block_q5_1) == 24, "q5_1 layout");
_Static_assert(sizeof(mz_block_iq4_nl) == 18, "iq4_nl layout");
_Static_assert(sizeof(mz_block_q2_K) == 84, "q2_K layout");
_Static_assert(sizeof(mz_block_q3_K) == 110, "q3_K layout");
_Static_assert(sizeof(mz_block_q4_K) == 144, "q4_K layout");
_Static_assert(sizeof(mz_block_q5_K) == 176, "q5_K layout");
_Static_assert(sizeof(mz_block_q6_K) == 210, "q6_K layout");
_Static_assert(sizeof(mz_block_iq4_xs) == 136, "iq4_xs layout");
_Static_assert(sizeof(mz_block_q8_K) == 292, "q8_K layout");
_Static_assert(sizeof(mz_block_q4_0) == 18, "q4_0 layout");
_Static_assert(sizeof(mz_block_q4_1) == 20, "q4_1 layout");
_Static_assert(sizeof(mz_block_q8_1) == 36, "q8_1 layout");

/* Name like "Q4_1", or NULL for a type id we do not know. */
const char *mz_dtype_name(int type);
/* True for the weight types this engine loads and computes with (the
 * activation-only types Q8_1 and Q8_K are not among them). */
int mz_dtype_supported(int type);
/* The names of the supported weight types, space-separated, for errors that
 * list what loads ("F32 F16 ..."); a static string. */
const char *mz_dtype_supported_names(void);
/* Values per block and bytes per block; 0 for unknown types. */
size_t mz_dtype_block_len(int type);
size_t mz_dtype_block_bytes(int type);
/* Bytes of a row of n values; 0 if n is not a multiple of the block length or
 * the type is unknown. */
size_t mz_dtype_row_bytes(int type, uint64_t n);
/* Known ggml type ids that we cannot compute with (Q5_0, K-quants…): named in
 * errors as "unsupported" rather than "unknown". */
int mz_dtype_known(int type);

#endif /* MZ_DTYPE_H */
