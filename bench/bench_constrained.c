/*
 * bench_constrained — cost of structured output (src/grammar/) against plain
 * decoding on the real model: decode tokens/s with and without a JSON
 * grammar filtering the sampler, and the time the grammar itself takes.
 *
 * usage: bench_constrained [-m MODEL] [-n TOKENS] [--reps 5] [-t THREADS]
 *                          [--temp T] [--schema person|object] [--budget N]
 *
 * Each rep runs, in turn, a plain and a constrained generation of exactly -n
 * tokens from the same prompt: end-of-generation tokens are banned
 * (logit_bias) in both, and the constrained one starts a new document each
 * time one is complete, so both decode the same number of tokens at the same
 * positions. Reported, median over reps:
 *   - tokens/s of each (wall: decode + sampling);
 *   - the time per token spent in sampling (mz_sampler_sample, plus
 *     mz_jfilter_accept when constrained), so the grammar's own cost
 *     (constrained minus plain) is read apart from the decode, which other
 *     load on the machine disturbs more;
 *   - how often the model's pick was refused (a full-vocabulary mask) and
 *     what one full mask costs;
 *   - the per-request set-up (mz_jvocab_init: the bytes of every token).
 * --budget N gives every document a budget of N tokens (as the server does
 * with max_tokens): the filter then also checks each candidate's close
 * length, and the full mask is timed with that budget too.
 * Overhead % = grammar time per token / plain time per token.
 */
#define _POSIX_C_SOURCE 200809L
#include "core/core.h"
#include "grammar/grammar.h"
#include "bench_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void) { return mz_time_ms(); }

/* CPU time of the whole process (all compute threads): other load on the
 * machine changes it much less than wall time. */
static double cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

typedef struct run_result {
    int n;
    double total_ms, cpu_ms, sample_ms;
    int refusals, docs;
} run_result;

/* Counts the filter calls per sampling step: more than one means a full mask. */
typedef struct counting {
    mz_jfilter f;
    long calls;
} counting;

static bool count_ok(void *u, mz_token t)
{
    counting *c = u;
    c->calls++;
    return mz_jfilter_token_ok(&c->f, t);
}

/* A filter at the start of a new document of s, with a budget of `budget`
 * tokens (0: none). */
static mz_jfilter doc_filter(const mz_jschema *s, const mz_jvocab *v, int budget)
{
    mz_jfilter f = mz_jfilter_make(mz_jgram_init(s), v);
    if (budget > 0) mz_jfilter_set_budget(&f, (size_t)budget);
    return f;
}

static int run(mz_model_t *m, const mz_jvocab *v, const mz_jschema *s, int budget, const mz_token *prompt,
               size_t n_prompt, int n_gen, int n_threads, float temp, run_result *out)
{
    mz_ctx_params cp = mz_ctx_params_default();
    cp.n_ctx = 2048;
    cp.n_threads = n_threads;
    mz_ctx_t *c = NULL;
    mz_sampler_t *smp = NULL;
    mz_sampler_params sp = mz_sampler_params_default();
    sp.temperature = temp;
    sp.seed = 1234;
    counting cnt = {.f = s ? doc_filter(s, v, budget) : mz_jfilter_make(NULL, v)};
    memset(out, 0, sizeof *out);
    if (mz_ctx_init(m, &cp, &c) || mz_sampler_init(&sp, &smp) || mz_prefill(c, prompt, n_prompt)) {
        fprintf(stderr, "bench_constrained: set-up failed: %s\n", mz_last_error());
        return 1;
    }
    int nv = mz_model_n_vocab(m);
    mz_logit_bias ban[8];
    size_t n_ban = 0;
    for (int t = 0; t < nv && n_ban < 8; t++)
        if (mz_token_is_eog(m, t)) ban[n_ban++] = (mz_logit_bias){t, -100.0f};
    if (mz_sampler_set_logit_bias(smp, ban, n_ban)) return 1;
    if (s) mz_sampler_set_filter(smp, count_ok, &cnt);
    double t0 = now_ms(), c0 = cpu_ms();
    for (int i = 0; i < n_gen; i++) {
        double ts = now_ms();
        long calls0 = cnt.calls;
        mz_token t = mz_sampler_sample(smp, mz_ctx_logits(c), nv);
        if (t < 0 || (s && !mz_jfilter_accept(&cnt.f, t))) {
            fprintf(stderr, "bench_constrained: sampling failed: %s\n", mz_last_error());
            break;
        }
        if (s && mz_jgram_complete(cnt.f.g)) { /* a new document (part of the grammar's cost) */
            mz_jgram_free(cnt.f.g);
            cnt.f = doc_filter(s, v, budget);
            out->docs++;
        }
        out->sample_ms += now_ms() - ts;
        out->refusals += cnt.calls - calls0 > 1;
        mz_sampler_accept(smp, t);
        if (mz_prefill(c, &t, 1)) break;
        out->n++;
    }
    out->total_ms = now_ms() - t0;
    out->cpu_ms = cpu_ms() - c0;
    mz_jgram_free(cnt.f.g);
    mz_sampler_free(smp);
    mz_ctx_free(c);
    return 0;
}

