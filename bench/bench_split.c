/*
 * bench_split — how evenly the forward pass's work splits spread a layer
 * over the threads, computed (no timing): for each product job of a layer
 * (q/k/v, output, gate/up, down) and the output head, the items are handed
 * to the thread that is free first, in claim order, each costing rows x
 * columns x tokens; efficiency = work / (threads x the last thread's finish),
 * summed over the layer's jobs (each job ends in a fork-join). Compares the
 * 64-row slices (MZ_WORK_SPLIT=slices) with the planned split
 * (src/engine/work_split.c, the code the forward pass runs), and attention's
 * groups (cost = query rows x positions seen) in index order and heaviest
 * first. Equal thread speeds and no per-item overhead: an upper bound on
 * what the split allows, to read beside measured scaling.
 *
 * usage: bench_split [-p 512]
 */
#include "engine/work_split.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct shape {
    const char *name;
    size_t embd, q_dim, kv_dim, ff, vocab;
    int n_head, n_head_kv;
} shape;

static const shape k_shapes[] = {
    {"smollm2-135m", 576, 576, 192, 1536, 49152, 9, 3},
    {"qwen3-0.6b", 1024, 2048, 1024, 3072, 49152, 16, 8},
    {"llama3.2-1b", 2048, 2048, 512, 8192, 49152, 32, 8},
};

#define MAX_THREADS 64

/* Greedy list scheduling: returns the finish time of the busiest thread. */
static double schedule(const double *cost, size_t n, int nth)
{
    double t[MAX_THREADS] = {0};
    for (size_t i = 0; i < n; i++) {
        int best = 0;
        for (int k = 1; k < nth; k++)
            if (t[k] < t[best]) best = k;
        t[best] += cost[i];
    }
    double mx = 0;
    for (int k = 0; k < nth; k++) mx = t[k] > mx ? t[k] : mx;
    return mx;
}

static double g_cost[1 << 16];

/* The 64-row slices of forward.c's MZ_WORK_SPLIT=slices. */
static double job_slices(const mz_split_op *ops, int n_ops, size_t n_tok, int nth, double *work)
{
    size_t n = 0;
    *work = 0;
    for (int i = 0; i < n_ops; i++) {
        size_t sr = 64;
        if (n_tok < 8) {
            sr = (ops[i].n_rows / (2 * (size_t)nth) + 7) / 8 * 8;
            sr = sr < 16 ? 16 : sr > 64 ? 64 : sr;
        }
        for (size_t r = 0; r < ops[i].n_rows; r += sr) {
            const size_t r1 = r + sr < ops[i].n_rows ? r + sr : ops[i].n_rows;
            g_cost[n++] = (double)(r1 - r) * (double)ops[i].n_cols * (double)n_tok;
        }
        *work += (double)ops[i].n_rows * (double)ops[i].n_cols * (double)n_tok;
    }
    return schedule(g_cost, n, nth);
}

static double job_planned(const mz_split_op *ops, int n_ops, size_t n_tok, int nth, double *work)
{
    static mz_split_plan p;
    mz_split_plan_make(&p, ops, n_ops, n_tok, nth);
    size_t n = 0;
    *work = 0;
    for (size_t it = 0; it < mz_split_n_items(&p); it++) {
        const size_t pc = it / p.n_tb;
        size_t t0, t1;
        mz_split_tokens(&p, it % p.n_tb, &t0, &t1);
        double c = 0;
        for (size_t g = p.piece_seg[pc]; g < p.piece_seg[pc + 1]; g++)
            c += (double)(p.segs[g].r1 - p.segs[g].r0) * (double)ops[p.segs[g].op].n_cols;
        g_cost[n++] = c * (double)(t1 - t0);
        *work += c * (double)(t1 - t0);
    }
    return schedule(g_cost, n, nth);
}

/* Attention groups as attn_avx2.c plans them for a batch from position 0:
 * (kv head, block of 32 / group query tokens); cost = rows x positions. */
