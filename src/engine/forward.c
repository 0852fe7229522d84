/*
 * forward.c — the transformer forward pass (llama and qwen3) over a batch of
 * tokens, reading weights from per-block unit buffers and K/V from the
 * chunked cache.
 *
 * Per layer l, for tokens t at positions p0 + t:
 *   h = rmsnorm(x) * attn_norm
 *   q, k, v = Wq h, Wk h, Wv h                      (one fused thread-pool job)
 *   qwen3: q, k = per-head rmsnorm(q) * q_norm, rmsnorm(k) * k_norm
 *   q, k = rope(q, p), rope(k, p)                   (llama: adjacent pairs, qwen3: NeoX halves)
 *   K/V cache[l][p] = f16(k), f16(v)
 *   a = attention(q, cache[l][0 .. p])              (causal, online softmax over chunks)
 *   x += Wo a
 *   h = rmsnorm(x) * ffn_norm
 *   x += Wdown (silu(Wgate h) * Wup h)              (gate and up fused in one job)
 * then logits = Woutput (rmsnorm(x_last) * output_norm).
 */
#include "engine.h"

#include "../kernels/kernels.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* One matrix product of a fused job. */
typedef struct matmul_op {
    const mz_type_kernels *k;
    const mz_tensor *w;
    const void *xq;
    size_t xq_row_bytes;
    size_t n_tok;
    float *y;
    size_t y_stride;
} matmul_op;

/* Rows per claimed slice: a multiple of the 4-row register tile, small
 * enough that a thread the OS deschedules mid-job (the restore workers share
 * the cores during mz_prefill_restore) leaves little behind for the others,
 * large enough that the counter costs nothing next to the slice. */
#define MATMUL_SLICE_ROWS 64

typedef struct matmul_job {
    matmul_op ops[3];
    int n_ops;
    size_t slice_end[3];       /* cumulative slice counts per op */
    _Atomic size_t next;       /* next slice to claim, over all ops */
} matmul_job;

/* Threads claim row slices of the fused ops from one counter (dynamic
 * sharing); the values do not depend on who computes which slice. */
static void matmul_task(void *arg, int ith, int nth)
{
    (void)ith;
    (void)nth;
    matmul_job *job = arg;
    const size_t n_slices = job->slice_end[job->n_ops - 1];
    int i = 0;
    for (;;) {
        size_t s = atomic_fetch_add_explicit(&job->next, 1, memory_order_relaxed);
        if (s >= n_slices) break;
        while (s >= job->slice_end[i]) i++;
        const matmul_op *op = &job->ops[i];
        const size_t first = i ? job->slice_end[i - 1] : 0;
        const size_t n_rows = (size_t)op->w->ne[1];
        const size_t r0 = (s - first) * MATMUL_SLICE_ROWS;
        const size_t r1 = r0 + MATMUL_SLICE_ROWS < n_rows ? r0 + MATMUL_SLICE_ROWS : n_rows;
        mz_matmul_rows(op->k, op->w->data, op->w->row_bytes, op->w->ne[0], n_rows, op->xq,
                       op->xq_row_bytes, op->n_tok, op->y, op->y_stride, r0, r1);
    }
}

static void attn_task(void *arg, int ith, int nth) { mz_attn(arg, ith, nth); }
static void attn_merge_task(void *arg, int ith, int nth) { mz_attn_merge(arg, ith, nth); }

/* Converts n_tok rows of n_cols floats (row stride x_stride) into the
 * activation format of k; returns the converted row size. */
static size_t convert_rows(const mz_type_kernels *k, const float *x, size_t x_stride, size_t n_cols,
                           size_t n_tok, void *dst)
{
    size_t row_bytes = mz_dtype_row_bytes(k->vec_dot_type, n_cols);
    for (size_t t = 0; t < n_tok; t++)
        k->from_float(x + t * x_stride, (uint8_t *)dst + t * row_bytes, n_cols);
    return row_bytes;
}

/* Runs up to three products that share the same input rows x. The xq
 * scratch is split so weights with different activation formats coexist. */
