/*
 * test_gguf.c — GGUF reader and writer: every malformation the reader must
 * refuse (each with its status and a phrase of its message), writer→reader
 * round trips of every value type, byte-flip and truncation sweeps that must
 * never crash, and the real SmolLM2 file when it is present.
 */
#include "gguf/gguf.h"
#include "testutil.h"

#include <stdint.h>
#include <string.h>

/* ---- byte builder for hand-made files ------------------------------------------ */

typedef struct bb {
    uint8_t p[4096];
    size_t n;
} bb;

static void bb_le(bb *b, uint64_t v, unsigned n)
{
    for (unsigned i = 0; i < n; i++) b->p[b->n++] = (uint8_t)(v >> (8 * i));
}
static void bb_u32(bb *b, uint32_t v) { bb_le(b, v, 4); }
static void bb_u64(bb *b, uint64_t v) { bb_le(b, v, 8); }
static void bb_str(bb *b, const char *s)
{
    size_t n = strlen(s);
    bb_u64(b, n);
    memcpy(b->p + b->n, s, n);
    b->n += n;
}
static void bb_header(bb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
    b->n = 0;
    bb_u32(b, MZ_GGUF_MAGIC);
    bb_u32(b, version);
    bb_u64(b, n_tensors);
    bb_u64(b, n_kv);
}

/* A version-3 file of one metadata entry, up to its value: the key, then
 * the value type. */
static void bb_entry_file(bb *b, const char *key, uint32_t type)
{
    bb_header(b, 3, 0, 1);
    bb_str(b, key);
    bb_u32(b, type);
}

/* The same for an array value, up to its elements: the element type, then
 * the element count. */
static void bb_array_file(bb *b, const char *key, uint32_t elem_type, uint64_t n)
{
    bb_entry_file(b, key, MZ_GGUF_ARRAY);
    bb_u32(b, elem_type);
    bb_u64(b, n);
}

/* ---- helpers ------------------------------------------------------------------- */

static size_t find_bytes(const uint8_t *buf, size_t len, const char *s)
{
    size_t n = strlen(s);
    for (size_t i = 0; i + n <= len; i++)
        if (memcmp(buf + i, s, n) == 0) return i;
    return SIZE_MAX;
}

/* Position just after a length-prefixed name in the file (the first match). */
static size_t after_name(const uint8_t *buf, size_t len, const char *name)
{
    size_t at = find_bytes(buf, len, name);
    return at == SIZE_MAX ? SIZE_MAX : at + strlen(name);
}

