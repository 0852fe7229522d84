/*
 * gguf_write.c — GGUF v3 writer: metadata and tensors in, a little-endian
 * file out, tensor data padded to the alignment (default 32).
 *
 * Metadata is serialized into one byte buffer as it is added, so writing is
 * a concatenation and copying a 50k-token vocabulary costs one pass. Tensor
 * data is either copied at add time or produced by a fill callback at write
 * time (gen-model's multi-GB files), one tensor at a time through a single
 * scratch buffer.
 *
 * The writer validates what it needs to lay the file out (shapes, types,
 * unique names) but not metadata values, so tests can craft bad files.
 */
#define _POSIX_C_SOURCE 200809L
#include "gguf.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

typedef struct wbuf {
    uint8_t *p;
    size_t n, cap;
} wbuf;

typedef struct wtensor {
    char *name;
    int type;
    uint32_t n_dims;
    uint64_t ne[MZ_GGUF_MAX_DIMS];
    size_t nbytes;
    uint64_t offset;            /* assigned at write time */
    void *data;                 /* owned copy, or NULL when fill is set */
    mz_gguf_fill_fn fill;
    void *fill_user;
} wtensor;

struct mz_gguf_writer {
    wbuf meta;                  /* serialized kvs */
    uint64_t n_kv;
    char **keys;                /* for duplicate checks */
    size_t keys_cap;
    wtensor *tensors;
    size_t n_tensors, tensors_cap;
    uint32_t alignment;
    size_t align_value_pos;     /* where the general.alignment u32 sits in meta, or SIZE_MAX */
};

/* ---- byte buffer ---------------------------------------------------------------- */

static mz_status wbuf_reserve(wbuf *b, size_t extra)
{
    size_t need;
    if (!mz_add_ok(b->n, extra, &need)) return mz_fail(MZ_E_NOMEM, "gguf writer: size overflow");
    if (need <= b->cap) return MZ_OK;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < need) {
        if (cap > SIZE_MAX / 2) return mz_fail(MZ_E_NOMEM, "gguf writer: size overflow");
        cap *= 2;
    }
    uint8_t *p = realloc(b->p, cap);
    if (!p) return mz_fail(MZ_E_NOMEM, "gguf writer: out of memory (%zu bytes)", cap);
    b->p = p;
    b->cap = cap;
    return MZ_OK;
}

static mz_status wbuf_put(wbuf *b, const void *src, size_t n)
{
    mz_status s = wbuf_reserve(b, n);
    if (s != MZ_OK) return s;
    if (n) memcpy(b->p + b->n, src, n);
    b->n += n;
    return MZ_OK;
}

