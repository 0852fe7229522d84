/*
 * forward.c — the transformer forward pass (llama, qwen2, qwen3, gemma3)
 * over a batch of tokens, reading weights from per-block unit buffers and
 * K/V from the chunked cache.
 *
 * x = embedding rows (gemma3: times sqrt(n_embd)); per layer l, for tokens t
 * at positions p0 + t:
 *   h = rmsnorm(x) * attn_norm
 *   q, k, v = Wq h, Wk h, Wv h                      (one fused thread-pool job)
 *   qwen2: q, k, v += bq, bk, bv
 *   qwen3, gemma3: q, k = per-head rmsnorm(q) * q_norm, rmsnorm(k) * k_norm
 *   q, k = rope(q, p), rope(k, p)                   (llama: adjacent pairs, others: NeoX halves;
 *                                                    gemma3's local layers: their own base)
 *   K/V cache[l][p] = f16(k), f16(v)
 *   a = attention(q, cache[l][lo .. p])             (causal, online softmax over chunks; lo = 0,
 *                                                    or p - n_swa + 1 in a sliding-window layer)
 *   o = Wo a;  gemma3: o = rmsnorm(o) * post_attn_norm
 *   x += o
 *   h = rmsnorm(x) * ffn_norm
 *   f = Wdown (act(Wgate h) * Wup h)                (act: silu, gemma3 gelu-tanh; gate and up
 *                                                    fused in one job)
 *   gemma3: f = rmsnorm(f) * post_ffn_norm
 *   x += f
 * then logits = Woutput (rmsnorm(x_last) * output_norm), soft-capped when the
 * model says so.
 */
#include "engine.h"

#include "../kernels/kernels.h"
#include "work_split.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One matrix product of a fused job. */
typedef struct matmul_op {
    const mz_type_kernels *k;
    const mz_tensor *w;
    const void *xq;
    size_t xq_row_bytes;
    bool xq_is_f32; /* xq: F32 rows of F16 values for k->gemm_xf */
    size_t n_tok;
    float *y;
    size_t y_stride;
    size_t slice_rows;
} matmul_op;

/* Row slices of MZ_WORK_SPLIT=slices (the default split is work_split.h's):
 * a multiple of 8 (the register tiles and the x8 weight groups), every
 * token per slice; batches use 64 rows, a few tokens (decode) smaller
 * slices so that a 576-row matrix gives each of 16 threads about two. With
 * 576 rows that is 9 slices for a batch: at 8 or 16 threads the output and
 * down products of SmolLM2 kept 9 threads busy (work_split.h). */
#define MATMUL_SLICE_ROWS 64
#define MATMUL_SLICE_ROWS_MIN 16

static size_t slice_rows_for(size_t n_rows, size_t n_tok, int nth)
{
    if (n_tok >= 8) return MATMUL_SLICE_ROWS;
    size_t r = (n_rows / (2 * (size_t)nth) + 7) / 8 * 8;
    return r < MATMUL_SLICE_ROWS_MIN ? MATMUL_SLICE_ROWS_MIN : r > MATMUL_SLICE_ROWS ? MATMUL_SLICE_ROWS : r;
}

typedef struct matmul_job {
    matmul_op ops[3];
    int n_ops;
    size_t slice_end[3];       /* row slices (MZ_WORK_SPLIT=slices): cumulative counts per op */
    const mz_split_plan *plan; /* the planned split (default); NULL: row slices */
    _Atomic size_t next;       /* next slice or item to claim */
} matmul_job;

/* Whether the environment variable `name` is `value`, read once: *cache is
 * -1 until then, 0 or 1 after (the diagnostic switches below). */
static bool env_is_once(_Atomic int *cache, const char *name, const char *value)
{
    int v = atomic_load_explicit(cache, memory_order_relaxed);
    if (v < 0) {
        const char *env = getenv(name);
        v = env && !strcmp(env, value);
        atomic_store_explicit(cache, v, memory_order_relaxed);
    }
    return v == 1;
}

/* Which split matmul_fused uses for a batch: the planned one (work_split.h) unless
 * MZ_WORK_SPLIT=slices asks for fixed row slices over all tokens, and
 * attention's groups in index order instead of heaviest first (kept to
 * compare the two in one run on a many-core machine; same values). */
static bool use_row_slices(void)
{
    static _Atomic int slices = -1;
    return env_is_once(&slices, "MZ_WORK_SPLIT", "slices");
}

