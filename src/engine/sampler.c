/*
 * sampler.c — picks the next token from logits.
 *
 * The chain is documented at mz_sampler_params in include/mzcache.h. Every
 * adjustment is made on a scratch copy of the logits (v[]), touching only the
 * tokens concerned (the history ring, the generated-token counts, the bias
 * list), so a step costs one copy of the vocabulary plus the pick, whatever
 * the penalty settings. Non-finite logits (NaN, -inf) count as banned.
 *
 * The filter (a grammar) runs lazily: the token picked without it is offered
 * first; only if it is refused is every remaining token checked and the pick
 * made again among the allowed ones. The RNG advances once per pick, so a
 * given seed, parameters, logits and filter always give the same tokens.
 */
#include "../core/core.h"

#include <math.h>
#include <string.h>

struct cand {
    float logit;
    float p;
    mz_token id;
};

struct count {
    mz_token id;
    uint32_t n;
};

struct mz_sampler {
    mz_sampler_params p;
    uint64_t rng;
    mz_token *history;         /* ring of the last repeat_last_n tokens */
    size_t n_hist, hist_head;
    struct count *counts;      /* generated tokens and how often (OpenAI penalties) */
    size_t n_counts, cap_counts;
    mz_logit_bias *bias;
    size_t n_bias;
    mz_token_filter_fn filter;
    void *filter_user;
    float *v;                  /* adjusted logits, n_vocab */
    struct cand *cand;
    int cap;                   /* n_vocab the two buffers hold */
};

mz_sampler_params mz_sampler_params_default(void)
{
    mz_sampler_params p = {.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f,
                           .repeat_penalty = 1.0f, .repeat_last_n = 64, .seed = 0x5eed,
                           .frequency_penalty = 0.0f, .presence_penalty = 0.0f};
    return p;
}

mz_status mz_sampler_init(const mz_sampler_params *p, mz_sampler_t **out)
{
    if (!out) return mz_fail(MZ_E_INVAL, "sampler: out is NULL");
    *out = NULL;
    mz_sampler_params prm = p ? *p : mz_sampler_params_default();
    if (prm.repeat_last_n < 0 || prm.repeat_last_n > 1 << 20)
        return mz_fail(MZ_E_INVAL, "repeat_last_n %d out of range", prm.repeat_last_n);
    if (!(prm.repeat_penalty > 0.0f) || !isfinite(prm.repeat_penalty))
        return mz_fail(MZ_E_INVAL, "repeat_penalty must be > 0");
    if (!(prm.frequency_penalty >= -2.0f && prm.frequency_penalty <= 2.0f))
        return mz_fail(MZ_E_INVAL, "frequency_penalty must be in [-2, 2]");
    if (!(prm.presence_penalty >= -2.0f && prm.presence_penalty <= 2.0f))
        return mz_fail(MZ_E_INVAL, "presence_penalty must be in [-2, 2]");
    if (isnan(prm.temperature) || isnan(prm.top_p) || isnan(prm.min_p))
        return mz_fail(MZ_E_INVAL, "temperature, top_p and min_p must be numbers");
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
    free(s->counts);
    free(s->bias);
    free(s->v);
    free(s->cand);
    free(s);
}

mz_status mz_sampler_set_logit_bias(mz_sampler_t *s, const mz_logit_bias *b, size_t n)
{
    if (!s || (!b && n)) return mz_fail(MZ_E_INVAL, "sampler: null argument");
    if (n > (size_t)1 << 20) return mz_fail(MZ_E_INVAL, "logit_bias: too many entries");
    for (size_t i = 0; i < n; i++) {
        if (b[i].token < 0) return mz_fail(MZ_E_INVAL, "logit_bias: token %d is negative", (int)b[i].token);
        if (!(b[i].bias >= -100.0f && b[i].bias <= 100.0f))
            return mz_fail(MZ_E_INVAL, "logit_bias: bias of token %d must be in [-100, 100]", (int)b[i].token);
    }
    mz_logit_bias *copy = NULL;
    if (n) {
        copy = malloc(n * sizeof *copy);
        if (!copy) return MZ_E_NOMEM;
        memcpy(copy, b, n * sizeof *copy);
    }
    free(s->bias);
    s->bias = copy;
    s->n_bias = n;
    return MZ_OK;
}