static void store_le(uint8_t *p, uint64_t v, unsigned n)
{
    for (unsigned i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static mz_status wbuf_le(wbuf *b, uint64_t v, unsigned n)
{
    uint8_t tmp[8];
    store_le(tmp, v, n);
    return wbuf_put(b, tmp, n);
}

static mz_status wbuf_str(wbuf *b, const char *s, uint64_t len)
{
    mz_status st = wbuf_le(b, len, 8);
    return st != MZ_OK ? st : wbuf_put(b, s, (size_t)len);
}

/* ---- init / free ---------------------------------------------------------------- */

mz_gguf_writer *mz_gguf_writer_init(void)
{
    mz_gguf_writer *w = mz_calloc(1, sizeof *w);
    if (!w) return NULL;
    w->alignment = MZ_GGUF_DEFAULT_ALIGNMENT;
    w->align_value_pos = SIZE_MAX;
    return w;
}

void mz_gguf_writer_free(mz_gguf_writer *w)
{
    if (!w) return;
    for (uint64_t i = 0; i < w->n_kv; i++) free(w->keys[i]);
    free(w->keys);
    for (size_t i = 0; i < w->n_tensors; i++) {
        free(w->tensors[i].name);
        free(w->tensors[i].data);
    }
    free(w->tensors);
    free(w->meta.p);
    free(w);
}

static bool is_pow2(uint64_t a) { return a && !(a & (a - 1)); }

void mz_gguf_writer_set_alignment(mz_gguf_writer *w, uint32_t alignment)
{
    MZ_ASSERT(is_pow2(alignment));
    w->alignment = alignment;
    if (w->align_value_pos != SIZE_MAX) store_le(w->meta.p + w->align_value_pos, alignment, 4);
}

/* ---- metadata ------------------------------------------------------------------- */

static char *dup_str(const char *s, size_t n)
{
    char *p = mz_malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

/* Records a new key and writes its length, bytes and type; the caller then
 * appends the value. On failure meta is left as it was. */
static mz_status begin_kv(mz_gguf_writer *w, const char *key, mz_gguf_type type, size_t *mark)
{
    size_t klen = strlen(key);
    if (klen == 0) return mz_fail(MZ_E_INVAL, "gguf writer: empty key");
    for (uint64_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->keys[i], key) == 0)
            return mz_fail(MZ_E_INVAL, "gguf writer: duplicate key '%s'", key);
    if (w->n_kv == w->keys_cap) {
        size_t cap = w->keys_cap ? w->keys_cap * 2 : 32;
        char **k = realloc(w->keys, cap * sizeof *k);
        if (!k) return mz_fail(MZ_E_NOMEM, "gguf writer: out of memory");
        w->keys = k;
        w->keys_cap = cap;
    }
    *mark = w->meta.n;
    mz_status s = wbuf_str(&w->meta, key, klen);
    if (s == MZ_OK) s = wbuf_le(&w->meta, (uint64_t)type, 4);
    if (s != MZ_OK) w->meta.n = *mark;
    return s;
}

/* Commits a kv started by begin_kv once its value is written (s == MZ_OK),
 * or rolls meta back to mark. */
static mz_status end_kv(mz_gguf_writer *w, const char *key, size_t mark, mz_status s)
{
    char *k = s == MZ_OK ? dup_str(key, strlen(key)) : NULL;
    if (s == MZ_OK && !k) s = MZ_E_NOMEM;
    if (s != MZ_OK) {
        w->meta.n = mark;
        return s;
    }
    w->keys[w->n_kv++] = k;
    return MZ_OK;
}

static mz_status add_scalar(mz_gguf_writer *w, const char *key, mz_gguf_type type, uint64_t bits,
                            unsigned size)
{
    size_t mark;
    mz_status s = begin_kv(w, key, type, &mark);
    if (s != MZ_OK) return s;
    size_t value_pos = w->meta.n;
    s = end_kv(w, key, mark, wbuf_le(&w->meta, bits, size));
    /* A valid alignment entry also drives the layout, and set_alignment
     * later patches this same value. */
    if (s == MZ_OK && type == MZ_GGUF_UINT32 && strcmp(key, "general.alignment") == 0) {
        w->align_value_pos = value_pos;
        if (is_pow2(bits)) w->alignment = (uint32_t)bits;
    }
    return s;
}

mz_status mz_gguf_writer_add_u32(mz_gguf_writer *w, const char *key, uint32_t v)
{
    return add_scalar(w, key, MZ_GGUF_UINT32, v, 4);
}

mz_status mz_gguf_writer_add_i32(mz_gguf_writer *w, const char *key, int32_t v)
{
    return add_scalar(w, key, MZ_GGUF_INT32, (uint32_t)v, 4);
}

mz_status mz_gguf_writer_add_f32(mz_gguf_writer *w, const char *key, float v)
{
    uint32_t bits;
    memcpy(&bits, &v, 4);
    return add_scalar(w, key, MZ_GGUF_FLOAT32, bits, 4);
}

mz_status mz_gguf_writer_add_bool(mz_gguf_writer *w, const char *key, bool v)
{
    return add_scalar(w, key, MZ_GGUF_BOOL, v ? 1 : 0, 1);
}

mz_status mz_gguf_writer_add_str(mz_gguf_writer *w, const char *key, const char *v)
{
    size_t mark;
    mz_status s = begin_kv(w, key, MZ_GGUF_STRING, &mark);
    if (s != MZ_OK) return s;
    return end_kv(w, key, mark, wbuf_str(&w->meta, v, strlen(v)));
}

/* Bytes of one scalar of type t; 0 for string/array. Mirrors the reader. */
static unsigned scalar_size(mz_gguf_type t)
{
    static const uint8_t sz[MZ_GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return (unsigned)t < MZ_GGUF_TYPE_COUNT ? sz[t] : 0;
}

/* The raw bits of a parsed scalar, as the file stores them. */
static uint64_t scalar_bits(const mz_gguf_kv *kv)
{
    if (kv->type == MZ_GGUF_FLOAT32) {
        float f = (float)kv->v.f64;
        uint32_t b;
        memcpy(&b, &f, 4);
        return b;
    }
    if (kv->type == MZ_GGUF_FLOAT64) {
        uint64_t b;
        memcpy(&b, &kv->v.f64, 8);
        return b;
    }
    if (kv->type == MZ_GGUF_INT8 || kv->type == MZ_GGUF_INT16 || kv->type == MZ_GGUF_INT32 ||
        kv->type == MZ_GGUF_INT64)
        return (uint64_t)kv->v.i64; /* store_le keeps the low bytes: two's complement */
    return kv->v.u64;
}

mz_status mz_gguf_writer_add_kv(mz_gguf_writer *w, const mz_gguf_kv *kv)
{
    if ((unsigned)kv->type >= MZ_GGUF_TYPE_COUNT)
        return mz_fail(MZ_E_INVAL, "gguf writer: bad value type %d", (int)kv->type);
    /* Keys from a parsed file may hold interior NULs; strlen() truncation
     * would silently rename them. */
    if (strlen(kv->key.ptr) != kv->key.len)
        return mz_fail(MZ_E_INVAL, "gguf writer: key with an embedded NUL");
    const char *key = kv->key.ptr;
    if (kv->type == MZ_GGUF_STRING) {
        size_t mark;
        mz_status s = begin_kv(w, key, MZ_GGUF_STRING, &mark);
        if (s != MZ_OK) return s;
        return end_kv(w, key, mark, wbuf_str(&w->meta, kv->v.str.ptr, kv->v.str.len));
    }
    if (kv->type != MZ_GGUF_ARRAY) return add_scalar(w, key, kv->type, scalar_bits(kv), scalar_size(kv->type));

    if ((unsigned)kv->arr_type >= MZ_GGUF_TYPE_COUNT || kv->arr_type == MZ_GGUF_ARRAY)
        return mz_fail(MZ_E_INVAL, "gguf writer: key '%s': arrays of %s are not supported", key,
                       mz_gguf_type_name(kv->arr_type));
    size_t mark;
    mz_status s = begin_kv(w, key, MZ_GGUF_ARRAY, &mark);
    if (s != MZ_OK) return s;
    s = wbuf_le(&w->meta, (uint64_t)kv->arr_type, 4);
    if (s == MZ_OK) s = wbuf_le(&w->meta, kv->arr_n, 8);
    if (s == MZ_OK && kv->arr_type == MZ_GGUF_STRING) {
        const mz_gguf_str *strs = kv->arr_data;
        for (uint64_t i = 0; i < kv->arr_n && s == MZ_OK; i++)
            s = wbuf_str(&w->meta, strs[i].ptr, strs[i].len);
    } else if (s == MZ_OK) {
        size_t nbytes;
        if (kv->arr_n > SIZE_MAX || !mz_mul_ok((size_t)kv->arr_n, scalar_size(kv->arr_type), &nbytes))
            s = mz_fail(MZ_E_INVAL, "gguf writer: array '%s' too large", key);
        else
            s = wbuf_put(&w->meta, kv->arr_data, nbytes); /* host is little-endian */
    }
    return end_kv(w, key, mark, s);
}

/* ---- tensors -------------------------------------------------------------------- */

static mz_status add_tensor_common(mz_gguf_writer *w, const char *name, int type, uint32_t n_dims,
                                   const uint64_t *ne, wtensor **out)
{
    if (n_dims == 0 || n_dims > MZ_GGUF_MAX_DIMS)
        return mz_fail(MZ_E_INVAL, "gguf writer: tensor '%s': n_dims %u", name, n_dims);
    if (!mz_dtype_known(type))
        return mz_fail(MZ_E_INVAL, "gguf writer: tensor '%s': unknown type %d", name, type);
    uint64_t rows = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] == 0 || (d > 0 && rows > UINT64_MAX / ne[d]))
            return mz_fail(MZ_E_INVAL, "gguf writer: tensor '%s': bad dimension ne[%u]", name, d);
        if (d > 0) rows *= ne[d];
    }
    size_t row_bytes = mz_dtype_row_bytes(type, ne[0]);
    size_t nbytes;
    if (!row_bytes || rows > SIZE_MAX || !mz_mul_ok(row_bytes, (size_t)rows, &nbytes))
        return mz_fail(MZ_E_INVAL,
                       "gguf writer: tensor '%s': ne[0] = %llu does not fit type %s "
                       "(block length %zu) or the size overflows",
                       name, (unsigned long long)ne[0], mz_dtype_name(type),
                       mz_dtype_block_len(type));
    for (size_t i = 0; i < w->n_tensors; i++)
        if (strcmp(w->tensors[i].name, name) == 0)
            return mz_fail(MZ_E_INVAL, "gguf writer: duplicate tensor name '%s'", name);
    if (w->n_tensors == w->tensors_cap) {
        size_t cap = w->tensors_cap ? w->tensors_cap * 2 : 64;
        wtensor *t = realloc(w->tensors, cap * sizeof *t);
        if (!t) return mz_fail(MZ_E_NOMEM, "gguf writer: out of memory");
        w->tensors = t;
        w->tensors_cap = cap;
    }
    wtensor *t = &w->tensors[w->n_tensors];
    memset(t, 0, sizeof *t);
    t->name = dup_str(name, strlen(name));
    if (!t->name) return MZ_E_NOMEM;
    t->type = type;
    t->n_dims = n_dims;
    for (uint32_t d = 0; d < MZ_GGUF_MAX_DIMS; d++) t->ne[d] = d < n_dims ? ne[d] : 1;
    t->nbytes = nbytes;
    *out = t;
    return MZ_OK;
}