static void put_le(uint8_t *p, uint64_t v, unsigned n)
{
    for (unsigned i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Parses buf; checks the status and that the message contains phrase. */
static void expect(const char *label, const uint8_t *buf, size_t len, mz_status want,
                   const char *phrase)
{
    mz_gguf *g = (mz_gguf *)1;
    mz_status s = mz_gguf_parse(buf, len, len, &g);
    if (getenv("MZ_TEST_VERBOSE")) printf("  %-22s %s\n", label, s ? mz_last_error() : "ok");
    CHECK_MSG(s == want, "%s: status %d (%s), want %d; message: %s", label, s, mz_status_str(s),
              want, mz_last_error());
    if (want != MZ_OK) {
        CHECK_MSG(g == NULL, "%s: *out not NULL on error", label);
        CHECK_MSG(strstr(mz_last_error(), phrase) != NULL, "%s: message '%s' lacks '%s'", label,
                  mz_last_error(), phrase);
    }
    mz_gguf_free(s == MZ_OK ? g : NULL);
}

/* A small valid file: two kvs and two F32 tensors, plus extra tensors as asked. */
typedef struct base_opts {
    int extra_type;             /* -1: none; else a tensor "x" of this type */
    uint64_t extra_ne0;
} base_opts;

static uint8_t *make_base(base_opts o, size_t *len)
{
    mz_gguf_writer *w = mz_gguf_writer_init();
    float data[64];
    for (int i = 0; i < 64; i++) data[i] = (float)i;
    uint64_t ne_w[2] = {32, 2}, ne_v[1] = {32};
    CHECK(mz_gguf_writer_add_u32(w, "a.x", 1) == MZ_OK);
    CHECK(mz_gguf_writer_add_u32(w, "a.y", 2) == MZ_OK);
    CHECK(mz_gguf_writer_add_tensor(w, "t.a", MZ_DT_F32, 2, ne_w, data, sizeof data) == MZ_OK);
    CHECK(mz_gguf_writer_add_tensor(w, "t.b", MZ_DT_F32, 1, ne_v, data, 32 * 4) == MZ_OK);
    if (o.extra_type >= 0) {
        uint8_t blob[1024] = {0};
        uint64_t ne[1] = {o.extra_ne0};
        size_t nb = mz_dtype_row_bytes(o.extra_type, o.extra_ne0);
        CHECK(nb && nb <= sizeof blob);
        CHECK(mz_gguf_writer_add_tensor(w, "t.x", o.extra_type, 1, ne, blob, nb) == MZ_OK);
    }
    uint8_t *buf = NULL;
    CHECK(mz_gguf_writer_write_mem(w, &buf, len) == MZ_OK);
    mz_gguf_writer_free(w);
    return buf;
}

/* ---- malformations ------------------------------------------------------------ */

static void test_header_errors(void)
{
    bb b;
    bb_header(&b, 3, 0, 0);
    expect("empty valid", b.p, b.n, MZ_OK, "");
    expect("zero bytes", b.p, 0, MZ_E_FORMAT, "truncated file: reading the magic at byte offset 0");
    expect("three bytes", b.p, 3, MZ_E_FORMAT, "truncated");

    b.p[0] = 'X';
    expect("bad magic", b.p, b.n, MZ_E_FORMAT, "bad magic 'XGUF'");

    bb_header(&b, 2, 0, 0);
    expect("v2", b.p, b.n, MZ_E_UNSUPPORTED, "GGUF version 2 is not supported");
    bb_header(&b, 1, 0, 0);
    expect("v1", b.p, b.n, MZ_E_UNSUPPORTED, "GGUF version 1 is not supported");
    bb_header(&b, 4, 0, 0);
    expect("v4", b.p, b.n, MZ_E_FORMAT, "bad GGUF version 4");
    bb_header(&b, 0x03000000u, 0, 0);
    expect("big-endian", b.p, b.n, MZ_E_UNSUPPORTED, "big-endian");
    bb_header(&b, 3, 0, 0);
    expect("truncated counts", b.p, 20, MZ_E_FORMAT, "reading the metadata count at byte offset 16");

    bb_header(&b, 3, 0, (uint64_t)1 << 40);
    expect("huge n_kv", b.p, b.n, MZ_E_FORMAT, "metadata count 1099511627776 is impossible");
    bb_header(&b, 3, UINT64_MAX, 0);
    expect("huge n_tensors", b.p, b.n, MZ_E_FORMAT, "tensor count 18446744073709551615 is impossible");
    /* Plausible for the bytes present, but the entries are not there. */
    bb_header(&b, 3, 0, 2);
    bb_str(&b, "k");
    bb_u32(&b, MZ_GGUF_UINT8);
    b.p[b.n++] = 7;
    bb_u64(&b, 0);
    b.p[b.n++] = 0;
    b.p[b.n++] = 0;
    b.p[b.n++] = 0;
    b.p[b.n++] = 0;
    b.p[b.n++] = 0;
    expect("n_kv one too many", b.p, b.n, MZ_E_FORMAT, "metadata entry 1");
}

static void test_value_errors(void)
{
    bb b;
    /* nested array */
    bb_array_file(&b, "nest", MZ_GGUF_ARRAY, 1);
    bb_u32(&b, MZ_GGUF_UINT8);
    bb_u64(&b, 0);
    expect("nested array", b.p, b.n, MZ_E_UNSUPPORTED, "nested arrays are not supported");
    CHECK(strstr(mz_last_error(), "metadata entry 0 'nest'") != NULL);

    /* unknown value type */
    bb_entry_file(&b, "k", 13);
    bb_u32(&b, 0);
    expect("unknown value type", b.p, b.n, MZ_E_FORMAT, "unknown value type 13");

    /* unknown array element type */
    bb_array_file(&b, "k", 99, 0);
    expect("unknown array type", b.p, b.n, MZ_E_FORMAT, "unknown value type 99 for array elements");

    /* absurd array length */
    bb_array_file(&b, "arr", MZ_GGUF_UINT32, (uint64_t)1 << 40);
    bb_u32(&b, 0);
    expect("huge array", b.p, b.n, MZ_E_FORMAT, "array length 1099511627776");
    CHECK(strstr(mz_last_error(), "impossible") != NULL);
    bb_array_file(&b, "arr", MZ_GGUF_STRING, 3);
    bb_u64(&b, 0);
    bb_u64(&b, 0);
    expect("string array short", b.p, b.n, MZ_E_FORMAT, "impossible");
    /* the length fits the bytes left, but the strings do not */
    bb_array_file(&b, "arr", MZ_GGUF_STRING, 2);
    bb_str(&b, "ok");
    bb_u64(&b, 100);
    bb_u64(&b, 0);
    expect("string array element", b.p, b.n, MZ_E_FORMAT, "array element 1 of metadata entry 0 'arr'");

    /* absurd string length */
    bb_entry_file(&b, "s", MZ_GGUF_STRING);
    bb_u64(&b, UINT64_MAX);
    expect("huge string", b.p, b.n, MZ_E_FORMAT, "reading string value of metadata entry 0 's'");
    bb_header(&b, 3, 0, 1);
    bb_u64(&b, (uint64_t)1 << 50);
    bb_u64(&b, 0);
    expect("huge key", b.p, b.n, MZ_E_FORMAT, "reading key of metadata entry 0 at byte offset 32");

    /* NUL inside a key */
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "ab");
    b.p[b.n - 1] = 0;
    bb_u32(&b, MZ_GGUF_UINT8);
    b.p[b.n++] = 1;
    expect("NUL in key", b.p, b.n, MZ_E_FORMAT, "key contains a NUL byte");

    /* empty key */
    bb_entry_file(&b, "", MZ_GGUF_UINT8);
    b.p[b.n++] = 1;
    expect("empty key", b.p, b.n, MZ_E_FORMAT, "empty key");

    /* bool out of range, scalar and array */
    bb_entry_file(&b, "b", MZ_GGUF_BOOL);
    b.p[b.n++] = 2;
    expect("bool 2", b.p, b.n, MZ_E_FORMAT, "bad bool value 2");
    bb_array_file(&b, "b", MZ_GGUF_BOOL, 3);
    b.p[b.n++] = 1;
    b.p[b.n++] = 0;
    b.p[b.n++] = 9;
    expect("bool array", b.p, b.n, MZ_E_FORMAT, "bad bool value 9 in array element 2");

    /* general.alignment */
    bb_entry_file(&b, "general.alignment", MZ_GGUF_UINT32);
    bb_u32(&b, 48);
    expect("alignment 48", b.p, b.n, MZ_E_FORMAT, "general.alignment 48 is not a nonzero power of two");
    bb_entry_file(&b, "general.alignment", MZ_GGUF_UINT32);
    bb_u32(&b, 0);
    expect("alignment 0", b.p, b.n, MZ_E_FORMAT, "general.alignment 0 is not a nonzero power of two");
    bb_entry_file(&b, "general.alignment", MZ_GGUF_UINT64);
    bb_u64(&b, 64);
    expect("alignment u64", b.p, b.n, MZ_E_FORMAT, "general.alignment has type uint64, must be uint32");

    /* truncated inside a value of each scalar width */
    static const mz_gguf_type scalars[] = {MZ_GGUF_UINT16, MZ_GGUF_INT32, MZ_GGUF_FLOAT64};
    for (size_t i = 0; i < MZ_ARRAY_LEN(scalars); i++) {
        bb_entry_file(&b, "v", scalars[i]);
        b.p[b.n++] = 1;
        expect("short scalar", b.p, b.n, MZ_E_FORMAT, "reading value of metadata entry 0 'v' at byte offset 37");
    }
}

static void test_duplicate_keys(void)
{
    size_t len;
    uint8_t *buf = make_base((base_opts){-1, 0}, &len);
    expect("base", buf, len, MZ_OK, "");
    size_t at = find_bytes(buf, len, "a.y");
    CHECK(at != SIZE_MAX);
    buf[at + 2] = 'x';
    expect("duplicate key", buf, len, MZ_E_FORMAT, "duplicate key 'a.x' (metadata entries 0 and 1)");
    free(buf);

    buf = make_base((base_opts){-1, 0}, &len);
    at = find_bytes(buf, len, "t.b");
    buf[at + 2] = 'a';
    expect("duplicate tensor", buf, len, MZ_E_FORMAT, "duplicate tensor name 't.a'");
    free(buf);
}

/* Patches a field of tensor info "name": which = 0 n_dims, 1.. ne[which-1],
 * 5 type, 6 offset (for a tensor with nd dims). */
static void patch_tensor(uint8_t *buf, size_t len, const char *name, uint32_t nd, int which,
                         uint64_t v)
{
    size_t p = after_name(buf, len, name);
    MZ_ASSERT(p != SIZE_MAX);
    if (which == 0) put_le(buf + p, v, 4);
    else if (which <= 4) put_le(buf + p + 4 + 8 * (size_t)(which - 1), v, 8);
    else if (which == 5) put_le(buf + p + 4 + 8 * nd, v, 4);
    else put_le(buf + p + 8 + 8 * nd, v, 8);
}

static void test_tensor_errors(void)
{
    size_t len;
    uint8_t *buf;
#define WITH_BASE(opts, stmt)                                                         \
    do {                                                                              \
        buf = make_base(opts, &len);                                                  \
        stmt;                                                                         \
        free(buf);                                                                    \
    } while (0)
    base_opts none = {-1, 0};

    /* one field patched: the error names it */
    static const struct {
        const char *tensor;
        uint32_t nd;
        int which;
        uint64_t v;
        const char *what, *msg;
    } one_patch[] = {
        {"t.a", 2, 0, 0, "n_dims 0", "tensor 't.a' has n_dims 0"},
        {"t.a", 2, 0, 5, "n_dims 5", "tensor 't.a' has n_dims 5"},
        {"t.a", 2, 2, 0, "zero dim", "tensor 't.a' has a zero dimension ne[1]"},
        {"t.a", 2, 1, UINT64_MAX, "dim > 2^63", "dimensions overflow"},
        {"t.a", 2, 5, 4, "type 4", "tensor 't.a' has unknown tensor type 4"},
        {"t.a", 2, 5, 1000, "type 1000", "unknown tensor type 1000"},
        {"t.b", 1, 6, 4, "unaligned", "tensor 't.b' data offset 4 is not aligned to 32"},
        {"t.b", 1, 6, (uint64_t)1 << 30, "outside", "tensor 't.b' data (128 bytes at offset 1073741824"},
        {"t.b", 1, 6, UINT64_MAX & ~(uint64_t)31, "outside max", "lies outside the file"},
        {"t.b", 1, 6, 0, "overlap", "tensor data overlap: 't.b' [0, 128) and 't.a' [0, 256)"},
        {"t.b", 1, 6, 224, "overlap tail", "overlap"},
    };
    for (size_t i = 0; i < MZ_ARRAY_LEN(one_patch); i++)
        WITH_BASE(none, (patch_tensor(buf, len, one_patch[i].tensor, one_patch[i].nd, one_patch[i].which,
                                      one_patch[i].v),
                         expect(one_patch[i].what, buf, len, MZ_E_FORMAT, one_patch[i].msg)));
    WITH_BASE(none, (patch_tensor(buf, len, "t.a", 2, 1, (uint64_t)1 << 40),
                     patch_tensor(buf, len, "t.a", 2, 2, (uint64_t)1 << 40),
                     expect("dims overflow", buf, len, MZ_E_FORMAT, "tensor 't.a' dimensions overflow")));
    /* Type Q8_0 with a row that is not whole blocks. */
    WITH_BASE(((base_opts){MZ_DT_Q8_0, 64}),
              (expect("q8 base", buf, len, MZ_OK, ""),
               patch_tensor(buf, len, "t.x", 1, 1, 48),
               expect("block len", buf, len, MZ_E_FORMAT,
                      "tensor 't.x': ne[0] = 48 is not a multiple of the block length 32 of type Q8_0")));
    /* Known but unsupported type (IQ2_XXS, id 16): refused as unsupported,
     * not malformed, naming the type and what loads. */
    WITH_BASE(((base_opts){16, 256}),
              expect("iq2_xxs", buf, len, MZ_E_UNSUPPORTED,
                     "tensor t.x has type IQ2_XXS which mzcache does not support; supported: F32 F16"));
    /* ...but a structural error elsewhere in the same file wins. */
    WITH_BASE(((base_opts){16, 256}), (patch_tensor(buf, len, "t.b", 1, 6, 4),
                                       expect("iq2_xxs + unaligned", buf, len, MZ_E_FORMAT, "not aligned")));
    WITH_BASE(none, (buf[after_name(buf, len, "t.b") - 1] = 0,
                     expect("NUL in name", buf, len, MZ_E_FORMAT, "tensor info 1 't.?': name contains a NUL byte")));
    /* Tensor infos run out. */
    WITH_BASE(none, (put_le(buf + 8, 3, 8),
                     expect("n_tensors + 1", buf, len, MZ_E_FORMAT, "tensor info 2 has an empty name")));
#undef WITH_BASE
}

/* The block types of downloaded files (Q4_K_M & co.): whole blocks parse,
 * a row that is not whole blocks (an odd width like 640 for a 256-value
 * super-block) is malformed whatever the type, and a file cut inside a
 * super-block is truncated. The types mzcache does not compute with are
 * read by the any-type reader and refused by name by the strict one. */
static void test_block_types(void)
{
    static const struct { int type; uint64_t ok, bad; } kinds[] = {
        {MZ_DT_Q5_0, 64, 48},   {MZ_DT_Q5_1, 96, 100},  {MZ_DT_IQ4_NL, 288, 16},
        {MZ_DT_Q2_K, 256, 128}, {MZ_DT_Q3_K, 512, 576}, {MZ_DT_Q4_K, 768, 640},
        {MZ_DT_Q5_K, 256, 32},  {MZ_DT_Q6_K, 512, 1152}, {MZ_DT_IQ4_XS, 256, 288},
        {16 /* IQ2_XXS */, 256, 64},
    };
    for (size_t i = 0; i < MZ_ARRAY_LEN(kinds); i++) {
        const char *tn = mz_dtype_name(kinds[i].type);
        size_t len;
        uint8_t *buf = make_base((base_opts){kinds[i].type, kinds[i].ok}, &len);
        mz_gguf *g = NULL;
        CHECK_MSG(mz_gguf_parse_any_type(buf, len, len, &g) == MZ_OK, "%s: %s", tn, mz_last_error());
        if (g) {
            const mz_gguf_tensor *t = mz_gguf_find_tensor(g, "t.x");
            CHECK(t && t->nbytes == kinds[i].ok / mz_dtype_block_len(kinds[i].type) *
                                      mz_dtype_block_bytes(kinds[i].type));
            /* Cut one byte into the last super-block of t.x: outside the file. */
            size_t cut = (size_t)(g->data_offset + t->offset + t->nbytes - 1);
            mz_gguf *g2 = NULL;
            mz_status s = mz_gguf_parse_any_type(buf, cut, cut, &g2);
            CHECK_MSG(s == MZ_E_FORMAT && strstr(mz_last_error(), "tensor 't.x' data") &&
                          strstr(mz_last_error(), "lies outside the file"),
                      "%s cut: %s", tn, mz_last_error());
            mz_gguf_free(s ? NULL : g2);
            mz_gguf_free(g);
        }
        if (mz_dtype_supported(kinds[i].type)) {
            expect(tn, buf, len, MZ_OK, "");
        } else {
            char want[128];
            snprintf(want, sizeof want, "tensor t.x has type %s which mzcache does not support; supported: %s",
                     tn, mz_dtype_supported_names());
            expect(tn, buf, len, MZ_E_UNSUPPORTED, want);
        }
        char want[160];
        snprintf(want, sizeof want, "tensor 't.x': ne[0] = %llu is not a multiple of the block length %zu of type %s",
                 (unsigned long long)kinds[i].bad, mz_dtype_block_len(kinds[i].type), tn);
        patch_tensor(buf, len, "t.x", 1, 1, kinds[i].bad);
        expect(tn, buf, len, MZ_E_FORMAT, want);
        CHECK(mz_gguf_parse_any_type(buf, len, len, &g) == MZ_E_FORMAT && g == NULL);
        free(buf);
    }
    /* The list of what loads names every supported type and nothing else. */
    for (int t = 0; t < MZ_DT_COUNT; t++) {
        const char *n = mz_dtype_name(t);
        if (!n) continue;
        char word[24];
        snprintf(word, sizeof word, " %s ", n);
        char list[300];
        snprintf(list, sizeof list, " %s ", mz_dtype_supported_names());
        CHECK_MSG((strstr(list, word) != NULL) == (mz_dtype_supported(t) != 0), "%s in '%s'", n, list);
    }
}

/* Every prefix of a valid file must fail cleanly, and say truncated (or that
 * tensor data lies outside the file). */
static void test_truncation_sweep(void)
{
    size_t len;
    uint8_t *buf = make_base((base_opts){-1, 0}, &len);
    int bad = 0;
    for (size_t n = 0; n < len; n++) {
        mz_gguf *g;
        uint8_t *copy = malloc(n ? n : 1); /* exact size, so ASan sees overreads */
        memcpy(copy, buf, n);
        mz_status s = mz_gguf_parse(copy, n, n, &g);
        const char *m = mz_last_error();
        if (s != MZ_E_FORMAT || !(strstr(m, "truncated") || strstr(m, "outside the file"))) {
            if (bad++ < 5) fprintf(stderr, "prefix %zu: status %d: %s\n", n, s, m);
        }
        if (s == MZ_OK) mz_gguf_free(g);
        free(copy);
    }
    CHECK_EQ_INT(bad, 0);
    /* A specific one: cut inside a key (long enough to pass the count check). */
    bb b;
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "a.rather.long.key.name");
    expect("cut in key", b.p, 40, MZ_E_FORMAT,
           "truncated file: reading key of metadata entry 0 at byte offset 32 needs 22 bytes, only 8 remain");
    /* A prefix of a longer file says "beyond the first N bytes provided". */
    mz_gguf *g;
    mz_status s = mz_gguf_parse(buf, 30, len, &g);
    CHECK(s == MZ_E_RANGE);
    CHECK(strstr(mz_last_error(), "beyond the first 30 bytes provided") != NULL);
    if (s == MZ_OK) mz_gguf_free(g);
    free(buf);
}