int main(int argc, char **argv)
{
    const char *model = "models/SmolLM2-135M-Instruct.Q4_1.gguf", *which = "person";
    int n_gen = 128, reps = 5, n_threads = 0, budget = 0;
    float temp = 0.0f;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (!strcmp(a, "-m") && val) model = argv[++i];
        else if (!strcmp(a, "--schema") && val) which = argv[++i];
        else if ((!strcmp(a, "-n") || !strcmp(a, "--reps") || !strcmp(a, "-t") || !strcmp(a, "--budget")) && val) {
            bool zero_ok = !strcmp(a, "-t") || !strcmp(a, "--budget");
            long x = strtol(val, &end, 10);
            if (*end || x < (zero_ok ? 0 : 1) || x > 100000) {
                fprintf(stderr, "bench_constrained: bad value for %s: %s\n", a, val);
                return 2;
            }
            *(!strcmp(a, "-n")       ? &n_gen
              : !strcmp(a, "--reps") ? &reps
              : !strcmp(a, "-t")     ? &n_threads
                                     : &budget) = (int)x;
            i++;
        } else if (!strcmp(a, "--temp") && val) {
            temp = strtof(val, &end);
            if (*end || !(temp >= 0 && temp <= 2)) {
                fprintf(stderr, "bench_constrained: bad --temp %s\n", val);
                return 2;
            }
            i++;
        } else {
            fprintf(stderr, "usage: bench_constrained [-m MODEL] [-n TOKENS] [--reps N] [-t THREADS] [--temp T] "
                            "[--schema person|object] [--budget N]\n");
            return 2;
        }
    }
    mz_model_t *m = NULL;
    if (mz_model_load(model, NULL, &m)) {
        fprintf(stderr, "bench_constrained: %s\n", mz_last_error());
        return 1;
    }
    const char *person =
        "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\"},"
        "\"role\":{\"enum\":[\"student\",\"teacher\",\"engineer\"]},\"active\":{\"type\":\"boolean\"},"
        "\"skills\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":4},\"address\":{\"type\":\"object\","
        "\"properties\":{\"city\":{\"type\":\"string\"},\"zip\":{\"type\":\"integer\"}},\"required\":[\"city\",\"zip\"]}},"
        "\"required\":[\"name\",\"age\",\"role\",\"active\",\"skills\",\"address\"]}";
    mz_jschema *s = NULL;
    if (!strcmp(which, "object")) {
        s = mz_jschema_any_object();
    } else {
        cJSON *j = cJSON_Parse(person);
        char err[256];
        s = mz_jschema_read(j, err, sizeof err);
        cJSON_Delete(j);
    }
    double tv = now_ms();
    mz_jvocab *v = mz_jvocab_init(m);
    double vocab_ms = now_ms() - tv;
    if (!s || !v) return 1;

    mz_chat_msg msg = {"user", "Invent a person and describe them in JSON."};
    char text[1024];
    size_t need = 0;
    mz_token prompt[512];
    size_t n_prompt = 0;
    if (mz_chat_format(m, &msg, 1, true, text, sizeof text, &need) ||
        mz_tokenize(m, text, strlen(text), true, true, prompt, 512, &n_prompt))
        return 1;

    /* One full mask at the document's start (most first bytes refused) and
     * one inside its first string (almost every token's bytes walked, and
     * with a budget each one's close length): the cost a refused pick adds. */
    const char *in_string = "{\"name\":\"Al";
    int nv = mz_model_n_vocab(m), allowed[2] = {0, 0};
    double mask_ms[2];
    for (int where = 0; where < 2; where++) {
        mz_jfilter f = doc_filter(s, v, budget);
        if (where == 1 && !mz_jgram_feed(f.g, in_string, strlen(in_string))) return 1;
        double tm = now_ms();
        for (int r = 0; r < 10; r++) {
            for (int t = 0; t < nv; t++) allowed[where] += mz_jfilter_token_ok(&f, t);
            mz_jfilter_forget_position(&f); /* as after each accepted token */
        }
        mask_ms[where] = (now_ms() - tm) / 10;
        mz_jgram_free(f.g);
    }

    double *plain_tps = calloc((size_t)reps, sizeof(double)), *con_tps = calloc((size_t)reps, sizeof(double));
    double *plain_ms = calloc((size_t)reps, sizeof(double)), *con_ms = calloc((size_t)reps, sizeof(double));
    double *plain_smp = calloc((size_t)reps, sizeof(double)), *con_smp = calloc((size_t)reps, sizeof(double));
    double *plain_cpu = calloc((size_t)reps, sizeof(double)), *con_cpu = calloc((size_t)reps, sizeof(double));
    int con_n = 0, con_ref = 0, con_docs = 0;
    for (int r = 0; r < reps; r++) {
        run_result a, b;
        if (run(m, v, NULL, 0, prompt, n_prompt, n_gen, n_threads, temp, &a) ||
            run(m, v, s, budget, prompt, n_prompt, n_gen, n_threads, temp, &b))
            return 1;
        plain_tps[r] = a.n / (a.total_ms / 1e3);
        con_tps[r] = b.n / (b.total_ms / 1e3);
        plain_ms[r] = a.total_ms / a.n;
        con_ms[r] = b.total_ms / b.n;
        plain_smp[r] = a.sample_ms / a.n;
        plain_cpu[r] = a.cpu_ms / a.n;
        con_cpu[r] = b.cpu_ms / b.n;
        con_smp[r] = b.sample_ms / b.n;
        con_n = b.n;
        con_ref = b.refusals;
        con_docs = b.docs;
    }
    double pt = bench_median(plain_tps, reps), ct = bench_median(con_tps, reps);
    double ps = bench_median(plain_smp, reps), cs = bench_median(con_smp, reps), pm = bench_median(plain_ms, reps);
    double pc = bench_median(plain_cpu, reps), cc = bench_median(con_cpu, reps);
    double la[3] = {0};
    FILE *fl = fopen("/proc/loadavg", "r");
    if (fl) {
        if (fscanf(fl, "%lf %lf %lf", &la[0], &la[1], &la[2]) != 3) la[0] = -1;
        fclose(fl);
    }
    printf("bench_constrained: model %s, schema %s, temp %.2f, budget %d tokens a document (0: none), %d reps, "
           "load average %.2f\n",
           model, which, temp, budget, reps, la[0]);
    printf("  plain decode        %7.2f tokens/s (%d tokens)\n", pt, n_gen);
    printf("  constrained decode  %7.2f tokens/s (%d tokens, %d documents completed, %d picks refused -> full mask)\n",
           ct, con_n, con_docs, con_ref);
    printf("  CPU per token       plain %.2f ms, constrained %.2f ms (all threads) -> %+.2f %%\n", pc, cc,
           100.0 * (cc - pc) / pc);
    printf("  sampling per token  plain %.3f ms, constrained %.3f ms -> grammar %.3f ms/token\n", ps, cs, cs - ps);
    printf("  grammar overhead    %.2f %% of a plain token's time (%.3f ms); wall tokens/s ratio %.3f\n",
           100.0 * (cs - ps) / pm, pm, ct / pt);
    printf("  one full mask       %.2f ms at the start (%d of %d tokens allowed), %.2f ms after '%s' (%d allowed)\n",
           mask_ms[0], allowed[0] / 10, nv, mask_ms[1], in_string, allowed[1] / 10);
    printf("  per-request set-up  %.2f ms (token bytes, mz_jvocab_init)\n", vocab_ms);
    free(plain_cpu), free(con_cpu);
    free(plain_tps), free(con_tps), free(plain_ms), free(con_ms), free(plain_smp), free(con_smp);
    mz_jvocab_free(v);
    mz_jschema_free(s);
    mz_model_free(m);
    return 0;
}
