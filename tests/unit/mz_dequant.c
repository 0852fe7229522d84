/*
 * mz_dequant.c — test tool (built by CMake, never installed): dequantizes
 * weights with our scalar reference (mz_kernels_ref(type)->to_float) and
 * writes the floats, little-endian F32, to stdout, for
 * test_dequant_gguf.py to compare with an independent dequantizer (the
 * `gguf` PyPI package's NumPy code).
 *
 *   mz_dequant blocks TYPE FILE   FILE holds whole blocks of TYPE (a name:
 *                                 Q4_K, IQ4_NL…); every value of them
 *   mz_dequant gguf FILE          every tensor of a GGUF file, in the order
 *                                 of its tensor table (F32 copied, F16/BF16
 *                                 widened, quantized types dequantized)
 *   mz_dequant list FILE          one line per tensor: name type n_elements
 *
 * Exit 0, or 1 with a message on stderr.
 */
#define _POSIX_C_SOURCE 200809L
#include "kernels/kernels.h"
#include "gguf/gguf.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static int type_by_name(const char *name)
{
    for (int t = 0; t < MZ_DT_COUNT; t++)
        if (mz_dtype_name(t) && !strcasecmp(mz_dtype_name(t), name)) return t;
    return -1;
}

/* Dequantizes n values of type from src and writes them out; F32 is a copy. */
static int emit(int type, const void *src, size_t n, float *buf)
{
    const mz_type_kernels *k = mz_kernels_ref(type);
    if (type == MZ_DT_F32) {
        memcpy(buf, src, n * sizeof *buf);
    } else if (k && k->to_float) {
        k->to_float(src, buf, n);
    } else {
        fprintf(stderr, "mz_dequant: no dequantizer for %s\n", mz_dtype_name(type));
        return 1;
    }
    if (fwrite(buf, sizeof *buf, n, stdout) != n) {
        fprintf(stderr, "mz_dequant: write failed\n");
        return 1;
    }
    return 0;
}

static char *read_whole(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *data = NULL;
    long n = -1;
    if (f && !fseek(f, 0, SEEK_END) && (n = ftell(f)) >= 0 && !fseek(f, 0, SEEK_SET) &&
        (data = malloc(n ? (size_t)n : 1)) && fread(data, 1, (size_t)n, f) == (size_t)n) {
        *len = (size_t)n;
    } else {
        fprintf(stderr, "mz_dequant: cannot read %s\n", path);
        free(data);
        data = NULL;
    }
    if (f) fclose(f);
    return data;
}

static int cmd_blocks(const char *type_name, const char *path)
{
    int type = type_by_name(type_name);
    if (type < 0) {
        fprintf(stderr, "mz_dequant: unknown type '%s'\n", type_name);
        return 1;
    }
    size_t len = 0;
    char *data = read_whole(path, &len);
    if (!data) return 1;
    size_t bb = mz_dtype_block_bytes(type), bl = mz_dtype_block_len(type);
    int rc = 1;
    if (!bb || len % bb) {
        fprintf(stderr, "mz_dequant: %zu bytes are not whole %s blocks (%zu bytes)\n", len, type_name, bb);
    } else {
        size_t n = len / bb * bl;
        float *buf = malloc((n ? n : 1) * sizeof *buf);
        rc = buf ? emit(type, data, n, buf) : 1;
        free(buf);
    }
    free(data);
    return rc;
}

static int cmd_gguf(const char *path, bool list)
{
    mz_gguf *g = NULL;
    if (mz_gguf_open_any_type(path, &g)) {
        fprintf(stderr, "mz_dequant: %s\n", mz_last_error());
        return 1;
    }
    FILE *f = fopen(path, "rb");
    int rc = f ? 0 : 1;
    if (!f) fprintf(stderr, "mz_dequant: cannot open %s\n", path);
    for (uint64_t i = 0; i < g->n_tensors && !rc; i++) {
        const mz_gguf_tensor *t = &g->tensors[i];
        if (list) {
            printf("%s %s %llu\n", t->name.ptr, mz_dtype_name(t->type), (unsigned long long)t->n_elements);
            continue;
        }
        /* row by row: token_embd tables are hundreds of MB as floats */
        size_t rows = (size_t)(t->n_elements / t->ne[0]), n0 = (size_t)t->ne[0];
        size_t rb = mz_dtype_row_bytes(t->type, t->ne[0]);
        uint8_t *raw = malloc(rb);
        float *buf = malloc(n0 * sizeof *buf);
        if (!raw || !buf || fseeko(f, (off_t)(g->data_offset + t->offset), SEEK_SET)) rc = 1;
        for (size_t r = 0; r < rows && !rc; r++) {
            if (fread(raw, 1, rb, f) != rb) {
                fprintf(stderr, "mz_dequant: short read in %s\n", t->name.ptr);
                rc = 1;
            } else {
                rc = emit(t->type, raw, n0, buf);
            }
        }
        free(raw);
        free(buf);
    }
    if (f) fclose(f);
    mz_gguf_free(g);
    return rc;
}

int main(int argc, char **argv)
{
    mz_kernels_init();
    static char out_buf[1 << 20];
    setvbuf(stdout, out_buf, _IOFBF, sizeof out_buf);
    if (argc == 4 && !strcmp(argv[1], "blocks")) return cmd_blocks(argv[2], argv[3]);
    if (argc == 3 && !strcmp(argv[1], "gguf")) return cmd_gguf(argv[2], false);
    if (argc == 3 && !strcmp(argv[1], "list")) return cmd_gguf(argv[2], true);
    fprintf(stderr, "usage: mz_dequant blocks TYPE FILE | gguf FILE | list FILE\n");
    return 1;
}