static mz_status matmul_fused(mz_ctx_t *c, const mz_tensor *const *ws, float *const *ys, int n,
                              const float *x, size_t x_stride, size_t n_tok)
{
    matmul_job job = {.n_ops = n};
    uint8_t *slot = c->s.xq;
    int converted_type = -1;
    const void *converted = NULL;
    size_t converted_row = 0;
    for (int i = 0; i < n; i++) {
        const mz_type_kernels *k = mz_kernels_for(ws[i]->type);
        if (!k) return mz_fail(MZ_E_UNSUPPORTED, "no kernel for %s", mz_dtype_name(ws[i]->type));
        if (k->vec_dot_type != converted_type) {
            converted_row = convert_rows(k, x, x_stride, ws[i]->ne[0], n_tok, slot);
            converted = slot;
            converted_type = k->vec_dot_type;
            slot += c->s.xq_row_cap * (size_t)c->n_batch;
        }
        job.ops[i] = (matmul_op){.k = k, .w = ws[i], .xq = converted, .xq_row_bytes = converted_row,
                                 .n_tok = n_tok, .y = ys[i], .y_stride = ws[i]->ne[1]};
        const size_t slices = ((size_t)ws[i]->ne[1] + MATMUL_SLICE_ROWS - 1) / MATMUL_SLICE_ROWS;
        job.slice_end[i] = (i ? job.slice_end[i - 1] : 0) + slices;
    }
    atomic_init(&job.next, 0);
    mz_threadpool_run(c->pool, matmul_task, &job);
    return MZ_OK;
}

static void write_kv(mz_ctx_t *c, int layer, size_t pos, const float *k, const float *v)
{
    const mz_model_config *cfg = &c->model->cfg;
    uint8_t *chunk = c->kv.chunks[layer][pos / MZ_KV_CHUNK_TOKENS];
    int row = (int)(pos % MZ_KV_CHUNK_TOKENS);
    for (int h = 0; h < cfg->n_head_kv; h++) {
        mz_f32_to_f16_row(k + (size_t)h * cfg->head_dim,
                          mz_kv_chunk_k(chunk, cfg->n_head_kv, cfg->head_dim, h, row),
                          (size_t)cfg->head_dim);
        mz_f32_to_f16_row(v + (size_t)h * cfg->head_dim,
                          mz_kv_chunk_v(chunk, cfg->n_head_kv, cfg->head_dim, h, row),
                          (size_t)cfg->head_dim);
    }
}

static mz_status forward_step(mz_ctx_t *c, const mz_token *tokens, size_t n, bool want_logits);

/* The weight blocks acquire_layer pinned stay pinned for the whole step
 * (src/mem/weights.h): another session's eviction leaves them alone. */
mz_status mz_forward(mz_ctx_t *c, const mz_token *tokens, size_t n, bool want_logits)
{
    mz_status s = forward_step(c, tokens, n, want_logits);
    mz_mem_unpin_weights(c->mem);
    return s;
}

