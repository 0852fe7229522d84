/* Sampling: greedy, temperature, top-k, top-p, min-p, penalties, seeds,
 * logit_bias, the filter, log-probabilities, and refusals (NULL logits). */
#include "mzcache.h"
#include "testutil.h"

#define NV 8

static int draw_counts(mz_sampler_params p, const float *logits, int n_draws, int counts[NV])
{
    mz_sampler_t *s = NULL;
    if (mz_sampler_init(&p, &s)) return -1;
    memset(counts, 0, sizeof(int) * NV);
    for (int i = 0; i < n_draws; i++) {
        mz_token t = mz_sampler_sample(s, logits, NV);
        if (t < 0 || t >= NV) {
            mz_sampler_free(s);
            return -1;
        }
        counts[t]++;
    }
    mz_sampler_free(s);
    return 0;
}

/* Default parameters with only top-k truncating, at temperature 1. */
static mz_sampler_params plain_params(int top_k)
{
    mz_sampler_params p = mz_sampler_params_default();
    p.top_k = top_k;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.temperature = 1.0f;
    return p;
}

static bool even_only(void *u, mz_token t)
{
    (void)u;
    return (t & 1) == 0;
}

static bool none_ok(void *u, mz_token t)
{
    (void)u;
    (void)t;
    return false;
}