mz_status mz_gguf_writer_add_tensor(mz_gguf_writer *w, const char *name, int type,
                                    uint32_t n_dims, const uint64_t *ne, const void *data,
                                    size_t nbytes)
{
    wtensor *t;
    mz_status s = add_tensor_common(w, name, type, n_dims, ne, &t);
    if (s != MZ_OK) return s;
    if (nbytes != t->nbytes) {
        s = mz_fail(MZ_E_INVAL, "gguf writer: tensor '%s': %zu bytes given, shape needs %zu",
                    name, nbytes, t->nbytes);
        goto out_free_name;
    }
    t->data = mz_malloc(nbytes);
    if (!t->data) {
        s = MZ_E_NOMEM;
        goto out_free_name;
    }
    memcpy(t->data, data, nbytes);
    w->n_tensors++;
    return MZ_OK;

out_free_name:
    free(t->name);
    return s;
}

mz_status mz_gguf_writer_add_tensor_fill(mz_gguf_writer *w, const char *name, int type,
                                         uint32_t n_dims, const uint64_t *ne,
                                         mz_gguf_fill_fn fill, void *user)
{
    wtensor *t;
    mz_status s = add_tensor_common(w, name, type, n_dims, ne, &t);
    if (s != MZ_OK) return s;
    t->fill = fill;
    t->fill_user = user;
    w->n_tensors++;
    return MZ_OK;
}