static mz_status forward_step(mz_ctx_t *c, const mz_token *tokens, size_t n, bool want_logits)
{
    const mz_model_t *m = c->model;
    const mz_model_config *cfg = &m->cfg;
    mz_scratch *s = &c->s;
    const size_t E = (size_t)cfg->n_embd, HD = (size_t)cfg->head_dim;
    const size_t QD = (size_t)cfg->n_head * HD, KVD = (size_t)cfg->n_head_kv * HD;
    const size_t F = (size_t)cfg->n_ff;
    const size_t p0 = c->n_tokens;
    mz_status st;
    MZ_ASSERT(n > 0 && n <= (size_t)c->n_batch);

    if ((st = mz_kv_cache_reserve(&c->kv, p0 + n))) return st;

    const mz_type_kernels *ke = mz_kernels_for(m->tok_embd.type);
    for (size_t t = 0; t < n; t++) {
        if (tokens[t] < 0 || tokens[t] >= cfg->n_vocab)
            return mz_fail(MZ_E_INVAL, "token id %d is outside the vocabulary (0..%d)", tokens[t],
                           cfg->n_vocab - 1);
        const uint8_t *row = (const uint8_t *)m->tok_embd.data + (size_t)tokens[t] * m->tok_embd.row_bytes;
        ke->to_float(row, s->x + t * E, E);
    }

    const float scale = 1.0f / sqrtf((float)HD);
    const size_t n_chunks = (p0 + n + MZ_KV_CHUNK_TOKENS - 1) / MZ_KV_CHUNK_TOKENS;
    for (int l = 0; l < cfg->n_layer; l++) {
        /* Never compute on evicted data: this layer's weights and every KV
         * chunk its attention reads (and the one it writes) must be resident.
         * Per unit, in forward order: during mz_prefill_restore this waits
         * for the restore workers (manager.c); otherwise it restores here. */
        mz_mem_pin_weights(c->mem, l); /* before acquire looks at it; mz_forward unpins */
        if ((st = mz_mem_acquire_layer(c->mem, l, n_chunks))) return st;
        const mz_block_weights *b = &m->blocks[l];
        for (size_t t = 0; t < n; t++)
            mz_rmsnorm(s->x + t * E, b->attn_norm.data, s->xn + t * E, E, cfg->norm_eps);
        {
            const mz_tensor *ws[3] = {&b->wq, &b->wk, &b->wv};
            float *ys[3] = {s->q, s->k, s->v};
            if ((st = matmul_fused(c, ws, ys, 3, s->xn, E, n))) return st;
        }
        for (size_t t = 0; t < n; t++) {
            float *q = s->q + t * QD, *k = s->k + t * KVD;
            if (cfg->arch == MZ_ARCH_QWEN3) {
                for (int h = 0; h < cfg->n_head; h++) {
                    mz_rmsnorm(q + h * HD, b->q_norm.data, s->head_tmp, HD, cfg->norm_eps);
                    memcpy(q + h * HD, s->head_tmp, HD * sizeof(float));
                }
                for (int h = 0; h < cfg->n_head_kv; h++) {
                    mz_rmsnorm(k + h * HD, b->k_norm.data, s->head_tmp, HD, cfg->norm_eps);
                    memcpy(k + h * HD, s->head_tmp, HD * sizeof(float));
                }
            }
            int pos = (int)(p0 + t);
            mz_rope(q, cfg->n_head, cfg->head_dim, cfg->n_rot, pos, cfg->rope_base, cfg->rope_neox);
            mz_rope(k, cfg->n_head_kv, cfg->head_dim, cfg->n_rot, pos, cfg->rope_base, cfg->rope_neox);
            write_kv(c, l, p0 + t, k, s->v + t * KVD);
        }
        mz_attn_args aa = {.q = s->q,
                           .out = s->attn,
                           .chunks = (const uint8_t *const *)c->kv.chunks[l],
                           .n_head = cfg->n_head,
                           .n_head_kv = cfg->n_head_kv,
                           .head_dim = cfg->head_dim,
                           .n_q = n,
                           .pos0 = p0,
                           .scale = scale};
        {
            /* A short query over a long context spreads its positions over the
             * threads and merges their softmax states afterwards; that needs
             * scratch (a few MB at 32k). Without it the kernel splits by head
             * only: same bits, less parallelism. */
            const size_t np = mz_attn_partial_floats(&aa);
            aa.partial = np ? malloc(np * sizeof(float)) : NULL;
            aa.partial_floats = aa.partial ? np : 0;
            _Atomic size_t work;
            atomic_init(&work, 0);
            aa.work = &work;
            mz_threadpool_run(c->pool, attn_task, &aa);
            atomic_store(&work, 0);
            if (aa.partial) mz_threadpool_run(c->pool, attn_merge_task, &aa);
            free(aa.partial);
        }
        {
            const mz_tensor *ws[1] = {&b->wo};
            float *ys[1] = {s->tmp};
            if ((st = matmul_fused(c, ws, ys, 1, s->attn, QD, n))) return st;
        }
        mz_add_inplace(s->x, s->tmp, n * E);
        for (size_t t = 0; t < n; t++)
            mz_rmsnorm(s->x + t * E, b->ffn_norm.data, s->xn + t * E, E, cfg->norm_eps);
        {
            const mz_tensor *ws[2] = {&b->w_gate, &b->w_up};
            float *ys[2] = {s->gate, s->up};
            if ((st = matmul_fused(c, ws, ys, 2, s->xn, E, n))) return st;
        }
        mz_swiglu(s->gate, s->up, s->hb, n * F);
        {
            const mz_tensor *ws[1] = {&b->w_down};
            float *ys[1] = {s->tmp};
            if ((st = matmul_fused(c, ws, ys, 1, s->hb, F, n))) return st;
        }
        mz_add_inplace(s->x, s->tmp, n * E);
    }

    if (want_logits) {
        mz_rmsnorm(s->x + (n - 1) * E, m->output_norm.data, s->xn, E, cfg->norm_eps);
        const mz_tensor *ws[1] = {&m->output};
        float *ys[1] = {s->logits};
        if ((st = matmul_fused(c, ws, ys, 1, s->xn, E, 1))) return st;
    }
    return MZ_OK;
}
