/*
 * quantize.c — `mzcache quantize`: a GGUF file rewritten in another mix
 * (see quantize.h). One tensor at a time through the writer's fill
 * callback: memory is the largest source tensor plus a row of floats per
 * thread; the rows of a tensor are shared among threads, each row converted
 * on its own, so the file's bytes do not depend on the thread count.
 */
#define _POSIX_C_SOURCE 200809L
#include "quantize.h"

#include "../kernels/kernels.h"
#include "../gguf/gguf.h"
#include "quant_mix.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

typedef struct q_job {
    int fd;
    const mz_gguf *g;
    uint8_t *src;               /* one source tensor's bytes */
    float *rows;                /* one row of floats per thread */
    size_t row_cap;             /* floats per thread's row */
    int n_threads;
} q_job;

typedef struct q_tensor {
    q_job *job;
    const mz_gguf_tensor *t;
    int to;                     /* its type in the new file */
} q_tensor;

/* F32 has no quantizer in the kernel table: its "quantization" is a copy. */
static void store_row(int type, const float *x, void *dst, size_t n)
{
    if (type == MZ_DT_F32) memcpy(dst, x, n * sizeof *x);
    else mz_kernels_ref(type)->quantize(x, dst, n);
}

static void load_row(int type, const void *src, float *y, size_t n)
{
    if (type == MZ_DT_F32) memcpy(y, src, n * sizeof *y);
    else mz_kernels_ref(type)->to_float(src, y, n);
}

/* Rows [r0, r1) of one tensor: each row is converted on its own, so the
 * bytes do not depend on how the rows are shared among threads. */
typedef struct q_fill {
    const q_tensor *qt;
    uint8_t *dst;
} q_fill;

static void convert_rows(void *arg, size_t r0, size_t r1, int slice)
{
    const q_fill *f = arg;
    const mz_gguf_tensor *t = f->qt->t;
    const q_job *j = f->qt->job;
    float *row = j->rows + (size_t)slice * j->row_cap;
    size_t n0 = (size_t)t->ne[0];
    size_t in_rb = mz_dtype_row_bytes(t->type, t->ne[0]), out_rb = mz_dtype_row_bytes(f->qt->to, t->ne[0]);
    for (size_t r = r0; r < r1; r++) {
        load_row(t->type, j->src + r * in_rb, row, n0);
        store_row(f->qt->to, row, f->dst + r * out_rb, n0);
    }
}

static mz_status fill_tensor(void *user, void *dst, size_t nbytes)
{
    q_tensor *qt = user;
    const mz_gguf_tensor *t = qt->t;
    q_job *j = qt->job;
    const char *name = t->name.ptr;
    if (qt->to == t->type)
        return mz_file_read_at(j->fd, dst, nbytes, j->g->data_offset + t->offset, name);
    mz_status s = mz_file_read_at(j->fd, j->src, (size_t)t->nbytes, j->g->data_offset + t->offset, name);
    if (s) return s;
    size_t rows = (size_t)(t->n_elements / t->ne[0]);
    MZ_ASSERT(mz_dtype_row_bytes(qt->to, t->ne[0]) * rows == nbytes);
    q_fill f = {.qt = qt, .dst = dst};
    mz_run_row_slices(rows, j->n_threads, convert_rows, &f);
    return MZ_OK;
}

static bool has_to_float(int type) { return type == MZ_DT_F32 || (mz_kernels_ref(type) && mz_kernels_ref(type)->to_float); }
static bool has_quantize(int type) { return type == MZ_DT_F32 || (mz_kernels_ref(type) && mz_kernels_ref(type)->quantize); }

/* Every kv but the two the mix sets, then those two. */
static mz_status copy_metadata(mz_gguf_writer *w, const mz_gguf *g, const mz_qmix *mix)
{
    mz_status s = MZ_OK;
    for (uint64_t i = 0; i < g->n_kv && !s; i++) {
        const char *k = g->kv[i].key.ptr;
        if (!strcmp(k, "general.file_type") || !strcmp(k, "general.quantization_version")) continue;
        s = mz_gguf_writer_add_kv(w, &g->kv[i]);
    }
    if (!s) s = mz_gguf_writer_add_u32(w, "general.quantization_version", 2);
    if (!s) s = mz_gguf_writer_add_u32(w, "general.file_type", mix->ftype);
    return s;
}