static void matmul_op_run(const matmul_op *op, size_t r0, size_t r1, size_t t0, size_t t1)
{
    const size_t n_rows = (size_t)op->w->ne[1];
    if (op->xq_is_f32)
        mz_matmul_rows_xf(op->k, op->w->data, op->w->row_bytes, op->w->ne[0], n_rows,
                          (const float *)((const uint8_t *)op->xq + t0 * op->xq_row_bytes), op->xq_row_bytes,
                          t1 - t0, op->y + t0 * op->y_stride, op->y_stride, r0, r1);
    else
        mz_matmul_rows(op->k, op->w->data, op->w->row_bytes, op->w->ne[0], n_rows,
                       (const uint8_t *)op->xq + t0 * op->xq_row_bytes, op->xq_row_bytes, t1 - t0,
                       op->y + t0 * op->y_stride, op->y_stride, r0, r1);
}

/* Threads claim row slices of the fused ops, or the plan's items, from one
 * counter (dynamic sharing; run with mz_threadpool_run_claimed, so a
 * descheduled thread that claimed nothing is not waited for); the values do
 * not depend on who computes what. */
static void matmul_task(void *arg, int ith, int nth)
{
    (void)ith;
    (void)nth;
    matmul_job *job = arg;
    const mz_split_plan *pl = job->plan;
    if (pl) {
        const size_t n_items = mz_split_n_items(pl);
        for (;;) {
            const size_t it = atomic_fetch_add_explicit(&job->next, 1, memory_order_relaxed);
            if (it >= n_items) break;
            const size_t piece = it / pl->n_tb;
            size_t t0, t1;
            mz_split_tokens(pl, it % pl->n_tb, &t0, &t1);
            if (t0 == t1) continue;
            for (size_t g = pl->piece_seg[piece]; g < pl->piece_seg[piece + 1]; g++)
                matmul_op_run(&job->ops[pl->segs[g].op], pl->segs[g].r0, pl->segs[g].r1, t0, t1);
        }
        return;
    }
    const size_t n_slices = job->slice_end[job->n_ops - 1];
    int i = 0;
    for (;;) {
        size_t s = atomic_fetch_add_explicit(&job->next, 1, memory_order_relaxed);
        if (s >= n_slices) break;
        while (s >= job->slice_end[i]) i++;
        const matmul_op *op = &job->ops[i];
        const size_t first = i ? job->slice_end[i - 1] : 0;
        const size_t n_rows = (size_t)op->w->ne[1];
        const size_t r0 = (s - first) * op->slice_rows;
        const size_t r1 = r0 + op->slice_rows < n_rows ? r0 + op->slice_rows : n_rows;
        matmul_op_run(op, r0, r1, 0, op->n_tok);
    }
}

static void attn_task(void *arg, int ith, int nth) { mz_attn(arg, ith, nth); }
static void attn_merge_task(void *arg, int ith, int nth) { mz_attn_merge(arg, ith, nth); }

/* Per-token work of a batch (norms, rope, K/V writes, residual adds, swiglu,
 * activation conversion) spread over the pool in contiguous token ranges:
 * on one thread it capped prefill at 16 threads to the speed of 4-8 (Amdahl).
 * Small batches (decode) stay on the calling thread, where a fork-join would
 * cost more than the work. Each token's values do not depend on the split. */
#define PAR_MIN_FLOATS 32768 /* below this many floats of work: one thread */

typedef struct rows_job {
    void (*fn)(void *ctx, size_t t0, size_t t1);
    void *ctx;
    size_t n, n_blocks;
    _Atomic size_t next; /* next block to claim */
} rows_job;

/* Blocks of contiguous tokens claimed from one counter, several per thread,
 * so a thread that arrives late or is descheduled leaves its share to the
 * others (mz_threadpool_run_claimed). */
#define PAR_BLOCKS_PER_THREAD 4

static void rows_task(void *arg, int ith, int nth)
{
    (void)ith;
    (void)nth;
    rows_job *j = arg;
    for (;;) {
        const size_t b = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (b >= j->n_blocks) break;
        const size_t t0 = j->n * b / j->n_blocks, t1 = j->n * (b + 1) / j->n_blocks;
        if (t0 < t1) j->fn(j->ctx, t0, t1);
    }
}