/* ---- output --------------------------------------------------------------------- */

/* Where bytes go: a FILE or a growing memory buffer. */
typedef struct sink {
    FILE *f;
    wbuf *mem;
    uint64_t written;
} sink;

static mz_status sink_put(sink *k, const void *p, size_t n)
{
    k->written += n;
    if (k->mem) return wbuf_put(k->mem, p, n);
    if (n && fwrite(p, 1, n, k->f) != n) return mz_fail(MZ_E_IO, "write failed: %s", strerror(errno));
    return MZ_OK;
}

static mz_status sink_pad(sink *k, uint64_t alignment)
{
    static const uint8_t zeros[256];
    uint64_t pad = (alignment - k->written % alignment) % alignment;
    mz_status s = MZ_OK;
    while (pad && s == MZ_OK) {
        size_t n = (size_t)MZ_MIN(pad, (uint64_t)sizeof zeros);
        s = sink_put(k, zeros, n);
        pad -= n;
    }
    return s;
}

static mz_status sink_le(sink *k, uint64_t v, unsigned n)
{
    uint8_t tmp[8];
    store_le(tmp, v, n);
    return sink_put(k, tmp, n);
}

static mz_status write_all(mz_gguf_writer *w, sink *k)
{
    mz_status s;
    void *scratch = NULL;
    size_t scratch_bytes = 0;

    if (w->alignment != MZ_GGUF_DEFAULT_ALIGNMENT && w->align_value_pos == SIZE_MAX) {
        s = add_scalar(w, "general.alignment", MZ_GGUF_UINT32, w->alignment, 4);
        if (s != MZ_OK) return s;
    }
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_tensors; i++) {
        wtensor *t = &w->tensors[i];
        t->offset = off;
        off += (t->nbytes + w->alignment - 1) / w->alignment * w->alignment;
        if (t->fill && t->nbytes > scratch_bytes) scratch_bytes = t->nbytes;
    }
    if (scratch_bytes && !(scratch = mz_malloc(scratch_bytes))) return MZ_E_NOMEM;

    if ((s = sink_le(k, MZ_GGUF_MAGIC, 4)) != MZ_OK) goto out_free_scratch;
    if ((s = sink_le(k, 3, 4)) != MZ_OK) goto out_free_scratch;
    if ((s = sink_le(k, w->n_tensors, 8)) != MZ_OK) goto out_free_scratch;
    if ((s = sink_le(k, w->n_kv, 8)) != MZ_OK) goto out_free_scratch;
    if ((s = sink_put(k, w->meta.p, w->meta.n)) != MZ_OK) goto out_free_scratch;
    for (size_t i = 0; i < w->n_tensors && s == MZ_OK; i++) {
        const wtensor *t = &w->tensors[i];
        size_t nlen = strlen(t->name);
        s = sink_le(k, nlen, 8);
        if (s == MZ_OK) s = sink_put(k, t->name, nlen);
        if (s == MZ_OK) s = sink_le(k, t->n_dims, 4);
        for (uint32_t d = 0; d < t->n_dims && s == MZ_OK; d++) s = sink_le(k, t->ne[d], 8);
        if (s == MZ_OK) s = sink_le(k, (uint64_t)t->type, 4);
        if (s == MZ_OK) s = sink_le(k, t->offset, 8);
    }
    if (s != MZ_OK) goto out_free_scratch;
    if ((s = sink_pad(k, w->alignment)) != MZ_OK) goto out_free_scratch;
    for (size_t i = 0; i < w->n_tensors; i++) {
        const wtensor *t = &w->tensors[i];
        const void *data = t->data;
        if (t->fill) {
            if ((s = t->fill(t->fill_user, scratch, t->nbytes)) != MZ_OK) {
                mz_fail_prefix(s, "tensor '%s'", t->name);
                goto out_free_scratch;
            }
            data = scratch;
        }
        if ((s = sink_put(k, data, t->nbytes)) != MZ_OK) goto out_free_scratch;
        if ((s = sink_pad(k, w->alignment)) != MZ_OK) goto out_free_scratch;
    }