/* Flip every byte of the metadata region (three ways): must never crash, and
 * every failure must come with a message. */
static void test_byte_flips(void)
{
    size_t len;
    uint8_t *buf = make_base((base_opts){MZ_DT_Q8_0, 64}, &len);
    mz_gguf *g0;
    CHECK(mz_gguf_parse(buf, len, len, &g0) == MZ_OK);
    size_t meta_end = (size_t)g0->data_offset;
    mz_gguf_free(g0);
    static const uint8_t masks[] = {0xff, 0x01, 0x80};
    int no_msg = 0, ok = 0;
    for (size_t i = 0; i < meta_end; i++) {
        for (size_t k = 0; k < MZ_ARRAY_LEN(masks); k++) {
            uint8_t *copy = malloc(len);
            memcpy(copy, buf, len);
            copy[i] ^= masks[k];
            mz_gguf *g;
            mz_status s = mz_gguf_parse(copy, len, len, &g);
            if (s == MZ_OK) {
                ok++;
                mz_gguf_free(g);
            } else if (!mz_last_error()[0]) {
                no_msg++;
            }
            free(copy);
        }
    }
    CHECK_EQ_INT(no_msg, 0);
    CHECK(ok > 0); /* flipping a value byte keeps the file valid */
    free(buf);
}

