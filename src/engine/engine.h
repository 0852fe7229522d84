/*
 * engine.h — a context (one conversation) and its forward pass.
 *
 * The forward pass reads weights through each block's unit buffer and the KV
 * cache through per-layer chunk-pointer arrays; it never assumes one
 * contiguous model or cache.
 */
#ifndef MZ_ENGINE_H
#define MZ_ENGINE_H

#include "../kv/kv_cache.h"
#include "../mem/manager.h"
#include "../model/model.h"
#include "../sched/threadpool.h"

/* Scratch for one forward step of up to n_batch tokens. */
typedef struct mz_scratch {
    float *x;        /* [B][n_embd]  residual stream */
    float *xn;       /* [B][max(n_embd, q_dim)] normed input / attention output */
    float *q;        /* [B][n_head * head_dim] */
    float *k;        /* [B][n_head_kv * head_dim] */
    float *v;        /* [B][n_head_kv * head_dim] */
    float *attn;     /* [B][n_head * head_dim] */
    float *tmp;      /* [B][n_embd] */
    float *gate;     /* [B][n_ff] */
    float *up;       /* [B][n_ff] */
    float *hb;       /* [B][n_ff] silu(gate) * up */
    float *head_tmp; /* [head_dim] */
    void *xq;        /* activations converted for dot products: [B][row bytes of max(n_embd,q_dim,n_ff)] */
    size_t xq_row_cap;
    float *logits;   /* [n_vocab] */
} mz_scratch;

struct mz_ctx {
    mz_model_t *model;
    mz_ctx_params params;
    size_t n_ctx;
    int n_batch;
    mz_kv_cache kv;
    mz_mem *mem;           /* units, eviction and restore of kv and the model's blocks */
    mz_threadpool *pool;
    mz_scratch s;
    mz_token *tokens;      /* [n_ctx] tokens whose KV is in the cache */
    size_t n_tokens;
    bool have_logits;
    mz_ctx_timings timings;
    char errmsg[1024];
    struct mz_baseline *base; /* engine mode state (src/baseline); params.mode says which */
};

/* Runs the forward pass for n tokens at positions [c->n_tokens, c->n_tokens + n)
 * (n <= n_batch); writes their K/V into the cache, and the logits of the last
 * token into c->s.logits when want_logits. Does not update c->n_tokens. */
mz_status mz_forward(mz_ctx_t *c, const mz_token *tokens, size_t n, bool want_logits);

#endif
