/*
 * sampler.c — picks the next token from logits.
 *
 * Chain (as llama.cpp's default order): repetition penalty over the last
 * repeat_last_n accepted tokens → top-k → softmax with temperature → top-p →
 * min-p → draw from the renormalised distribution with a seeded RNG.
 * Temperature <= 0 means greedy: the highest logit after the penalty
 * (ties → lowest id).
 */
#include "../core/core.h"

#include <math.h>
#include <string.h>

struct mz_sampler {
    mz_sampler_params p;
    uint64_t rng;
    mz_token *history;         /* ring of the last repeat_last_n tokens */
    size_t n_hist, hist_head;
    struct cand { float logit; float p; mz_token id; } *cand;
    int cand_cap;
};

mz_sampler_params mz_sampler_params_default(void)
{
    mz_sampler_params p = {.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f,
                           .repeat_penalty = 1.0f, .repeat_last_n = 64, .seed = 0x5eed};
    return p;
}

mz_status mz_sampler_init(const mz_sampler_params *p, mz_sampler_t **out)
{
    *out = NULL;
    mz_sampler_params prm = p ? *p : mz_sampler_params_default();
    if (prm.repeat_last_n < 0 || prm.repeat_last_n > 1 << 20)
        return mz_fail(MZ_E_INVAL, "repeat_last_n %d out of range", prm.repeat_last_n);
    if (!(prm.repeat_penalty > 0.0f)) return mz_fail(MZ_E_INVAL, "repeat_penalty must be > 0");
    mz_sampler_t *s = mz_calloc(1, sizeof *s);
    if (!s) return MZ_E_NOMEM;
    s->p = prm;
    s->rng = prm.seed ^ 0x9e3779b97f4a7c15ULL;
    if (prm.repeat_last_n > 0) {
        s->history = mz_calloc((size_t)prm.repeat_last_n, sizeof *s->history);
        if (!s->history) {
            free(s);
            return MZ_E_NOMEM;
        }
    }
    *out = s;
    return MZ_OK;
}

void mz_sampler_free(mz_sampler_t *s)
{
    if (!s) return;
    free(s->history);
    free(s->cand);
    free(s);
}

void mz_sampler_accept(mz_sampler_t *s, mz_token t)
{
    size_t cap = (size_t)s->p.repeat_last_n;
    if (!cap) return;
    s->history[s->hist_head] = t;
    s->hist_head = (s->hist_head + 1) % cap;
    if (s->n_hist < cap) s->n_hist++;
}

static uint64_t rng_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static int cmp_cand_desc(const void *a, const void *b)
{
    const struct cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit < y->logit ? 1 : -1;
    return x->id < y->id ? -1 : (x->id > y->id);
}

/* Quickselect: moves the k best candidates (in cmp_cand_desc order) to c[0..k). */
static void select_top(struct cand *c, int n, int k)
{
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        struct cand pivot = c[lo + (hi - lo) / 2];
        int i = lo, j = hi;
        while (i <= j) {
            while (cmp_cand_desc(&c[i], &pivot) < 0) i++;
            while (cmp_cand_desc(&c[j], &pivot) > 0) j--;
            if (i <= j) {
                struct cand t = c[i];
                c[i++] = c[j];
                c[j--] = t;
            }
        }
        if (k - 1 <= j) hi = j;
        else if (k - 1 >= i) lo = i;
        else break;
    }
}

static bool in_history(const mz_sampler_t *s, mz_token t)
{
    for (size_t i = 0; i < s->n_hist; i++)
        if (s->history[i] == t) return true;
    return false;
}

static float penalised(const mz_sampler_t *s, mz_token id, float logit)
{
    if (s->p.repeat_penalty == 1.0f || !in_history(s, id)) return logit;
    /* As llama.cpp: shrink positive logits, push negative ones further down. */
    return logit > 0 ? logit / s->p.repeat_penalty : logit * s->p.repeat_penalty;
}

mz_token mz_sampler_sample(mz_sampler_t *s, const float *logits, int n_vocab)
{
    MZ_ASSERT(n_vocab > 0);
    if (s->p.temperature <= 0.0f) {
        mz_token best = 0;
        float best_v = -INFINITY;
        for (int i = 0; i < n_vocab; i++) {
            float v = penalised(s, i, logits[i]);
            if (v > best_v) {
                best_v = v;
                best = i;
            }
        }
        return best;
    }
    if (s->cand_cap < n_vocab) {
        struct cand *c = realloc(s->cand, (size_t)n_vocab * sizeof *c);
        if (!c) return 0; /* cannot happen for sane vocabularies; fall back to token 0 */
        s->cand = c;
        s->cand_cap = n_vocab;
    }
    struct cand *c = s->cand;
    for (int i = 0; i < n_vocab; i++) c[i] = (struct cand){penalised(s, i, logits[i]), 0.0f, i};
    int n = n_vocab;
    if (s->p.top_k > 0 && s->p.top_k < n) {
        /* Only the k best need sorting: partition them to the front first. */
        select_top(c, n, s->p.top_k);
        n = s->p.top_k;
    }
    qsort(c, (size_t)n, sizeof *c, cmp_cand_desc);

    float max = c[0].logit, sum = 0.0f;
    for (int i = 0; i < n; i++) {
        c[i].p = expf((c[i].logit - max) / s->p.temperature);
        sum += c[i].p;
    }
    for (int i = 0; i < n; i++) c[i].p /= sum;
    if (s->p.top_p < 1.0f) {
        float cum = 0.0f;
        for (int i = 0; i < n; i++) {
            cum += c[i].p;
            if (cum >= s->p.top_p) {
                n = i + 1;
                break;
            }
        }
    }
    if (s->p.min_p > 0.0f) {
        float floor_p = c[0].p * s->p.min_p;
        int keep = 1;
        while (keep < n && c[keep].p >= floor_p) keep++;
        n = keep;
    }
    sum = 0.0f;
    for (int i = 0; i < n; i++) sum += c[i].p;
    double r = (double)(rng_next(&s->rng) >> 11) / 9007199254740992.0 * (double)sum;
    double acc = 0.0;
    for (int i = 0; i < n; i++) {
        acc += c[i].p;
        if (r < acc) return c[i].id;
    }
    return c[n - 1].id;
}