/* ---- round trips --------------------------------------------------------------- */

static mz_gguf_kv scalar_kv(const char *key, mz_gguf_type t)
{
    mz_gguf_kv kv;
    memset(&kv, 0, sizeof kv);
    kv.key.ptr = key;
    kv.key.len = strlen(key);
    kv.type = t;
    return kv;
}

static uint8_t fill_byte;
static mz_status fill_pattern(void *user, void *dst, size_t nbytes)
{
    (void)user;
    memset(dst, fill_byte, nbytes);
    return MZ_OK;
}

static void test_round_trip(void)
{
    mz_gguf_writer *w = mz_gguf_writer_init();
    CHECK(w != NULL);
    /* scalars through add_kv, one per type */
    mz_gguf_kv kv;
    kv = scalar_kv("s.u8", MZ_GGUF_UINT8); kv.v.u64 = 200; CHECK(mz_gguf_writer_add_kv(w, &kv) == MZ_OK);
    kv = scalar_kv("s.i8", MZ_GGUF_INT8); kv.v.i64 = -100; CHECK(mz_gguf_writer_add_kv(w, &kv) == MZ_OK);
    kv = scalar_kv("s.u16", MZ_GGUF_UINT16); kv.v.u64 = 65000; CHECK(mz_gguf_writer_add_kv(w, &kv) == MZ_OK);
    kv = scalar_kv("s.i16", MZ_GGUF_INT16); kv.v.i64 = -32768; CHECK(mz_gguf_writer_add_kv(w, &kv) == MZ_OK);
    kv = scalar_kv("s.u32", MZ_GGUF_UINT32); kv.v.u64 = 4000000000u; CHECK(mz_gguf_writer_add_kv(w, &kv) == MZ_OK);
    kv = scalar_kv("s.i32", MZ_GGUF_INT32); kv.v.i64 = -7; CHECK(mz_gguf_writer_add_kv(w, &kv) == MZ_OK);
    kv = scalar_kv("s.f32", MZ_GGUF_FLOAT32); kv.v.f64 = 1.5; CHECK(mz_gguf_writer_add_kv(w, &kv) == MZ_OK);
    kv = scalar_kv("s.bool", MZ_GGUF_BOOL); kv.v.u64 = 1; CHECK(mz_gguf_writer_add_kv(w, &kv) == MZ_OK);
    kv = scalar_kv("s.str", MZ_GGUF_STRING); kv.v.str.ptr = "a\0b"; kv.v.str.len = 3;
    CHECK(mz_gguf_writer_add_kv(w, &kv) == MZ_OK);
    kv = scalar_kv("s.u64", MZ_GGUF_UINT64); kv.v.u64 = UINT64_MAX; CHECK(mz_gguf_writer_add_kv(w, &kv) == MZ_OK);
    kv = scalar_kv("s.i64", MZ_GGUF_INT64); kv.v.i64 = INT64_MIN; CHECK(mz_gguf_writer_add_kv(w, &kv) == MZ_OK);
    kv = scalar_kv("s.f64", MZ_GGUF_FLOAT64); kv.v.f64 = 1e300; CHECK(mz_gguf_writer_add_kv(w, &kv) == MZ_OK);
    /* convenience adders */
    CHECK(mz_gguf_writer_add_u32(w, "c.u32", 42) == MZ_OK);
    CHECK(mz_gguf_writer_add_i32(w, "c.i32", -42) == MZ_OK);
    CHECK(mz_gguf_writer_add_f32(w, "c.f32", 0.25f) == MZ_OK);
    CHECK(mz_gguf_writer_add_bool(w, "c.bool", false) == MZ_OK);
    CHECK(mz_gguf_writer_add_str(w, "c.str", "héllo") == MZ_OK);
    /* arrays of every element type */
    static const uint8_t a_u8[] = {1, 2, 255};
    static const int8_t a_i8[] = {-1, 0, 127};
    static const uint16_t a_u16[] = {1, 65535};
    static const int16_t a_i16[] = {-2, 300};
    static const uint32_t a_u32[] = {7, 8, 9, 10};
    static const int32_t a_i32[] = {-5, 5};
    static const float a_f32[] = {0.5f, -2.0f};
    static const uint8_t a_bool[] = {1, 0, 1};
    static const uint64_t a_u64[] = {UINT64_MAX};
    static const int64_t a_i64[] = {INT64_MIN, 3};
    static const double a_f64[] = {3.25};
    static const mz_gguf_str a_str[] = {{"x", 1}, {"", 0}, {"hello", 5}};
    struct { const char *key; mz_gguf_type t; const void *d; uint64_t n; size_t sz; } arrs[] = {
        {"a.u8", MZ_GGUF_UINT8, a_u8, 3, 1},     {"a.i8", MZ_GGUF_INT8, a_i8, 3, 1},
        {"a.u16", MZ_GGUF_UINT16, a_u16, 2, 2},  {"a.i16", MZ_GGUF_INT16, a_i16, 2, 2},
        {"a.u32", MZ_GGUF_UINT32, a_u32, 4, 4},  {"a.i32", MZ_GGUF_INT32, a_i32, 2, 4},
        {"a.f32", MZ_GGUF_FLOAT32, a_f32, 2, 4}, {"a.bool", MZ_GGUF_BOOL, a_bool, 3, 1},
        {"a.u64", MZ_GGUF_UINT64, a_u64, 1, 8},  {"a.i64", MZ_GGUF_INT64, a_i64, 2, 8},
        {"a.f64", MZ_GGUF_FLOAT64, a_f64, 1, 8}, {"a.str", MZ_GGUF_STRING, a_str, 3, 0},
        {"a.empty", MZ_GGUF_UINT32, NULL, 0, 4},
    };
    for (size_t i = 0; i < MZ_ARRAY_LEN(arrs); i++) {
        kv = scalar_kv(arrs[i].key, MZ_GGUF_ARRAY);
        kv.arr_type = arrs[i].t;
        kv.arr_n = arrs[i].n;
        kv.arr_data = arrs[i].d;
        CHECK(mz_gguf_writer_add_kv(w, &kv) == MZ_OK);
    }
    /* writer refusals */
    CHECK(mz_gguf_writer_add_u32(w, "c.u32", 1) == MZ_E_INVAL);
    CHECK(strstr(mz_last_error(), "duplicate key 'c.u32'") != NULL);
    kv = scalar_kv("bad.nested", MZ_GGUF_ARRAY);
    kv.arr_type = MZ_GGUF_ARRAY;
    CHECK(mz_gguf_writer_add_kv(w, &kv) == MZ_E_INVAL);

    /* tensors: every supported type, 1 to 4 dims, one filled at write time */
    mz_gguf_writer_set_alignment(w, 64);
    struct { const char *name; int type; uint32_t nd; uint64_t ne[4]; } ts[] = {
        {"f32", MZ_DT_F32, 1, {5}},           {"f16", MZ_DT_F16, 2, {3, 7}},
        {"bf16", MZ_DT_BF16, 3, {2, 3, 4}},   {"q8_0", MZ_DT_Q8_0, 4, {64, 2, 1, 3}},
        {"q4_0", MZ_DT_Q4_0, 2, {32, 3}},     {"q4_1", MZ_DT_Q4_1, 2, {96, 1}},
    };
    uint8_t payload[1024];
    for (size_t i = 0; i < sizeof payload; i++) payload[i] = (uint8_t)(i * 7 + 3);
    size_t sizes[MZ_ARRAY_LEN(ts)];
    for (size_t i = 0; i < MZ_ARRAY_LEN(ts); i++) {
        size_t rows = 1;
        for (uint32_t d = 1; d < ts[i].nd; d++) rows *= ts[i].ne[d];
        sizes[i] = mz_dtype_row_bytes(ts[i].type, ts[i].ne[0]) * rows;
        CHECK(mz_gguf_writer_add_tensor(w, ts[i].name, ts[i].type, ts[i].nd, ts[i].ne, payload,
                                        sizes[i]) == MZ_OK);
    }
    uint64_t ne_fill[2] = {32, 4};
    CHECK(mz_gguf_writer_add_tensor_fill(w, "filled", MZ_DT_Q8_0, 2, ne_fill, fill_pattern, NULL) == MZ_OK);
    fill_byte = 0x5a;
    CHECK(mz_gguf_writer_add_tensor(w, "f32", MZ_DT_F32, 1, ts[0].ne, payload, 20) == MZ_E_INVAL);
    CHECK(strstr(mz_last_error(), "duplicate tensor name 'f32'") != NULL);
    CHECK(mz_gguf_writer_add_tensor(w, "short", MZ_DT_F32, 1, ts[0].ne, payload, 16) == MZ_E_INVAL);
    uint64_t ne_bad[1] = {33};
    CHECK(mz_gguf_writer_add_tensor(w, "q", MZ_DT_Q8_0, 1, ne_bad, payload, 34) == MZ_E_INVAL);

    uint8_t *mem;
    size_t len;
    CHECK(mz_gguf_writer_write_mem(w, &mem, &len) == MZ_OK);
    const char *path = t_tmp_path("roundtrip.gguf");
    CHECK(mz_gguf_writer_write(w, path) == MZ_OK);
    mz_gguf_writer_free(w);
    size_t flen;
    char *fbuf = t_read_file(path, &flen);
    CHECK(fbuf && flen == len && memcmp(fbuf, mem, len) == 0);
    free(fbuf);

    mz_gguf *g;
    mz_status s = mz_gguf_open(path, &g);
    CHECK_MSG(s == MZ_OK, "%s", mz_last_error());
    if (s != MZ_OK) {
        free(mem);
        return;
    }
    CHECK_EQ_INT(g->version, 3);
    CHECK_EQ_INT(g->alignment, 64);
    CHECK_EQ_INT(g->data_offset % 64, 0);
    CHECK_EQ_INT(g->n_kv, 12 + 5 + MZ_ARRAY_LEN(arrs) + 1); /* + general.alignment */
    CHECK_EQ_INT(g->file_size, len);
    /* order is call order */
    CHECK(strcmp(g->kv[0].key.ptr, "s.u8") == 0);
    CHECK(strcmp(g->kv[g->n_kv - 1].key.ptr, "general.alignment") == 0);

    const mz_gguf_kv *k;
    CHECK((k = mz_gguf_find(g, "s.u8")) && k->type == MZ_GGUF_UINT8 && k->v.u64 == 200);
    CHECK((k = mz_gguf_find(g, "s.i8")) && k->type == MZ_GGUF_INT8 && k->v.i64 == -100);
    CHECK((k = mz_gguf_find(g, "s.u16")) && k->type == MZ_GGUF_UINT16 && k->v.u64 == 65000);
    CHECK((k = mz_gguf_find(g, "s.i16")) && k->type == MZ_GGUF_INT16 && k->v.i64 == -32768);
    CHECK((k = mz_gguf_find(g, "s.u32")) && k->type == MZ_GGUF_UINT32 && k->v.u64 == 4000000000u);
    CHECK((k = mz_gguf_find(g, "s.i32")) && k->type == MZ_GGUF_INT32 && k->v.i64 == -7);
    CHECK((k = mz_gguf_find(g, "s.f32")) && k->type == MZ_GGUF_FLOAT32 && k->v.f64 == 1.5);
    CHECK((k = mz_gguf_find(g, "s.bool")) && k->type == MZ_GGUF_BOOL && k->v.u64 == 1);
    CHECK((k = mz_gguf_find(g, "s.str")) && k->type == MZ_GGUF_STRING && k->v.str.len == 3 &&
          memcmp(k->v.str.ptr, "a\0b", 4) == 0);
    CHECK((k = mz_gguf_find(g, "s.u64")) && k->type == MZ_GGUF_UINT64 && k->v.u64 == UINT64_MAX);
    CHECK((k = mz_gguf_find(g, "s.i64")) && k->type == MZ_GGUF_INT64 && k->v.i64 == INT64_MIN);
    CHECK((k = mz_gguf_find(g, "s.f64")) && k->type == MZ_GGUF_FLOAT64 && k->v.f64 == 1e300);
    CHECK(mz_gguf_find(g, "nope") == NULL);
    CHECK(mz_gguf_find(g, "s.u") == NULL);

    /* getters */
    uint32_t u;
    float f;
    bool bo;
    mz_gguf_str st;
    CHECK(mz_gguf_get_u32(g, "c.u32", &u) == MZ_OK && u == 42);
    CHECK(mz_gguf_get_u32(g, "s.u8", &u) == MZ_OK && u == 200);
    CHECK(mz_gguf_get_u32(g, "s.u32", &u) == MZ_OK && u == 4000000000u);
    CHECK(mz_gguf_get_u32(g, "c.i32", &u) == MZ_E_FORMAT);
    CHECK(strstr(mz_last_error(), "value -42 does not fit in uint32") != NULL);
    CHECK(mz_gguf_get_u32(g, "s.u64", &u) == MZ_E_FORMAT);
    CHECK(mz_gguf_get_u32(g, "c.str", &u) == MZ_E_FORMAT);
    CHECK(strstr(mz_last_error(), "'c.str' has type string, expected an integer") != NULL);
    CHECK(mz_gguf_get_u32(g, "missing.key", &u) == MZ_E_INVAL);
    CHECK(strstr(mz_last_error(), "'missing.key' not found") != NULL);
    CHECK(mz_gguf_get_f32(g, "c.f32", &f) == MZ_OK && f == 0.25f);
    CHECK(mz_gguf_get_f32(g, "s.f64", &f) == MZ_OK);
    CHECK(mz_gguf_get_f32(g, "c.u32", &f) == MZ_E_FORMAT);
    CHECK(mz_gguf_get_bool(g, "c.bool", &bo) == MZ_OK && bo == false);
    CHECK(mz_gguf_get_bool(g, "s.bool", &bo) == MZ_OK && bo == true);
    CHECK(mz_gguf_get_bool(g, "s.u8", &bo) == MZ_E_FORMAT);
    CHECK(mz_gguf_get_str(g, "c.str", &st) == MZ_OK && strcmp(st.ptr, "héllo") == 0);
    CHECK(mz_gguf_get_str(g, "c.u32", &st) == MZ_E_FORMAT);

    for (size_t i = 0; i < MZ_ARRAY_LEN(arrs); i++) {
        const void *d;
        uint64_t n;
        s = mz_gguf_get_arr(g, arrs[i].key, arrs[i].t, &d, &n);
        CHECK_MSG(s == MZ_OK && n == arrs[i].n, "%s: %s", arrs[i].key, mz_last_error());
        if (s != MZ_OK) continue;
        if (arrs[i].t == MZ_GGUF_STRING) {
            const mz_gguf_str *a = d;
            for (uint64_t j = 0; j < n; j++)
                CHECK(a[j].len == a_str[j].len && memcmp(a[j].ptr, a_str[j].ptr, a[j].len + 1) == 0);
        } else if (n) {
            CHECK(memcmp(d, arrs[i].d, (size_t)n * arrs[i].sz) == 0);
        }
    }
    const void *d;
    uint64_t n;
    CHECK(mz_gguf_get_arr(g, "a.u32", MZ_GGUF_INT32, &d, &n) == MZ_E_FORMAT);
    CHECK(strstr(mz_last_error(), "is an array of uint32, expected array of int32") != NULL);
    CHECK(mz_gguf_get_arr(g, "c.u32", MZ_GGUF_UINT32, &d, &n) == MZ_E_FORMAT);

    /* tensors */
    CHECK_EQ_INT(g->n_tensors, MZ_ARRAY_LEN(ts) + 1);
    for (size_t i = 0; i < MZ_ARRAY_LEN(ts); i++) {
        const mz_gguf_tensor *t = mz_gguf_find_tensor(g, ts[i].name);
        CHECK_MSG(t != NULL, "%s", ts[i].name);
        if (!t) continue;
        CHECK_EQ_INT(t->type, ts[i].type);
        CHECK_EQ_INT(t->n_dims, ts[i].nd);
        uint64_t nel = 1;
        for (uint32_t dd = 0; dd < 4; dd++) {
            uint64_t want = dd < ts[i].nd ? ts[i].ne[dd] : 1;
            CHECK_EQ_INT(t->ne[dd], want);
            nel *= want;
        }
        CHECK_EQ_INT(t->n_elements, nel);
        CHECK_EQ_INT(t->nbytes, sizes[i]);
        CHECK_EQ_INT(t->offset % 64, 0);
        CHECK(memcmp(mem + g->data_offset + t->offset, payload, sizes[i]) == 0);
    }
    const mz_gguf_tensor *tf = mz_gguf_find_tensor(g, "filled");
    CHECK(tf && tf->nbytes == 4 * 34 && mem[g->data_offset + tf->offset] == 0x5a &&
          mem[g->data_offset + tf->offset + tf->nbytes - 1] == 0x5a);
    CHECK(mz_gguf_find_tensor(g, "fill") == NULL);
    CHECK_EQ_INT(len % 64, 0); /* the last tensor is padded too */
    mz_gguf_free(g);
    free(mem);

    /* type names */
    CHECK(strcmp(mz_gguf_type_name(MZ_GGUF_FLOAT64), "float64") == 0);
    CHECK(strcmp(mz_gguf_type_name(MZ_GGUF_STRING), "string") == 0);
    CHECK(strcmp(mz_gguf_type_name((mz_gguf_type)77), "unknown") == 0);
}

