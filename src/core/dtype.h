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
    MZ_DT_Q8_0 = 8,
    MZ_DT_Q8_1 = 9,
    MZ_DT_BF16 = 30,
    MZ_DT_COUNT = 40, /* one past the largest ggml type id we know of */
} mz_dtype;

#define MZ_QK 32 /* values per quantized block */

typedef uint16_t mz_f16;  /* IEEE binary16 bits */
typedef uint16_t mz_bf16; /* bfloat16 bits */

typedef struct { mz_f16 d; int8_t qs[MZ_QK]; } mz_block_q8_0;
typedef struct { mz_f16 d; uint8_t qs[MZ_QK / 2]; } mz_block_q4_0;
typedef struct { mz_f16 d; mz_f16 m; uint8_t qs[MZ_QK / 2]; } mz_block_q4_1;
typedef struct { mz_f16 d; mz_f16 s; int8_t qs[MZ_QK]; } mz_block_q8_1;

_Static_assert(sizeof(mz_block_q8_0) == 34, "q8_0 layout");
_Static_assert(sizeof(mz_block_q4_0) == 18, "q4_0 layout");
_Static_assert(sizeof(mz_block_q4_1) == 20, "q4_1 layout");
_Static_assert(sizeof(mz_block_q8_1) == 36, "q8_1 layout");

/* Name like "Q4_1", or NULL for a type id we do not know. */
const char *mz_dtype_name(int type);
/* True for the types this engine can compute with (F32 F16 BF16 Q8_0 Q4_0 Q4_1). */
int mz_dtype_supported(int type);
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