void mz_sampler_set_filter(mz_sampler_t *s, mz_token_filter_fn fn, void *user)
{
    if (!s) return;
    s->filter = fn;
    s->filter_user = fn ? user : NULL;
}

void mz_sampler_accept_prompt(mz_sampler_t *s, mz_token t)
{
    if (!s) return;
    size_t cap = (size_t)s->p.repeat_last_n;
    if (!cap) return;
    s->history[s->hist_head] = t;
    s->hist_head = (s->hist_head + 1) % cap;
    if (s->n_hist < cap) s->n_hist++;
}

void mz_sampler_accept(mz_sampler_t *s, mz_token t)
{
    if (!s) return;
    mz_sampler_accept_prompt(s, t);
    if (s->p.frequency_penalty == 0.0f && s->p.presence_penalty == 0.0f) return;
    for (size_t i = 0; i < s->n_counts; i++)
        if (s->counts[i].id == t) {
            s->counts[i].n++;
            return;
        }
    if (s->n_counts == s->cap_counts) {
        size_t cap = s->cap_counts ? s->cap_counts * 2 : 64;
        struct count *c = realloc(s->counts, cap * sizeof *c);
        if (!c) return; /* the penalty then misses this token; sampling goes on */
        s->counts = c;
        s->cap_counts = cap;
    }
    s->counts[s->n_counts++] = (struct count){t, 1};
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

static bool ensure_buffers(mz_sampler_t *s, int n_vocab)
{
    if (s->cap >= n_vocab) return true;
    float *v = realloc(s->v, (size_t)n_vocab * sizeof *v);
    if (!v) return false;
    s->v = v;
    struct cand *c = realloc(s->cand, (size_t)n_vocab * sizeof *c);
    if (!c) return false;
    s->cand = c;
    s->cap = n_vocab;
    return true;
}

/* Steps 1-3 of the chain into s->v. */
static void adjust(mz_sampler_t *s, const float *logits, int n_vocab)
{
    float *v = s->v;
    for (int i = 0; i < n_vocab; i++) v[i] = isnan(logits[i]) ? -INFINITY : logits[i];
    if (s->p.repeat_penalty != 1.0f)
        for (size_t i = 0; i < s->n_hist; i++) {
            mz_token t = s->history[i];
            if (t < 0 || t >= n_vocab || !isfinite(v[t])) continue;
            /* As llama.cpp: shrink positive logits, push negative ones further
             * down. Computed from the raw logit, so repeats apply it once. */
            float l = logits[t];
            v[t] = l > 0 ? l / s->p.repeat_penalty : l * s->p.repeat_penalty;
        }
    for (size_t i = 0; i < s->n_counts; i++) {
        mz_token t = s->counts[i].id;
        if (t < 0 || t >= n_vocab) continue;
        v[t] -= (float)s->counts[i].n * s->p.frequency_penalty + s->p.presence_penalty;
    }
    for (size_t i = 0; i < s->n_bias; i++) {
        mz_token t = s->bias[i].token;
        if (t >= n_vocab) continue;
        v[t] = s->bias[i].bias <= -100.0f ? -INFINITY : v[t] + s->bias[i].bias;
    }
}

/* Step 5 over the tokens with a finite s->v; -1 if there is none. */
static mz_token pick(mz_sampler_t *s, int n_vocab)
{
    const float *v = s->v;
    if (s->p.temperature <= 0.0f) {
        mz_token best = -1;
        float best_v = -INFINITY;
        for (int i = 0; i < n_vocab; i++)
            if (v[i] > best_v) {
                best_v = v[i];
                best = i;
            }
        return best;
    }
    struct cand *c = s->cand;
    int n = 0;
    for (int i = 0; i < n_vocab; i++)
        if (v[i] > -INFINITY) c[n++] = (struct cand){v[i], 0.0f, i};
    if (n == 0) return -1;
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
    /* Drop a tail of zero probability (huge temperature ratios), so the
     * fallback below can never return a token that had no chance. */
    while (n > 1 && !(c[n - 1].p > 0.0f)) n--;
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

mz_token mz_sampler_sample(mz_sampler_t *s, const float *logits, int n_vocab)
{
    if (!s) {
        mz_fail(MZ_E_INVAL, "sampler: no sampler");
        return -1;
    }
    if (!logits) {
        mz_fail(MZ_E_INVAL, "sampler: no logits (nothing was evaluated yet: is the prompt empty?)");
        return -1;
    }
    if (n_vocab <= 0) {
        mz_fail(MZ_E_INVAL, "sampler: n_vocab %d must be > 0", n_vocab);
        return -1;
    }
    if (!ensure_buffers(s, n_vocab)) {
        mz_fail(MZ_E_NOMEM, "sampler: out of memory for %d candidates", n_vocab);
        return -1;
    }
    adjust(s, logits, n_vocab);
    mz_token t = pick(s, n_vocab);
    if (t < 0) {
        mz_fail(MZ_E_INVAL, "sampler: every token is banned (logit_bias)");
        return -1;
    }
    if (!s->filter || s->filter(s->filter_user, t)) return t;
    int n_ok = 0;
    for (int i = 0; i < n_vocab; i++) {
        if (s->v[i] == -INFINITY) continue;
        if (i == t || !s->filter(s->filter_user, i)) s->v[i] = -INFINITY;
        else n_ok++;
    }
    if (n_ok == 0) {
        mz_fail(MZ_E_INVAL, "sampler: no token is allowed by the constraint");
        return -1;
    }
    return pick(s, n_vocab);
}

/* ---- log-probabilities ---------------------------------------------------------- */

mz_status mz_logprobs(const float *logits, int n_vocab, mz_token t, float *lp, mz_token_logprob *top, int n_top)
{
    if (!logits || n_vocab <= 0) return mz_fail(MZ_E_INVAL, "logprobs: no logits");
    if (lp && (t < 0 || t >= n_vocab)) return mz_fail(MZ_E_INVAL, "logprobs: token %d out of range", (int)t);
    if (n_top < 0 || n_top > 256 || (n_top && !top)) return mz_fail(MZ_E_INVAL, "logprobs: n_top %d out of range", n_top);
    double max = -INFINITY;
    for (int i = 0; i < n_vocab; i++)
        if (logits[i] > max) max = logits[i];
    if (!isfinite(max)) return mz_fail(MZ_E_INVAL, "logprobs: no finite logit");
    double sum = 0.0;
    for (int i = 0; i < n_vocab; i++)
        if (!isnan(logits[i])) sum += exp((double)logits[i] - max);
    double lse = max + log(sum);
    if (lp) *lp = isnan(logits[t]) ? -INFINITY : (float)((double)logits[t] - lse);
    if (n_top == 0) return MZ_OK;
    /* Insertion into a short sorted list: n_top <= 256, one pass. */
    int have = 0;
    for (int i = 0; i < n_vocab; i++) {
        float l = logits[i];
        if (isnan(l)) continue;
        if (have == n_top && !(l > top[have - 1].logprob)) continue;
        int j = have < n_top ? have++ : have - 1;
        while (j > 0 && l > top[j - 1].logprob) {
            top[j] = top[j - 1];
            j--;
        }
        top[j] = (mz_token_logprob){i, l};
    }
    for (int i = 0; i < have; i++) top[i].logprob = (float)((double)top[i].logprob - lse);
    for (int i = have; i < n_top; i++) top[i] = (mz_token_logprob){-1, -INFINITY};
    return MZ_OK;
}