/* A parsed file re-written through add_kv is byte-identical (no tensors). */
static void test_copy_kvs(void)
{
    mz_gguf_writer *w = mz_gguf_writer_init();
    CHECK(mz_gguf_writer_add_str(w, "general.architecture", "llama") == MZ_OK);
    CHECK(mz_gguf_writer_add_u32(w, "general.alignment", 16) == MZ_OK);
    uint64_t ne[1] = {4};
    float x[4] = {1, 2, 3, 4};
    CHECK(mz_gguf_writer_add_tensor(w, "t", MZ_DT_F32, 1, ne, x, sizeof x) == MZ_OK);
    uint8_t *a;
    size_t alen;
    CHECK(mz_gguf_writer_write_mem(w, &a, &alen) == MZ_OK);
    mz_gguf_writer_free(w);
    mz_gguf *g;
    CHECK(mz_gguf_parse(a, alen, alen, &g) == MZ_OK);
    CHECK_EQ_INT(g->alignment, 16);
    CHECK_EQ_INT(g->n_kv, 2);
    w = mz_gguf_writer_init();
    for (uint64_t i = 0; i < g->n_kv; i++) CHECK(mz_gguf_writer_add_kv(w, &g->kv[i]) == MZ_OK);
    CHECK(mz_gguf_writer_add_tensor(w, "t", MZ_DT_F32, 1, ne, x, sizeof x) == MZ_OK);
    uint8_t *b;
    size_t blen;
    CHECK(mz_gguf_writer_write_mem(w, &b, &blen) == MZ_OK);
    CHECK(alen == blen && memcmp(a, b, alen) == 0);
    mz_gguf_writer_free(w);
    mz_gguf_free(g);
    free(a);
    free(b);
}