mz_status mz_quantize_file(const char *in_path, const char *out_path, const mz_quantize_params *p)
{
    mz_status s;
    mz_gguf *g = NULL;
    mz_gguf_writer *w = NULL;
    q_tensor *qts = NULL;
    q_job job = {.fd = -1};
    mz_kernels_init();
    const mz_qmix *mix = mz_qmix_find(p->mix);
    if (!mix)
        return mz_fail(MZ_E_INVAL, "quantize: unknown mix '%s' (known: %s)", p->mix ? p->mix : "",
                       mz_qmix_names());
    if ((s = mz_gguf_open_any_type(in_path, &g))) return s;
    mz_qmix_model m;
    if ((s = mz_qmix_model_from_gguf(g, &m))) {
        mz_fail_prefix(s, "%s", in_path);
        goto out_free_gguf;
    }
    if (!(qts = mz_calloc(g->n_tensors ? (size_t)g->n_tensors : 1, sizeof *qts))) {
        s = MZ_E_NOMEM;
        goto out_free_gguf;
    }
    size_t max_src = 0, max_row = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const mz_gguf_tensor *t = &g->tensors[i];
        int to = mz_qmix_tensor_type(mix, p->pure, &m, t->name.ptr, t->n_dims, t->ne, t->type);
        qts[i] = (q_tensor){.job = &job, .t = t, .to = to};
        if (to == t->type) continue;
        if (!has_to_float(t->type) || !has_quantize(to)) {
            s = mz_fail(MZ_E_UNSUPPORTED,
                        "tensor %s: cannot convert %s to %s (types mzcache computes with: %s)",
                        t->name.ptr, mz_dtype_name(t->type), mz_dtype_name(to), mz_dtype_supported_names());
            goto out_free_tensors;
        }
        max_src = MZ_MAX(max_src, (size_t)t->nbytes);
        max_row = MZ_MAX(max_row, (size_t)t->ne[0]);
    }
    job.g = g;
    job.src = mz_malloc(max_src ? max_src : 1);
    job.n_threads = p->n_threads > 0 ? p->n_threads : mz_n_cpus();
    job.n_threads = MZ_MAX(1, MZ_MIN(job.n_threads, MZ_ROW_SLICES_MAX));
    job.row_cap = max_row ? max_row : 1;
    job.rows = mz_malloc((size_t)job.n_threads * job.row_cap * sizeof *job.rows);
    if (!job.src || !job.rows) {
        s = MZ_E_NOMEM;
        goto out_free_bufs;
    }
    if ((job.fd = open(in_path, O_RDONLY | O_CLOEXEC)) < 0) {
        s = mz_fail(MZ_E_IO, "%s: cannot open: %s", in_path, strerror(errno));
        goto out_free_bufs;
    }
    if (!(w = mz_gguf_writer_init())) {
        s = MZ_E_NOMEM;
        goto out_close;
    }
    if ((s = copy_metadata(w, g, mix))) goto out_free_writer;
    for (uint64_t i = 0; i < g->n_tensors && !s; i++) {
        const mz_gguf_tensor *t = &g->tensors[i];
        s = mz_gguf_writer_add_tensor_fill(w, t->name.ptr, qts[i].to, t->n_dims, t->ne, fill_tensor, &qts[i]);
    }
    if (!s) s = mz_gguf_writer_write(w, out_path);
    for (uint64_t i = 0; i < g->n_tensors && !s && p->on_tensor; i++)
        p->on_tensor(p->user, g->tensors[i].name.ptr, g->tensors[i].type, qts[i].to);
out_free_writer:
    mz_gguf_writer_free(w);
out_close:
    close(job.fd);
out_free_bufs:
    free(job.src);
    free(job.rows);
out_free_tensors:
    free(qts);
out_free_gguf:
    mz_gguf_free(g);
    if (s) mz_fail_prefix(s, "quantize");
    return s;
}
