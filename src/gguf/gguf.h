/*
 * gguf.h — GGUF v3 reader and writer.
 *
 * The reader trusts nothing in the file: every count, length, offset and type
 * is checked against the bytes actually present and against SIZE_MAX before it
 * is used, and allocations are bounded by the file size. A malformed file gives
 * MZ_E_FORMAT (or MZ_E_UNSUPPORTED for a known but unsupported tensor type)
 * with a message naming the problem and where it is (key or tensor name,
 * byte offset).
 *
 * The parsed object owns copies of all metadata (keys, strings, arrays) and
 * the tensor table; it does not hold the file open or mapped, so tensor data
 * is read by the caller with pread() at mz_gguf.data_offset + tensor.offset.
 */
#ifndef MZ_GGUF_H
#define MZ_GGUF_H

#include "../core/core.h"
#include "../core/dtype.h"

#include <stdbool.h>
#include <stdint.h>

#define MZ_GGUF_MAGIC 0x46554747u /* "GGUF" little-endian */
#define MZ_GGUF_DEFAULT_ALIGNMENT 32
#define MZ_GGUF_MAX_DIMS 4

typedef enum mz_gguf_type {
    MZ_GGUF_UINT8 = 0,
    MZ_GGUF_INT8 = 1,
    MZ_GGUF_UINT16 = 2,
    MZ_GGUF_INT16 = 3,
    MZ_GGUF_UINT32 = 4,
    MZ_GGUF_INT32 = 5,
    MZ_GGUF_FLOAT32 = 6,
    MZ_GGUF_BOOL = 7,
    MZ_GGUF_STRING = 8,
    MZ_GGUF_ARRAY = 9,
    MZ_GGUF_UINT64 = 10,
    MZ_GGUF_INT64 = 11,
    MZ_GGUF_FLOAT64 = 12,
    MZ_GGUF_TYPE_COUNT
} mz_gguf_type;

typedef struct mz_gguf_str {
    const char *ptr;           /* NUL-terminated copy (may contain interior NULs; use len) */
    uint64_t len;
} mz_gguf_str;

typedef struct mz_gguf_kv {
    mz_gguf_str key;
    mz_gguf_type type;
    /* scalars */
    union {
        uint64_t u64;          /* all unsigned ints and bool */
        int64_t i64;           /* all signed ints */
        double f64;            /* float32 and float64 */
        mz_gguf_str str;
    } v;
    /* arrays (type == MZ_GGUF_ARRAY) */
    mz_gguf_type arr_type;
    uint64_t arr_n;
    const void *arr_data;      /* numeric: packed little-endian elements of arr_type;
                                  string: mz_gguf_str[arr_n]; nested arrays are rejected */
} mz_gguf_kv;

typedef struct mz_gguf_tensor {
    mz_gguf_str name;
    uint32_t n_dims;
    uint64_t ne[MZ_GGUF_MAX_DIMS]; /* ne[0] = row length; unused dims are 1 */
    int type;                  /* mz_dtype id */
    uint64_t offset;           /* relative to data_offset, aligned */
    uint64_t nbytes;
    uint64_t n_elements;
} mz_gguf_tensor;

typedef struct mz_gguf {
    uint32_t version;
    uint64_t n_kv;
    mz_gguf_kv *kv;
    uint64_t n_tensors;
    mz_gguf_tensor *tensors;
    uint64_t alignment;
    uint64_t data_offset;      /* absolute file offset of the tensor data section */
    uint64_t file_size;
    void *arena;               /* internal: owns the copies */
} mz_gguf;

/* Parses a GGUF file. On error *out is NULL and mz_last_error() names the
 * problem, prefixed with the path. */
mz_status mz_gguf_open(const char *path, mz_gguf **out);
/* Parses from memory: buf holds the first len bytes of a file of file_size
 * bytes (len == file_size for a whole file). Tensor data must lie within
 * file_size. Used by mz_gguf_open and by the fuzzer. If the metadata runs past
 * len but not past file_size the result is MZ_E_RANGE (give more bytes). */
mz_status mz_gguf_parse(const uint8_t *buf, size_t len, uint64_t file_size, mz_gguf **out);
/* The same, accepting tensors of every known type whether mzcache computes
 * with it or not (info, quantize and the dequantize tool only read; the
 * model loader refuses such a type by name). The file is checked as
 * strictly otherwise: block counts, shapes and data bounds of every type. */