/* mz_gguf_open: path prefix on errors, missing files, and metadata larger
 * than its first read (the prefix-growing path). */
static void test_open(void)
{
    mz_gguf *g = (mz_gguf *)1;
    CHECK(mz_gguf_open("/nonexistent/x.gguf", &g) == MZ_E_IO && g == NULL);
    CHECK(strncmp(mz_last_error(), "/nonexistent/x.gguf: cannot open", 32) == 0);

    const char *path = t_tmp_path("badmagic.gguf");
    FILE *f = fopen(path, "wb");
    fwrite("GGML\3\0\0\0", 1, 8, f);
    fclose(f);
    CHECK(mz_gguf_open(path, &g) == MZ_E_FORMAT);
    char want[1200];
    snprintf(want, sizeof want, "%s: not a GGUF file: bad magic 'GGML'", path);
    CHECK_MSG(strstr(mz_last_error(), want) == mz_last_error(), "%s", mz_last_error());

    mz_gguf_writer *w = mz_gguf_writer_init();
    size_t big = (size_t)9 << 20;
    char *s = malloc(big + 1);
    memset(s, 'z', big);
    s[big] = '\0';
    CHECK(mz_gguf_writer_add_str(w, "big.string", s) == MZ_OK);
    uint64_t ne[1] = {8};
    float x[8] = {0};
    CHECK(mz_gguf_writer_add_tensor(w, "t", MZ_DT_F32, 1, ne, x, sizeof x) == MZ_OK);
    path = t_tmp_path("bigmeta.gguf");
    CHECK(mz_gguf_writer_write(w, path) == MZ_OK);
    mz_gguf_writer_free(w);
    mz_status st = mz_gguf_open(path, &g);
    CHECK_MSG(st == MZ_OK, "%s", mz_last_error());
    if (st == MZ_OK) {
        mz_gguf_str v;
        CHECK(mz_gguf_get_str(g, "big.string", &v) == MZ_OK && v.len == big && v.ptr[big - 1] == 'z');
        CHECK(mz_gguf_find_tensor(g, "t") != NULL);
        mz_gguf_free(g);
    }
    free(s);
    remove(path);
}

