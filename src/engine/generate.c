/*
 * generate.c — the generation loop: sample, feed back, stop (include/mzcache.h
 * has the order of a step). Every program that generates runs this loop:
 * `mzcache run` and `chat` (app/cli/main.c, cli_generate), the server's
 * completions (src/server/completion.c, one step per streamed write), and
 * mz_restore_generate (ctx.c). They differ only in their hooks, so the
 * end-of-generation set, the room check and what joins the context are the
 * same for all of them.
 */
#include "engine/engine.h"

#include "core/core.h"

#include <stdint.h>
#include <stdlib.h>

struct mz_generator {
    mz_ctx_t *ctx;
    mz_sampler_t *smp;             /* NULL: greedy */
    mz_generate_params p;
    size_t n_tokens;               /* passed to on_token */
    mz_finish finish;
};

mz_generate_params mz_generate_params_default(void)
{
    return (mz_generate_params){.max_tokens = SIZE_MAX};
}

const char *mz_finish_name(mz_finish f)
{
    switch (f) {
    case MZ_FINISH_NONE: return "-";
    case MZ_FINISH_EOG: return "eog";
    case MZ_FINISH_LENGTH: return "length";
    case MZ_FINISH_CTX_FULL: return "ctx_full";
    case MZ_FINISH_STOP: return "stop";
    case MZ_FINISH_CANCELLED: return "cancelled";
    case MZ_FINISH_ERROR: return "error";
    }
    return NULL;
}

static void gen_setup(mz_generator_t *g, mz_ctx_t *c, mz_sampler_t *s, const mz_generate_params *p)
{
    *g = (mz_generator_t){.ctx = c, .smp = s, .p = p ? *p : mz_generate_params_default()};
}

mz_status mz_generator_init(mz_ctx_t *c, mz_sampler_t *s, const mz_generate_params *p, mz_generator_t **out)
{
    if (!out) return mz_fail(MZ_E_INVAL, "null argument");
    *out = NULL;
    if (!c) return mz_fail(MZ_E_INVAL, "null argument");
    mz_generator_t *g = malloc(sizeof *g);
    if (!g) return mz_fail(MZ_E_NOMEM, "out of memory");
    gen_setup(g, c, s, p);
    *out = g;
    return MZ_OK;
}

void mz_generator_free(mz_generator_t *g) { free(g); }
mz_finish mz_generator_finish(const mz_generator_t *g) { return g->finish; }
size_t mz_generator_n_tokens(const mz_generator_t *g) { return g->n_tokens; }

/* Ends the generation with ERROR and status s (mz_last_error already set). */
static mz_status gen_fail(mz_generator_t *g, mz_status s)
{
    g->finish = MZ_FINISH_ERROR;
    return s ? s : MZ_E_INVAL;
}

/* Feeds t to the context. A pass the progress callback cancelled is the
 * caller's wish, not a failure: CANCELLED, and t is not in the context. */
static mz_status gen_feed(mz_generator_t *g, mz_token t, mz_finish on_success)
{
    mz_status s = mz_prefill(g->ctx, &t, 1);
    if (s == MZ_E_CANCELLED) {
        g->finish = MZ_FINISH_CANCELLED;
        return MZ_OK;
    }
    if (s) return gen_fail(g, s);
    g->finish = on_success;
    return MZ_OK;
}

mz_status mz_generator_step(mz_generator_t *g)
{
    if (!g) return mz_fail(MZ_E_INVAL, "null argument");
    if (g->finish != MZ_FINISH_NONE) return MZ_OK;
    mz_ctx_t *c = g->ctx;
    const mz_generate_params *p = &g->p;
    if (p->cancelled && p->cancelled(p->user)) {
        g->finish = MZ_FINISH_CANCELLED;
        return MZ_OK;
    }
    if (g->n_tokens >= p->max_tokens) {
        g->finish = MZ_FINISH_LENGTH;
        return MZ_OK;
    }
    /* Room for the token sampled next, an end of generation included. */
    if (mz_ctx_n_tokens(c) >= mz_ctx_n_ctx(c)) {
        g->finish = MZ_FINISH_CTX_FULL;
        return MZ_OK;
    }
    const float *logits = mz_ctx_logits(c);
    if (!logits)
        return gen_fail(g, mz_fail(MZ_E_INVAL, "nothing to generate from: no logits (nothing was prefilled)"));
    const int nv = c->model->cfg.n_vocab;
    mz_token t = 0;
    if (g->smp) {
        t = mz_sampler_sample(g->smp, logits, nv);
        if (t < 0) return gen_fail(g, MZ_E_INVAL); /* mz_last_error() says why */
    } else {
        for (int v = 1; v < nv; v++)
            if (logits[v] > logits[t]) t = v;
    }
    if (p->on_sample && !p->on_sample(p->user, t)) return gen_fail(g, MZ_E_INVAL);
    if (g->smp) mz_sampler_accept(g->smp, t);
    if (mz_token_is_eog(c->model, t)) return gen_feed(g, t, MZ_FINISH_EOG);
    g->n_tokens++;
    mz_gen_action a = p->on_token ? p->on_token(p->user, t, logits, nv) : MZ_GEN_CONTINUE;
    if (a == MZ_GEN_FAIL) return gen_fail(g, MZ_E_INVAL);
    mz_finish next = a == MZ_GEN_STOP ? MZ_FINISH_STOP
                     : g->n_tokens >= p->max_tokens ? MZ_FINISH_LENGTH
                                                     : MZ_FINISH_NONE;
    return gen_feed(g, t, next);
}

mz_status mz_generate(mz_ctx_t *c, mz_sampler_t *s, const mz_generate_params *p, mz_generate_result *res)
{
    if (res) *res = (mz_generate_result){0};
    if (!c) return mz_fail(MZ_E_INVAL, "null argument");
    mz_generator_t g;
    gen_setup(&g, c, s, p);
    mz_status st = MZ_OK;
    while (g.finish == MZ_FINISH_NONE && !(st = mz_generator_step(&g))) {}
    if (res) *res = (mz_generate_result){.n_tokens = g.n_tokens, .finish = g.finish};
    return st;
}