static double attn(const shape *s, size_t n_tok, int nth, bool heaviest_first, double *work)
{
    const size_t group = (size_t)(s->n_head / s->n_head_kv);
    const size_t hsub = group < 32 ? group : 32, tb = 32 / hsub > 0 ? 32 / hsub : 1;
    const size_t n_tb = (n_tok + tb - 1) / tb, n_kh = (size_t)s->n_head_kv * ((group + hsub - 1) / hsub);
    size_t n = 0;
    *work = 0;
    for (size_t k = 0; k < n_kh * n_tb; k++) {
        const size_t b = heaviest_first ? n_tb - 1 - k / n_kh : k % n_tb;
        const size_t i0 = b * tb, i1 = i0 + tb < n_tok ? i0 + tb : n_tok;
        double c = 0;
        for (size_t i = i0; i < i1; i++) c += (double)hsub * (double)(i + 1);
        g_cost[n++] = c;
        *work += c;
    }
    return schedule(g_cost, n, nth);
}

int main(int argc, char **argv)
{
    size_t n_tok = 512;
    if (argc == 3 && !strcmp(argv[1], "-p")) {
        char *end;
        unsigned long v = strtoul(argv[2], &end, 10);
        if (*end || v < 1 || v > 4096) {
            fprintf(stderr, "usage: bench_split [-p 1..4096]\n");
            return 2;
        }
        n_tok = v;
    } else if (argc != 1) {
        fprintf(stderr, "usage: bench_split [-p 1..4096]\n");
        return 2;
    }
    const int threads[] = {2, 4, 8, 16};
    printf("| shape | threads | products, %zu tokens: slices | planned | decode (1 token): slices | planned | attention, %zu tokens: index order | heaviest first |\n",
           n_tok, n_tok);
    printf("|---|---|---|---|---|---|---|---|\n");
    for (size_t si = 0; si < sizeof k_shapes / sizeof k_shapes[0]; si++) {
        const shape *s = &k_shapes[si];
        const mz_split_op qkv[3] = {{s->q_dim, s->embd, 4}, {s->kv_dim, s->embd, 4}, {s->kv_dim, s->embd, 4}};
        const mz_split_op o[1] = {{s->embd, s->q_dim, 4}}, gu[2] = {{s->ff, s->embd, 4}, {s->ff, s->embd, 4}};
        const mz_split_op down[1] = {{s->embd, s->ff, 4}}, head[1] = {{s->vocab, s->embd, 4}};
        const struct { const mz_split_op *ops; int n; bool decode_only; } jobs[] = {
            {qkv, 3, false}, {o, 1, false}, {gu, 2, false}, {down, 1, false}, {head, 1, true},
        };
        for (size_t ti = 0; ti < sizeof threads / sizeof threads[0]; ti++) {
            const int nth = threads[ti];
            double eff[4];
            for (int mode = 0; mode < 4; mode++) { /* batch slices, batch planned, decode slices, decode planned */
                const size_t nt = mode < 2 ? n_tok : 1;
                double work = 0, span = 0;
                for (size_t j = 0; j < sizeof jobs / sizeof jobs[0]; j++) {
                    if (jobs[j].decode_only && mode < 2) continue; /* the head runs for 1 token */
                    double w;
                    const double m = mode % 2 == 0 ? job_slices(jobs[j].ops, jobs[j].n, nt, nth, &w)
                                                   : job_planned(jobs[j].ops, jobs[j].n, nt, nth, &w);
                    work += w;
                    span += m;
                }
                eff[mode] = work / ((double)nth * span);
            }
            double wa, wb;
            const double ma = attn(s, n_tok, nth, false, &wa), mb = attn(s, n_tok, nth, true, &wb);
            printf("| %s | %d | %.1f %% | %.1f %% | %.1f %% | %.1f %% | %.1f %% | %.1f %% |\n", s->name, nth,
                   100 * eff[0], 100 * eff[1], 100 * eff[2], 100 * eff[3], 100 * wa / (nth * ma),
                   100 * wb / (nth * mb));
        }
    }
    return 0;
}