out_free_scratch:
    free(scratch);
    return s;
}

mz_status mz_gguf_writer_write(mz_gguf_writer *w, const char *path)
{
    mz_status s;
    char *tmp = NULL;
    size_t plen = strlen(path);
    if (!(tmp = mz_malloc(plen + 5))) return MZ_E_NOMEM;
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);

    sink k = {0};
    k.f = fopen(tmp, "wb");
    if (!k.f) {
        s = mz_fail(MZ_E_IO, "%s: cannot create: %s", tmp, strerror(errno));
        goto out_free_tmp;
    }
    /* Large stdio buffer: tensor writes are big, metadata writes tiny. */
    setvbuf(k.f, NULL, _IOFBF, (size_t)1 << 20);
    s = write_all(w, &k);
    if (fclose(k.f) != 0 && s == MZ_OK) s = mz_fail(MZ_E_IO, "close failed: %s", strerror(errno));
    if (s == MZ_OK && rename(tmp, path) != 0)
        s = mz_fail(MZ_E_IO, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
    if (s != MZ_OK) {
        remove(tmp);
        mz_fail_prefix(s, "%s", path);
    }
out_free_tmp:
    free(tmp);
    return s;
}

mz_status mz_gguf_writer_write_mem(mz_gguf_writer *w, uint8_t **out, size_t *len)
{
    wbuf mem = {0};
    sink k = {.mem = &mem};
    mz_status s = write_all(w, &k);
    if (s != MZ_OK) {
        free(mem.p);
        *out = NULL;
        *len = 0;
        return s;
    }
    *out = mem.p;
    *len = mem.n;
    return MZ_OK;
}