mz_status mz_gguf_open_any_type(const char *path, mz_gguf **out);
mz_status mz_gguf_parse_any_type(const uint8_t *buf, size_t len, uint64_t file_size, mz_gguf **out);
void mz_gguf_free(mz_gguf *g);

/* Lookups: NULL / -1 when absent. */
const mz_gguf_kv *mz_gguf_find(const mz_gguf *g, const char *key);
const mz_gguf_tensor *mz_gguf_find_tensor(const mz_gguf *g, const char *name);

/* Typed getters: MZ_OK, or MZ_E_FORMAT if present with a wrong type,
 * or MZ_E_INVAL if absent (message names the key). Integer getters accept any
 * integer type whose value fits. */
mz_status mz_gguf_get_u32(const mz_gguf *g, const char *key, uint32_t *out);
mz_status mz_gguf_get_f32(const mz_gguf *g, const char *key, float *out);
mz_status mz_gguf_get_bool(const mz_gguf *g, const char *key, bool *out);
mz_status mz_gguf_get_str(const mz_gguf *g, const char *key, mz_gguf_str *out);
/* Array of the given element type; *n = count. */
mz_status mz_gguf_get_arr(const mz_gguf *g, const char *key, mz_gguf_type elem_type,
                          const void **data, uint64_t *n);

const char *mz_gguf_type_name(mz_gguf_type t);

/* Reads exactly n bytes at off (pread, EINTR and short reads retried);
 * MZ_E_IO naming `what` on an error or an early end of file. */
mz_status mz_file_read_at(int fd, void *dst, size_t n, uint64_t off, const char *what);

/* ---- writer (used by gen-model and tests that craft files) ---------------- */

typedef struct mz_gguf_writer mz_gguf_writer;

mz_gguf_writer *mz_gguf_writer_init(void);
void mz_gguf_writer_free(mz_gguf_writer *w);
void mz_gguf_writer_set_alignment(mz_gguf_writer *w, uint32_t alignment);
/* Metadata; values are copied. Keys are added in call order. */
mz_status mz_gguf_writer_add_u32(mz_gguf_writer *w, const char *key, uint32_t v);
mz_status mz_gguf_writer_add_i32(mz_gguf_writer *w, const char *key, int32_t v);
mz_status mz_gguf_writer_add_f32(mz_gguf_writer *w, const char *key, float v);
mz_status mz_gguf_writer_add_bool(mz_gguf_writer *w, const char *key, bool v);
mz_status mz_gguf_writer_add_str(mz_gguf_writer *w, const char *key, const char *v);
/* Copies a kv from a parsed file, any type including arrays. */
mz_status mz_gguf_writer_add_kv(mz_gguf_writer *w, const mz_gguf_kv *kv);
/* Tensor: data (nbytes = row_bytes(type, ne[0]) * ne[1]*...) is copied. */
mz_status mz_gguf_writer_add_tensor(mz_gguf_writer *w, const char *name, int type,
                                    uint32_t n_dims, const uint64_t *ne, const void *data,
                                    size_t nbytes);
/* Produces a tensor's data into dst[nbytes] while the file is written. A
 * status other than MZ_OK aborts the write with that status. */
typedef mz_status (*mz_gguf_fill_fn)(void *user, void *dst, size_t nbytes);
/* Like add_tensor, but the data is produced by fill(user, ...) during
 * mz_gguf_writer_write, one tensor at a time, so a file larger than memory can
 * be written: the writer holds one buffer the size of the largest such tensor.
 * user must stay valid until the write. */
mz_status mz_gguf_writer_add_tensor_fill(mz_gguf_writer *w, const char *name, int type,
                                         uint32_t n_dims, const uint64_t *ne,
                                         mz_gguf_fill_fn fill, void *user);
/* Writes the file (header, tensor infos, padded data) to path + ".tmp" and
 * renames it into place, so a failed write leaves no partial file at path.
 * Metadata values are not validated: tests use the writer to craft bad files.
 * Adding "general.alignment" as a uint32 power of two also sets the layout
 * alignment, as mz_gguf_writer_set_alignment does. */
mz_status mz_gguf_writer_write(mz_gguf_writer *w, const char *path);
/* Same bytes as mz_gguf_writer_write, into a malloc'd buffer (*out, *len);
 * the caller frees it. For tests and the fuzzer's seed builder. */
mz_status mz_gguf_writer_write_mem(mz_gguf_writer *w, uint8_t **out, size_t *len);

#endif /* MZ_GGUF_H */
