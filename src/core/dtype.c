/*
 * dtype.c — names and block geometry of GGUF tensor types.
 */
#include "dtype.h"

#include "core.h"

#include <stdatomic.h>
#include <stdio.h>

typedef struct {
    const char *name;
    uint16_t block_len;
    uint16_t block_bytes;
    uint8_t supported;
} dtype_traits;

/* ggml's type table (ids that were removed upstream stay NULL). */
static const dtype_traits k_traits[MZ_DT_COUNT] = {
    [0] = {"F32", 1, 4, 1},      [1] = {"F16", 1, 2, 1},       [2] = {"Q4_0", 32, 18, 1},
    [3] = {"Q4_1", 32, 20, 1},   [6] = {"Q5_0", 32, 22, 1},    [7] = {"Q5_1", 32, 24, 1},
    [8] = {"Q8_0", 32, 34, 1},   [9] = {"Q8_1", 32, 36, 0},
    /* K-quants (src/kernels/kquant_*.c) */
    [10] = {"Q2_K", 256, 84, 1}, [11] = {"Q3_K", 256, 110, 1}, [12] = {"Q4_K", 256, 144, 1},
    [13] = {"Q5_K", 256, 176, 1}, [14] = {"Q6_K", 256, 210, 1},
    /* end of K-quants */
    [15] = {"Q8_K", 256, 292, 0}, [16] = {"IQ2_XXS", 256, 66, 0},
    [17] = {"IQ2_XS", 256, 74, 0}, [18] = {"IQ3_XXS", 256, 98, 0}, [19] = {"IQ1_S", 256, 50, 0},
    [20] = {"IQ4_NL", 32, 18, 1}, [21] = {"IQ3_S", 256, 110, 0}, [22] = {"IQ2_S", 256, 82, 0},
    [23] = {"IQ4_XS", 256, 136, 1}, [24] = {"I8", 1, 1, 0},     [25] = {"I16", 1, 2, 0},
    [26] = {"I32", 1, 4, 0},     [27] = {"I64", 1, 8, 0},      [28] = {"F64", 1, 8, 0},
    [29] = {"IQ1_M", 256, 56, 0}, [30] = {"BF16", 1, 2, 1},    [34] = {"TQ1_0", 256, 54, 0},
    [35] = {"TQ2_0", 256, 66, 0}, [39] = {"MXFP4", 32, 17, 0},
};

static const dtype_traits *traits(int type)
{
    if (type < 0 || type >= MZ_DT_COUNT || !k_traits[type].name) return NULL;
    return &k_traits[type];
}

const char *mz_dtype_name(int type)
{
    const dtype_traits *t = traits(type);
    return t ? t->name : NULL;
}

int mz_dtype_known(int type) { return traits(type) != NULL; }

int mz_dtype_supported(int type)
{
    const dtype_traits *t = traits(type);
    return t && t->supported;
}

const char *mz_dtype_supported_names(void)
{
    /* Built once; the table is constant, so racing first callers write the
     * same bytes. */
    static char names[256];
    static _Atomic int built;
    if (!built) {
        size_t len = 0;
        for (int t = 0; t < MZ_DT_COUNT; t++) {
            if (!k_traits[t].name || !k_traits[t].supported) continue;
            int w = snprintf(names + len, sizeof names - len, "%s%s", len ? " " : "", k_traits[t].name);
            if (w < 0 || (size_t)w >= sizeof names - len) break;
            len += (size_t)w;
        }
        built = 1;
    }
    return names;
}

size_t mz_dtype_block_len(int type)
{
    const dtype_traits *t = traits(type);
    return t ? t->block_len : 0;
}

size_t mz_dtype_block_bytes(int type)
{
    const dtype_traits *t = traits(type);
    return t ? t->block_bytes : 0;
}

size_t mz_dtype_row_bytes(int type, uint64_t n)
{
    const dtype_traits *t = traits(type);
    if (!t || n % t->block_len) return 0;
    uint64_t blocks = n / t->block_len;
    if (blocks > SIZE_MAX / t->block_bytes) return 0;
    return (size_t)blocks * t->block_bytes;
}