static void par_rows(mz_ctx_t *c, size_t n, size_t floats_per_row, void (*fn)(void *, size_t, size_t), void *ctx)
{
    const int nth = mz_threadpool_n_threads(c->pool);
    if (n < 2 || n * floats_per_row < PAR_MIN_FLOATS || nth == 1) {
        fn(ctx, 0, n);
        return;
    }
    const size_t n_blocks = MZ_MIN(n, (size_t)nth * PAR_BLOCKS_PER_THREAD);
    rows_job j = {.fn = fn, .ctx = ctx, .n = n, .n_blocks = n_blocks};
    atomic_init(&j.next, 0);
    mz_threadpool_run_claimed(c->pool, rows_task, &j);
}

typedef struct convert_ctx {
    const mz_type_kernels *k;
    const float *x;
    size_t x_stride, n_cols, row_bytes;
    bool to_f32;
    uint8_t *dst;
} convert_ctx;

static void convert_range(void *arg, size_t t0, size_t t1)
{
    const convert_ctx *cc = arg;
    for (size_t t = t0; t < t1; t++) {
        if (cc->to_f32)
            mz_f32_round_f16_row(cc->x + t * cc->x_stride, (float *)(cc->dst + t * cc->row_bytes), cc->n_cols);
        else
            cc->k->from_float(cc->x + t * cc->x_stride, cc->dst + t * cc->row_bytes, cc->n_cols);
    }
}

/* Converts n_tok rows of n_cols floats (row stride x_stride) into the
 * activation format of k — or, to_f32, into F32 rows of exactly those F16
 * values for k->gemm_xf; returns the converted row size. */
static size_t convert_rows(mz_ctx_t *c, const mz_type_kernels *k, bool to_f32, const float *x,
                           size_t x_stride, size_t n_cols, size_t n_tok, void *dst)
{
    convert_ctx cc = {.k = k, .x = x, .x_stride = x_stride, .n_cols = n_cols, .to_f32 = to_f32,
                      .row_bytes = to_f32 ? n_cols * sizeof(float) : mz_dtype_row_bytes(k->vec_dot_type, n_cols),
                      .dst = dst};
    par_rows(c, n_tok, n_cols, convert_range, &cc);
    return cc.row_bytes;
}

/* Runs up to three products that share the same input rows x. The xq
 * scratch is split so weights with different activation formats coexist. */