int main(void)
{
    const float logits[NV] = {1.0f, 3.0f, 2.5f, -1.0f, 0.0f, 2.9f, -5.0f, 0.5f};
    int counts[NV];
    mz_sampler_params p = mz_sampler_params_default();

    /* greedy picks the max; ties go to the lowest id */
    p.temperature = 0.0f;
    CHECK(draw_counts(p, logits, 10, counts) == 0);
    CHECK_EQ_INT(counts[1], 10);
    {
        const float tie[NV] = {0, 7, 7, 0, 0, 0, 0, 0};
        CHECK(draw_counts(p, tie, 3, counts) == 0);
        CHECK_EQ_INT(counts[1], 3);
    }

    /* top-k 2 only ever yields the two best */
    p = plain_params(2);
    CHECK(draw_counts(p, logits, 2000, counts) == 0);
    CHECK_EQ_INT(counts[1] + counts[5], 2000);
    CHECK(counts[1] > counts[5]); /* e^3 vs e^2.9: 52.5% vs 47.5% */

    /* temperature 1, no truncation: frequencies follow softmax */
    p = plain_params(0);
    CHECK(draw_counts(p, logits, 20000, counts) == 0);
    {
        double z = 0;
        for (int i = 0; i < NV; i++) z += exp(logits[i]);
        for (int i = 0; i < NV; i++) {
            double want = exp(logits[i]) / z * 20000;
            CHECK_MSG(fabs(counts[i] - want) < 5 * sqrt(want) + 5, "token %d: %d vs %.0f", i,
                      counts[i], want);
        }
    }

    /* top-p 0.5 keeps the smallest set reaching 50 %: tokens 1 and 5 */
    p.top_p = 0.5f;
    CHECK(draw_counts(p, logits, 1000, counts) == 0);
    CHECK_EQ_INT(counts[1] + counts[5], 1000);

    /* min-p 0.5: keep tokens with p >= 0.5 p_max: ids 1, 5, 2 (e^-0.5 = 0.61) */
    p.top_p = 1.0f;
    p.min_p = 0.5f;
    CHECK(draw_counts(p, logits, 1000, counts) == 0);
    CHECK_EQ_INT(counts[1] + counts[5] + counts[2], 1000);
    CHECK(counts[2] > 0);

    /* very low temperature behaves like greedy */
    p.min_p = 0.0f;
    p.temperature = 0.01f;
    CHECK(draw_counts(p, logits, 200, counts) == 0);
    CHECK_EQ_INT(counts[1], 200);

    /* same seed, same sequence; another seed, another sequence */
    {
        mz_sampler_params q = mz_sampler_params_default();
        q.top_k = 0;
        q.temperature = 1.5f;
        mz_sampler_t *a = NULL, *b = NULL, *c = NULL;
        CHECK(mz_sampler_init(&q, &a) == MZ_OK);
        CHECK(mz_sampler_init(&q, &b) == MZ_OK);
        q.seed = 12345;
        CHECK(mz_sampler_init(&q, &c) == MZ_OK);
        int same = 1, differs = 0;
        for (int i = 0; i < 100; i++) {
            mz_token x = mz_sampler_sample(a, logits, NV), y = mz_sampler_sample(b, logits, NV);
            mz_token z = mz_sampler_sample(c, logits, NV);
            same &= x == y;
            differs |= x != z;
        }
        CHECK(same);
        CHECK(differs);
        mz_sampler_free(a);
        mz_sampler_free(b);
        mz_sampler_free(c);
    }

    /* repetition penalty: the best token, once seen, loses to the runner-up */
    {
        mz_sampler_params q = mz_sampler_params_default();
        q.temperature = 0.0f;
        q.repeat_penalty = 1.5f;
        mz_sampler_t *s = NULL;
        CHECK(mz_sampler_init(&q, &s) == MZ_OK);
        CHECK_EQ_INT(mz_sampler_sample(s, logits, NV), 1);
        mz_sampler_accept(s, 1);
        CHECK_EQ_INT(mz_sampler_sample(s, logits, NV), 5);
        /* negative logits are pushed further down, never up */
        mz_sampler_free(s);
        const float neg[NV] = {-1.0f, -1.2f, -9, -9, -9, -9, -9, -9};
        CHECK(mz_sampler_init(&q, &s) == MZ_OK);
        mz_sampler_accept(s, 0);
        CHECK_EQ_INT(mz_sampler_sample(s, neg, NV), 1);
        mz_sampler_free(s);
        /* the history is a window: after repeat_last_n other tokens, 1 is forgiven */
        q.repeat_last_n = 2;
        CHECK(mz_sampler_init(&q, &s) == MZ_OK);
        mz_sampler_accept(s, 1);
        mz_sampler_accept(s, 6);
        mz_sampler_accept(s, 6);
        CHECK_EQ_INT(mz_sampler_sample(s, logits, NV), 1);
        mz_sampler_free(s);
    }

    /* top-k on a large vocabulary: every draw is among the true k best */
    {
        enum { BIG = 5000, K = 10 };
        static float big[BIG];
        unsigned long long rng = 7;
        for (int i = 0; i < BIG; i++) big[i] = t_rand_float(&rng) * 4.0f;
        float kth = -1e9f; /* the K-th largest value, by brute force */
        for (int i = 0; i < BIG; i++) {
            int above = 0;
            for (int j = 0; j < BIG; j++) above += big[j] > big[i];
            if (above == K - 1) kth = big[i];
        }
        mz_sampler_params q = mz_sampler_params_default();
        q.top_k = K;
        q.top_p = 1.0f;
        q.min_p = 0.0f;
        q.temperature = 5.0f;
        mz_sampler_t *s = NULL;
        CHECK(mz_sampler_init(&q, &s) == MZ_OK);
        int outside = 0, distinct = 0;
        int seen[BIG] = {0};
        for (int i = 0; i < 2000; i++) {
            mz_token t = mz_sampler_sample(s, big, BIG);
            outside += big[t] < kth;
            distinct += !seen[t]++;
        }
        CHECK_EQ_INT(outside, 0);
        CHECK_EQ_INT(distinct, K);
        mz_sampler_free(s);
    }


    /* NULL logits (an empty prompt: nothing evaluated) are an error, not a crash */
    {
        mz_sampler_t *s = NULL;
        CHECK(mz_sampler_init(NULL, &s) == MZ_OK);
        CHECK_EQ_INT(mz_sampler_sample(s, NULL, NV), -1);
        CHECK(strstr(mz_last_error(), "logits") != NULL);
        CHECK_EQ_INT(mz_sampler_sample(s, logits, 0), -1);
        CHECK_EQ_INT(mz_sampler_sample(NULL, logits, NV), -1);
        mz_sampler_free(s);
    }

    /* OpenAI penalties count generated tokens only, with their definitions:
     * l - n * frequency - (n > 0) * presence */
    {
        const float flat[NV] = {1.0f, 1.6f, 1.5f, 0, 0, 0, 0, 0};
        mz_sampler_params q = mz_sampler_params_default();
        q.temperature = 0.0f;
        q.frequency_penalty = 0.3f;
        mz_sampler_t *s = NULL;
        CHECK(mz_sampler_init(&q, &s) == MZ_OK);
        mz_sampler_accept_prompt(s, 1); /* prompt tokens do not count */
        mz_sampler_accept_prompt(s, 1);
        CHECK_EQ_INT(mz_sampler_sample(s, flat, NV), 1);
        mz_sampler_accept(s, 1);         /* 1.6 - 0.3 = 1.3 < 1.5 */
        CHECK_EQ_INT(mz_sampler_sample(s, flat, NV), 2);
        mz_sampler_accept(s, 2);         /* 1.5 - 0.3 = 1.2 < 1.3 */
        CHECK_EQ_INT(mz_sampler_sample(s, flat, NV), 1);
        mz_sampler_accept(s, 1);         /* 1.6 - 0.6 = 1.0 < 1.2: token 2 again */
        CHECK_EQ_INT(mz_sampler_sample(s, flat, NV), 2);
        mz_sampler_free(s);
        q.frequency_penalty = 0.0f;
        q.presence_penalty = 0.55f;      /* once and twice cost the same */
        CHECK(mz_sampler_init(&q, &s) == MZ_OK);
        mz_sampler_accept(s, 1);
        CHECK_EQ_INT(mz_sampler_sample(s, flat, NV), 2);  /* 1.05 < 1.5 */
        mz_sampler_accept(s, 2);
        CHECK_EQ_INT(mz_sampler_sample(s, flat, NV), 1);  /* 1.05 > 0.95 */
        mz_sampler_accept(s, 1);
        CHECK_EQ_INT(mz_sampler_sample(s, flat, NV), 1);
        mz_sampler_free(s);
        /* negative penalties encourage repeats */
        q.presence_penalty = -1.0f;
        CHECK(mz_sampler_init(&q, &s) == MZ_OK);
        mz_sampler_accept(s, 0);
        CHECK_EQ_INT(mz_sampler_sample(s, flat, NV), 0);
        mz_sampler_free(s);
        q.presence_penalty = 2.5f;
        CHECK(mz_sampler_init(&q, &s) == MZ_E_INVAL && s == NULL);
        CHECK(strstr(mz_last_error(), "presence_penalty") != NULL);
        q.presence_penalty = 0.0f;
        q.frequency_penalty = -2.01f;
        CHECK(mz_sampler_init(&q, &s) == MZ_E_INVAL && s == NULL);
        CHECK(strstr(mz_last_error(), "frequency_penalty") != NULL);
    }

    /* logit_bias: added to the logit; -100 bans even under sampling */
    {
        mz_sampler_params q = mz_sampler_params_default();
        q.temperature = 0.0f;
        mz_sampler_t *s = NULL;
        CHECK(mz_sampler_init(&q, &s) == MZ_OK);
        mz_logit_bias b[2] = {{6, 8.5f}, {1, -100.0f}};
        CHECK(mz_sampler_set_logit_bias(s, b, 2) == MZ_OK);
        CHECK_EQ_INT(mz_sampler_sample(s, logits, NV), 6); /* -5 + 8.5 = 3.5 > 3 */
        b[0].bias = 7.0f;                                  /* 2.0: 5 (2.9) wins, 1 banned */
        CHECK(mz_sampler_set_logit_bias(s, b, 2) == MZ_OK);
        CHECK_EQ_INT(mz_sampler_sample(s, logits, NV), 5);
        mz_logit_bias bad = {2, 100.5f};
        CHECK(mz_sampler_set_logit_bias(s, &bad, 1) == MZ_E_INVAL);
        mz_logit_bias big_id = {1000000, 50.0f}; /* outside this vocabulary: ignored */
        CHECK(mz_sampler_set_logit_bias(s, &big_id, 1) == MZ_OK);
        CHECK_EQ_INT(mz_sampler_sample(s, logits, NV), 1);
        mz_logit_bias all[NV];
        for (int i = 0; i < NV; i++) all[i] = (mz_logit_bias){i, -100.0f};
        CHECK(mz_sampler_set_logit_bias(s, all, NV) == MZ_OK);
        CHECK_EQ_INT(mz_sampler_sample(s, logits, NV), -1);
        mz_sampler_free(s);
        q = mz_sampler_params_default();
        q.top_k = 0;
        q.temperature = 2.0f;
        CHECK(mz_sampler_init(&q, &s) == MZ_OK);
        mz_logit_bias ban = {1, -100.0f};
        CHECK(mz_sampler_set_logit_bias(s, &ban, 1) == MZ_OK);
        int hit = 0;
        for (int i = 0; i < 2000; i++) hit += mz_sampler_sample(s, logits, NV) == 1;
        CHECK_EQ_INT(hit, 0);
        mz_sampler_free(s);
    }

    /* the filter: refused tokens never come out, for greedy and sampling */
    {
        for (int mode = 0; mode < 3; mode++) {
            mz_sampler_params q = mz_sampler_params_default();
            q.temperature = mode == 0 ? 0.0f : 1.0f;
            q.top_k = mode == 2 ? 2 : 0;
            q.top_p = 1.0f;
            q.min_p = 0.0f;
            mz_sampler_t *s = NULL;
            CHECK(mz_sampler_init(&q, &s) == MZ_OK);
            mz_sampler_set_filter(s, even_only, NULL);
            int odd = 0, bad = 0;
            for (int i = 0; i < 500; i++) {
                mz_token t = mz_sampler_sample(s, logits, NV);
                bad += t < 0;
                odd += t >= 0 && (t & 1);
            }
            CHECK_EQ_INT(bad, 0);
            CHECK_EQ_INT(odd, 0);
            mz_sampler_set_filter(s, none_ok, NULL);
            CHECK_EQ_INT(mz_sampler_sample(s, logits, NV), -1);
            mz_sampler_set_filter(s, NULL, NULL);
            CHECK(mz_sampler_sample(s, logits, NV) >= 0);
            mz_sampler_free(s);
        }
        /* greedy under the filter is the best allowed token: 2 (2.5) */
        mz_sampler_params q = mz_sampler_params_default();
        q.temperature = 0.0f;
        mz_sampler_t *s = NULL;
        CHECK(mz_sampler_init(&q, &s) == MZ_OK);
        mz_sampler_set_filter(s, even_only, NULL);
        CHECK_EQ_INT(mz_sampler_sample(s, logits, NV), 2);
        mz_sampler_free(s);
    }

    /* log-probabilities against an independent float64 log-softmax */
    {
        enum { BIG = 3000 };
        static float big[BIG];
        unsigned long long rng = 99;
        for (int i = 0; i < BIG; i++) big[i] = t_rand_normal(&rng) * 6.0f;
        big[17] = big[18] = 30.0f; /* a tie at the top: lower id first */
        long double z = 0;
        for (int i = 0; i < BIG; i++) z += expl((long double)big[i]);
        mz_token_logprob top[20];
        float lp = 0;
        CHECK(mz_logprobs(big, BIG, 1234, &lp, top, 20) == MZ_OK);
        CHECK_MSG(fabs(lp - (double)((long double)big[1234] - logl(z))) < 1e-4, "%g", lp);
        CHECK_EQ_INT(top[0].token, 17);
        CHECK_EQ_INT(top[1].token, 18);
        for (int k = 0; k < 20; k++) {
            double want = (double)((long double)big[top[k].token] - logl(z));
            CHECK_MSG(fabs(top[k].logprob - want) < 1e-4, "top %d: %g vs %g", k, top[k].logprob, want);
            if (k) CHECK(top[k].logprob <= top[k - 1].logprob);
            int above = 0; /* rank by brute force */
            for (int i = 0; i < BIG; i++) above += big[i] > big[top[k].token];
            CHECK(above <= k);
        }
        CHECK(mz_logprobs(NULL, BIG, 0, &lp, NULL, 0) == MZ_E_INVAL);
        CHECK(mz_logprobs(big, BIG, BIG, &lp, NULL, 0) == MZ_E_INVAL);
        CHECK(mz_logprobs(big, BIG, 0, NULL, top, 257) == MZ_E_INVAL);
    }

    /* bad parameters are refused */
    {
        mz_sampler_params q = mz_sampler_params_default();
        mz_sampler_t *s = NULL;
        q.repeat_penalty = 0.0f;
        CHECK(mz_sampler_init(&q, &s) == MZ_E_INVAL && s == NULL);
        q = mz_sampler_params_default();
        q.repeat_last_n = -3;
        CHECK(mz_sampler_init(&q, &s) == MZ_E_INVAL && s == NULL);
    }
    return t_done("test_sampler");
}