static void test_real_model(void)
{
    const char *path = t_real_model_path();
    if (!path) {
        t_skip_part("real model", "models/SmolLM2-135M-Instruct.Q4_1.gguf absent (make model)");
        return;
    }
    mz_gguf *g;
    mz_status s = mz_gguf_open(path, &g);
    CHECK_MSG(s == MZ_OK, "%s", mz_last_error());
    if (s != MZ_OK) return;
    CHECK_EQ_INT(g->n_kv, 33);
    CHECK_EQ_INT(g->n_tensors, 272);
    mz_gguf_str arch;
    CHECK(mz_gguf_get_str(g, "general.architecture", &arch) == MZ_OK && strcmp(arch.ptr, "llama") == 0);
    uint32_t n_layer;
    CHECK(mz_gguf_get_u32(g, "llama.block_count", &n_layer) == MZ_OK && n_layer == 30);
    const mz_gguf_tensor *t = mz_gguf_find_tensor(g, "token_embd.weight");
    CHECK(t && t->type == MZ_DT_Q8_0 && t->ne[0] == 576 && t->ne[1] == 49152 && t->n_dims == 2);
    const void *tok;
    uint64_t n;
    CHECK(mz_gguf_get_arr(g, "tokenizer.ggml.tokens", MZ_GGUF_STRING, &tok, &n) == MZ_OK && n == 49152);
    uint64_t end = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++)
        end = MZ_MAX(end, g->data_offset + g->tensors[i].offset + g->tensors[i].nbytes);
    CHECK(end <= g->file_size);
    mz_gguf_free(g);
}

int main(void)
{
    test_header_errors();
    test_value_errors();
    test_duplicate_keys();
    test_tensor_errors();
    test_block_types();
    test_truncation_sweep();
    test_byte_flips();
    test_round_trip();
    test_copy_kvs();
    test_open();
    test_real_model();
    return t_done("test_gguf");
}