static mz_status matmul_fused(mz_ctx_t *c, const mz_tensor *const *ws, float *const *ys, int n,
                              const float *x, size_t x_stride, size_t n_tok)
{
    matmul_job job = {.n_ops = n};
    uint8_t *slot = c->s.xq;
    /* The activation format of the last conversion: a vec_dot_type, or
     * MZ_DT_COUNT + the type for F32 rows of its values (gemm_xf). */
    int converted_fmt = -1;
    const void *converted = NULL;
    size_t converted_row = 0;
    for (int i = 0; i < n; i++) {
        const mz_type_kernels *k = mz_kernels_for_layout(ws[i]->type, ws[i]->layout);
        if (!k) return mz_fail(MZ_E_UNSUPPORTED, "no kernel for %s", mz_dtype_name(ws[i]->type));
        /* A batch's F16 products read F32 activations converted here once
         * (exactly the F16 values): in the tiles' own per-piece conversion the
         * same rows went F16 -> F32 once per 64-row piece, ~20 % of a piece's
         * time. The F32 rows fit the slot (xq_row_cap is F32-wide). Decode
         * keeps the F16 rows (its tiles convert them in registers). */
        const bool to_f32 = k->gemm_xf && n_tok >= 2;
        const int fmt = to_f32 ? MZ_DT_COUNT + k->vec_dot_type : k->vec_dot_type;
        if (fmt != converted_fmt) {
            converted_row = convert_rows(c, k, to_f32, x, x_stride, ws[i]->ne[0], n_tok, slot);
            converted = slot;
            converted_fmt = fmt;
            slot += c->s.xq_row_cap * (size_t)c->n_batch;
        }
        const size_t sr = slice_rows_for((size_t)ws[i]->ne[1], n_tok, mz_threadpool_n_threads(c->pool));
        job.ops[i] = (matmul_op){.k = k, .w = ws[i], .xq = converted, .xq_row_bytes = converted_row,
                                 .xq_is_f32 = to_f32, .n_tok = n_tok, .y = ys[i], .y_stride = ws[i]->ne[1],
                                 .slice_rows = sr};
        const size_t slices = ((size_t)ws[i]->ne[1] + sr - 1) / sr;
        job.slice_end[i] = (i ? job.slice_end[i - 1] : 0) + slices;
    }
    /* Decode keeps the row slices (multiples of 8 rows, 16-64): the plan's
     * decode pieces (18 rows of a 576-row product at 16 threads) ran
     * SmolLM2's F16 tg128 at 153-208 tok/s against 227-245 with the slices
     * on the 16-vCPU device (BENCHMARKS, "Thread scaling", part 4). */
    mz_split_plan plan;
    if (!use_row_slices() && n_tok >= MZ_SPLIT_DECODE_TOKENS) {
        mz_split_op so[3];
        for (int i = 0; i < n; i++)
            so[i] = (mz_split_op){.n_rows = (size_t)ws[i]->ne[1], .n_cols = (size_t)ws[i]->ne[0],
                                  .row_group = job.ops[i].k->row_group > 4 ? (size_t)job.ops[i].k->row_group : 4};
        mz_split_plan_make(&plan, so, n, n_tok, mz_threadpool_n_threads(c->pool));
        job.plan = &plan;
    }
    atomic_init(&job.next, 0);
    mz_threadpool_run_claimed(c->pool, matmul_task, &job);
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

/* What the per-token steps of one layer read (par_rows contexts). */
typedef struct layer_ctx {
    mz_ctx_t *c;
    const mz_model_config *cfg;
    const mz_block_weights *b;
    int layer;
    size_t p0, E, QD, KVD, F, HD;
} layer_ctx;

static void norm_attn_range(void *arg, size_t t0, size_t t1)
{
    const layer_ctx *lc = arg;
    mz_scratch *s = &lc->c->s;
    for (size_t t = t0; t < t1; t++)
        mz_rmsnorm(s->x + t * lc->E, lc->b->attn_norm.data, s->xn + t * lc->E, lc->E, lc->cfg->norm_eps);
}

/* Biases, per-head q/k norms, rope, and the K/V rows into the cache. */
static void qkv_post_range(void *arg, size_t t0, size_t t1)
{
    const layer_ctx *lc = arg;
    const mz_model_config *cfg = lc->cfg;
    mz_scratch *s = &lc->c->s;
    const size_t HD = lc->HD;
    float tmp[1024]; /* head_dim <= 1024 (model.c) */
    MZ_ASSERT(HD <= 1024);
    const float base = mz_layer_is_local(cfg, lc->layer) ? cfg->rope_base_local : cfg->rope_base;
    for (size_t t = t0; t < t1; t++) {
        float *q = s->q + t * lc->QD, *k = s->k + t * lc->KVD;
        if (cfg->qkv_bias) {
            mz_add_inplace(q, lc->b->bq.data, lc->QD);
            mz_add_inplace(k, lc->b->bk.data, lc->KVD);
            mz_add_inplace(s->v + t * lc->KVD, lc->b->bv.data, lc->KVD);
        }
        if (cfg->qk_norm) {
            for (int h = 0; h < cfg->n_head; h++) {
                mz_rmsnorm(q + h * HD, lc->b->q_norm.data, tmp, HD, cfg->norm_eps);
                memcpy(q + h * HD, tmp, HD * sizeof(float));
            }
            for (int h = 0; h < cfg->n_head_kv; h++) {
                mz_rmsnorm(k + h * HD, lc->b->k_norm.data, tmp, HD, cfg->norm_eps);
                memcpy(k + h * HD, tmp, HD * sizeof(float));
            }
        }
        int pos = (int)(lc->p0 + t);
        mz_rope(q, cfg->n_head, cfg->head_dim, cfg->n_rot, pos, base, cfg->rope_freq_factors, cfg->rope_neox);
        mz_rope(k, cfg->n_head_kv, cfg->head_dim, cfg->n_rot, pos, base, cfg->rope_freq_factors, cfg->rope_neox);
        write_kv(lc->c, lc->layer, lc->p0 + t, k, s->v + t * lc->KVD);
    }
}

/* x += o for tokens [t0, t1), o = tmp or (post_norms) rmsnorm(tmp) * post,
 * which goes through xn (free at both places this runs). */
static void add_output(const layer_ctx *lc, const mz_tensor *post, size_t t0, size_t t1)
{
    mz_scratch *s = &lc->c->s;
    const float *o = s->tmp + t0 * lc->E;
    if (lc->cfg->post_norms) {
        for (size_t t = t0; t < t1; t++)
            mz_rmsnorm(s->tmp + t * lc->E, post->data, s->xn + t * lc->E, lc->E, lc->cfg->norm_eps);
        o = s->xn + t0 * lc->E;
    }
    mz_add_inplace(s->x + t0 * lc->E, o, (t1 - t0) * lc->E);
}

/* x += Wo a, then the ffn norm of x. */
static void resid_norm_ffn_range(void *arg, size_t t0, size_t t1)
{
    const layer_ctx *lc = arg;
    mz_scratch *s = &lc->c->s;
    add_output(lc, &lc->b->post_attn_norm, t0, t1);
    for (size_t t = t0; t < t1; t++)
        mz_rmsnorm(s->x + t * lc->E, lc->b->ffn_norm.data, s->xn + t * lc->E, lc->E, lc->cfg->norm_eps);
}

static void ffn_act_range(void *arg, size_t t0, size_t t1)
{
    const layer_ctx *lc = arg;
    mz_scratch *s = &lc->c->s;
    if (lc->cfg->ffn_gelu)
        mz_geglu(s->gate + t0 * lc->F, s->up + t0 * lc->F, s->hb + t0 * lc->F, (t1 - t0) * lc->F);
    else
        mz_swiglu(s->gate + t0 * lc->F, s->up + t0 * lc->F, s->hb + t0 * lc->F, (t1 - t0) * lc->F);
}

static void resid_range(void *arg, size_t t0, size_t t1)
{
    const layer_ctx *lc = arg;
    add_output(lc, &lc->b->post_ffn_norm, t0, t1);
}

static mz_status forward_step(mz_ctx_t *c, const mz_token *tokens, size_t n, bool want_logits);

/* ---- stage timing (MZ_FORWARD_PHASES=1) ------------------------------------------------------
 * Where a step's wall time goes, stage by stage, to tell a kernel's share
 * from the glue's at a given thread count. The caller thread takes part in
 * every job and returns when the job is done, so a clock read after each
 * stage charges the stage its whole wall time. Steps of one token (decode)
 * and of more (prefill) are summed apart. Off, it costs one branch a stage. */
enum {
    PH_EMBED, PH_ACQUIRE, PH_NORM, PH_QKV, PH_QKV_POST, PH_ATTN, PH_WO, PH_FFN_NORM,
    PH_GATE_UP, PH_FFN_ACT, PH_DOWN, PH_RESID, PH_LOGITS, PH_N
};
static const char *const phase_names[PH_N] = {
    "embed", "acquire", "attn_norm", "qkv", "qkv_post", "attention", "wo", "ffn_norm",
    "gate_up", "ffn_act", "down", "resid", "logits",
};

struct mz_forward_phases {
    uint64_t ns[2][PH_N]; /* [prefill?][stage] */
    uint64_t steps[2], tokens[2];
};

static bool phases_wanted(void)
{
    static _Atomic int wanted = -1;
    return env_is_once(&wanted, "MZ_FORWARD_PHASES", "1");
}

typedef struct phase_clock {
    struct mz_forward_phases *ph; /* NULL: off */
    int batch;                    /* 0 decode, 1 prefill */
    uint64_t t;
} phase_clock;

static phase_clock phase_start(mz_ctx_t *c, size_t n)
{
    phase_clock pc = {0};
    if (!phases_wanted()) return pc;
    if (!c->phases) c->phases = calloc(1, sizeof *c->phases);
    if (!c->phases) return pc;
    pc.ph = c->phases;
    pc.batch = n > 1;
    pc.ph->steps[pc.batch]++;
    pc.ph->tokens[pc.batch] += n;
    pc.t = mz_time_ns();
    return pc;
}

static void phase_mark(phase_clock *pc, int stage)
{
    if (!pc->ph) return;
    uint64_t now = mz_time_ns();
    pc->ph->ns[pc->batch][stage] += now - pc->t;
    pc->t = now;
}

void mz_forward_phases_report(mz_ctx_t *c)
{
    struct mz_forward_phases *ph = c->phases;
    if (!ph) return;
    c->phases = NULL;
    for (int b = 0; b < 2; b++) {
        if (!ph->steps[b]) continue;
        uint64_t total = 0;
        for (int i = 0; i < PH_N; i++) total += ph->ns[b][i];
        fprintf(stderr, "forward phases, %s: %llu steps, %llu tokens, %.1f ms, threads %d:",
                b ? "prefill" : "decode", (unsigned long long)ph->steps[b], (unsigned long long)ph->tokens[b],
                (double)total / 1e6, mz_threadpool_n_threads(c->pool));
        for (int i = 0; i < PH_N; i++)
            fprintf(stderr, " %s=%.1fms(%.1f%%)", phase_names[i], (double)ph->ns[b][i] / 1e6,
                    total ? 100.0 * (double)ph->ns[b][i] / (double)total : 0.0);
        fputc('\n', stderr);
    }
    free(ph);
}

/* The weight blocks acquire_layer pinned stay pinned for the whole step
 * (src/mem/weights.h): another session's eviction leaves them alone. */
mz_status mz_forward(mz_ctx_t *c, const mz_token *tokens, size_t n, bool want_logits)
{
    mz_status s = forward_step(c, tokens, n, want_logits);
    mz_mem_unpin_weights(c->mem);
    return s;
}

/* ---- KV chunks read from their compressed copies during a restore ----------------------- *
 *
 * While a pipelined restore runs, a layer's chunks that the job would
 * decode from the compressed stack are lent to the pass instead of waited
 * for (mz_mem_acquire_window_lend). Where the chunk's codec reads ranges of
 * whole head rows (q8, q4, q4r, q8-q4r, raw), attention reads each tile's
 * rows from the compressed copy as it goes (mz_attn_args.read_rows): the
 * pass reads the compressed bytes once and writes nothing. Other codecs'
 * chunks are decoded by the pool into one buffer of the step, reused by
 * every layer, and attention reads them there. Either way the values are
 * the codec's decode, the ones the job writes into the chunks, so the pass
 * computes the same bits; what it saves is waiting for the job's fresh
 * pages, the bound of a restore from memory. mz_restore_experimental's
 * lend_whole decodes every lent chunk into the buffer (to compare). */
typedef struct lent_kv {
    mz_mem *mm;
    mz_kv_lent *lent;              /* [max_chunks] */
    const uint8_t **ptrs;          /* [max_chunks]: the layer's chunk table, lent ones redirected */
    size_t *slot;                  /* [max_chunks]: a chunk read by rows: its index in lent */
    size_t *dec;                   /* [max_chunks]: the lent chunks decoded into buf, by index in lent */
    uint8_t *buf;                  /* decoded lent chunks */
    size_t buf_bytes, n, n_dec, chunk_bytes, row_values;
    bool whole;                    /* decode every lent chunk into buf */
    _Atomic size_t next;
    _Atomic int err;
} lent_kv;

static void lent_fail(lent_kv *lk, mz_status s)
{
    int z = 0;
    atomic_compare_exchange_strong(&lk->err, &z, (int)s);
}

static void lent_decode_task(void *arg, int ith, int nth)
{
    (void)ith;
    (void)nth;
    lent_kv *lk = arg;
    for (size_t i; (i = atomic_fetch_add(&lk->next, 1)) < lk->n_dec;) {
        mz_status s = mz_mem_decode_lent(lk->mm, &lk->lent[lk->dec[i]], lk->buf + i * lk->chunk_bytes);
        if (s) lent_fail(lk, s);
    }
}

/* attention's read_rows: a failed read leaves zeros (finite, so the kernel
 * runs on) and fails the step once attention is done. */
static void lent_read_rows(void *ctx, size_t chunk, size_t v0, mz_f16 *dst, size_t k)
{
    lent_kv *lk = ctx;
    mz_status s = mz_mem_read_lent_rows(lk->mm, &lk->lent[lk->slot[chunk]], v0, dst, k);
    if (s) {
        memset(dst, 0, k * sizeof *dst);
        lent_fail(lk, s);
    }
}

/* Points the layer's chunk table at the lent chunks: NULL (read by rows)
 * or decoded into the buffer. Returns the table attention reads. */
static mz_status lent_kv_prepare(mz_ctx_t *c, lent_kv *lk, int layer, size_t n_chunks,
                                 const uint8_t *const **table)
{
    *table = (const uint8_t *const *)c->kv.chunks[layer];
    if (lk->n == 0) return MZ_OK;
    for (size_t i = 0; i < n_chunks; i++) lk->ptrs[i] = c->kv.chunks[layer][i];
    lk->n_dec = 0;
    for (size_t i = 0; i < lk->n; i++) {
        const size_t ch = lk->lent[i].chunk;
        if (!lk->whole && mz_mem_lent_rows_readable(&lk->lent[i], lk->row_values)) {
            lk->ptrs[ch] = NULL;
            lk->slot[ch] = i;
        } else {
            lk->dec[lk->n_dec++] = i;
        }
    }
    atomic_store(&lk->err, 0);
    if (lk->n_dec) {
        const size_t need = lk->n_dec * lk->chunk_bytes;
        if (need > lk->buf_bytes) {
            mz_pages_free(lk->buf, lk->buf_bytes);
            lk->buf_bytes = 0;
            if (!(lk->buf = mz_pages_alloc(need)))
                return mz_fail(MZ_E_NOMEM, "out of memory reading %zu KV chunks from the compressed stack",
                               lk->n_dec);
            lk->buf_bytes = need;
        }
        atomic_store(&lk->next, 0);
        mz_threadpool_run_claimed(c->pool, lent_decode_task, lk);
        int e = atomic_load(&lk->err);
        if (e) return (mz_status)e;
        for (size_t i = 0; i < lk->n_dec; i++)
            lk->ptrs[lk->lent[lk->dec[i]].chunk] = lk->buf + i * lk->chunk_bytes;
    }
    *table = lk->ptrs;
    return MZ_OK;
}

static void lent_kv_free(lent_kv *lk)
{
    if (lk->mm) mz_mem_end_lending(lk->mm);
    mz_pages_free(lk->buf, lk->buf_bytes);
    free(lk->lent);
    free((void *)lk->ptrs);
    free(lk->slot);
    free(lk->dec);
}

static mz_status forward_layers(mz_ctx_t *c, const mz_token *tokens, size_t n, bool want_logits,
                                lent_kv *lk);

static mz_status forward_step(mz_ctx_t *c, const mz_token *tokens, size_t n, bool want_logits)
{
    lent_kv lk = {0};
    if (c->lend_kv && mz_mem_restore_running(c->mem)) {
        c->lend_kv = false; /* the request's first step only: later ones find more restored */
        const size_t mc = c->kv.max_chunks;
        lk.mm = c->mem;
        lk.chunk_bytes = c->kv.chunk_bytes;
        lk.row_values = (size_t)c->model->cfg.head_dim;
        lk.whole = c->lend_whole;
        lk.lent = malloc(mc * sizeof *lk.lent);
        lk.ptrs = malloc(mc * sizeof *lk.ptrs);
        lk.slot = malloc(mc * sizeof *lk.slot);
        lk.dec = malloc(mc * sizeof *lk.dec);
        if (!lk.lent || !lk.ptrs || !lk.slot || !lk.dec) {
            lent_kv_free(&lk);
            return mz_fail(MZ_E_NOMEM, "out of memory");
        }
    }
    mz_status s = forward_layers(c, tokens, n, want_logits, &lk);
    lent_kv_free(&lk);
    return s;
}

static mz_status forward_layers(mz_ctx_t *c, const mz_token *tokens, size_t n, bool want_logits,
                                lent_kv *lk)
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
    phase_clock pc = phase_start(c, n);

    for (size_t t = 0; t < n; t++) {
        if (tokens[t] < 0 || tokens[t] >= cfg->n_vocab)
            return mz_fail(MZ_E_INVAL, "token id %d is outside the vocabulary (0..%d)", tokens[t],
                           cfg->n_vocab - 1);
        mz_weight_row_to_float(m->tok_embd.type, m->tok_embd.layout, m->tok_embd.data, (size_t)tokens[t], E,
                               s->x + t * E);
        if (cfg->embd_scale != 1.0f)
            for (size_t i = 0; i < E; i++) s->x[t * E + i] *= cfg->embd_scale;
    }

    const size_t n_chunks = (p0 + n + MZ_KV_CHUNK_TOKENS - 1) / MZ_KV_CHUNK_TOKENS;
    phase_mark(&pc, PH_EMBED);
    for (int l = 0; l < cfg->n_layer; l++) {
        /* Never compute on evicted data: this layer's weights and every KV
         * chunk its attention reads (and the one it writes) must be resident.
         * Per unit, in forward order: during mz_prefill_restore this waits
         * for the restore workers (manager.c); otherwise it restores here. */
        mz_mem_pin_weights(c->mem, l); /* before acquire looks at it; mz_forward unpins */
        if ((st = mz_mem_acquire_window_lend(c->mem, l, p0, n_chunks, p0 / MZ_KV_CHUNK_TOKENS, lk->lent,
                                             &lk->n)))
            return st;
        phase_mark(&pc, PH_ACQUIRE);
        const mz_block_weights *b = &m->blocks[l];
        layer_ctx lc = {.c = c, .cfg = cfg, .b = b, .layer = l, .p0 = p0, .E = E, .QD = QD, .KVD = KVD,
                        .F = F, .HD = HD};
        par_rows(c, n, E, norm_attn_range, &lc);
        phase_mark(&pc, PH_NORM);
        {
            const mz_tensor *ws[3] = {&b->wq, &b->wk, &b->wv};
            float *ys[3] = {s->q, s->k, s->v};
            if ((st = matmul_fused(c, ws, ys, 3, s->xn, E, n))) return st;
        }
        phase_mark(&pc, PH_QKV);
        par_rows(c, n, QD + 2 * KVD, qkv_post_range, &lc);
        phase_mark(&pc, PH_QKV_POST);
        const uint8_t *const *chunk_table;
        if ((st = lent_kv_prepare(c, lk, l, n_chunks, &chunk_table))) return st;
        mz_attn_args aa = {.q = s->q,
                           .out = s->attn,
                           .chunks = chunk_table,
                           .n_head = cfg->n_head,
                           .n_head_kv = cfg->n_head_kv,
                           .head_dim = cfg->head_dim,
                           .n_q = n,
                           .pos0 = p0,
                           .scale = cfg->attn_scale,
                           .window = mz_layer_window(cfg, l),
                           .read_rows = lk->n ? lent_read_rows : NULL,
                           .read_ctx = lk};
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
            aa.work_in_index_order = use_row_slices();
            mz_threadpool_run_claimed(c->pool, attn_task, &aa);
            atomic_store(&work, 0);
            if (aa.partial) mz_threadpool_run_claimed(c->pool, attn_merge_task, &aa);
            free(aa.partial);
        }
        if (lk->n) {
            mz_mem_end_lending(c->mem);
            if ((st = (mz_status)atomic_load(&lk->err))) return st;
        }
        phase_mark(&pc, PH_ATTN);
        {
            const mz_tensor *ws[1] = {&b->wo};
            float *ys[1] = {s->tmp};
            if ((st = matmul_fused(c, ws, ys, 1, s->attn, QD, n))) return st;
        }
        phase_mark(&pc, PH_WO);
        par_rows(c, n, 2 * E, resid_norm_ffn_range, &lc);
        phase_mark(&pc, PH_FFN_NORM);
        {
            const mz_tensor *ws[2] = {&b->w_gate, &b->w_up};
            float *ys[2] = {s->gate, s->up};
            if ((st = matmul_fused(c, ws, ys, 2, s->xn, E, n))) return st;
        }
        phase_mark(&pc, PH_GATE_UP);
        par_rows(c, n, 4 * F, ffn_act_range, &lc);
        phase_mark(&pc, PH_FFN_ACT);
        {
            const mz_tensor *ws[1] = {&b->w_down};
            float *ys[1] = {s->tmp};
            if ((st = matmul_fused(c, ws, ys, 1, s->hb, F, n))) return st;
        }
        phase_mark(&pc, PH_DOWN);
        par_rows(c, n, E, resid_range, &lc);
        phase_mark(&pc, PH_RESID);
    }

    if (want_logits) {
        mz_rmsnorm(s->x + (n - 1) * E, m->output_norm.data, s->xn, E, cfg->norm_eps);
        const mz_tensor *ws[1] = {&m->output};
        float *ys[1] = {s->logits};
        if ((st = matmul_fused(c, ws, ys, 1, s->xn, E, 1))) return st;
        if (cfg->logit_softcap > 0.0f)
            for (int i = 0; i < cfg->n_vocab; i++)
                s->logits[i] = cfg->logit_softcap * tanhf(s->logits[i] / cfg->logit_softcap);
    }
    phase_mark(&pc, PH_LOGITS);
    return MZ_OK;
}
