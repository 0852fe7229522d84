/*
 * profile.c — `mzcache profile`: measure this machine once (codec decode
 * speed, O_DIRECT reads by request size and queue depth, with and without
 * compute beside them, the cost of getting fresh memory back) and write the
 * device profile the eviction policy reads (src/mem/profile.h). With --show
 * it prints a saved profile and, for a model or a known shape, the per-unit
 * times and threshold T the policy derives from it, and what the hybrid
 * swap plans at several eviction levels.
 */
#define _GNU_SOURCE
#include "cli.h"

#include "mem/policy.h"
#include "mem/profile.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Shapes of the generator's presets (src/model/gen_model.c), for --shape. */
static const struct {
    const char *name;
    bool qwen3;
    int n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff;
} k_shapes[] = {
    {"qwen3-0.6b", true, 28, 1024, 16, 8, 128, 3072},
    {"smollm2-135m", false, 30, 576, 9, 3, 64, 1536},
    {"llama3.2-1b", false, 16, 2048, 32, 8, 64, 8192},
};

static void print_profile(const mz_device_profile *p, const char *path)
{
    printf("device profile %s%s\n", path,
           p->measured ? "" : "  (built-in estimate: run `mzcache profile` to measure)");
    if (p->measured) printf("  measured %s on %s, %d CPUs\n", p->created, p->cpu, p->n_cpus);
    printf("  storage: %s%s, %s\n", p->dir[0] ? p->dir : "-", p->direct ? " (O_DIRECT)" : " (buffered)",
           p->uring ? "io_uring" : "pread");
    for (int pass = 0; pass < 2; pass++) {
        bool any = false;
        for (int i = 0; i < p->n_sizes; i++)
            for (int j = 0; j < p->n_qd; j++) any = any || (pass ? p->read_gbps_loaded[i][j] > 0 : 1);
        if (!any) continue;
        printf("  read GB/s%-16s", pass ? " beside compute" : "");
        for (int i = 0; i < p->n_sizes; i++) printf(" %7zuK", p->read_size[i] >> 10);
        printf("\n");
        for (int j = 0; j < p->n_qd; j++) {
            printf("    %21s QD %d", "", p->read_qd[j]);
            for (int i = 0; i < p->n_sizes; i++)
                printf(" %8.2f", pass ? p->read_gbps_loaded[i][j] : p->read_gbps[i][j]);
            printf("\n");
        }
    }
    if (p->sat_size) printf("  reads saturate at %zu KiB x %d in flight\n", p->sat_size >> 10, p->sat_qd);
    printf("  codecs (GB/s of F16, one thread): ");
    for (int i = 0; i < p->n_codecs; i++)
        printf("%s%s decode %.2f (beside compute %.2f), encode %.3f, size %.2f", i ? "; " : "",
               p->codec[i].name, p->codec[i].decode_gbps, p->codec[i].decode_gbps_loaded,
               p->codec[i].encode_gbps, p->codec[i].ratio);
    printf("\n  memory: memcpy %.1f GB/s; first touch %.3f s/GiB right after release, %.3f s/GiB "
           "after %.1f s (%.3f with 2 threads)\n",
           p->memcpy_gbps, p->touch_hot_s_per_gib, p->touch_cold_s_per_gib, p->reclaim_wait_s,
           p->touch_cold2_s_per_gib);
    if (p->n_touch) {
        printf("  pre-fault (restore's way), s/GiB by threads:");
        for (int i = 0; i < p->n_touch; i++)
            printf(" %d: %.3f", p->touch_threads[i], p->touch_mt_s_per_gib[i]);
        printf("\n");
    }
    int n = p->n_cpus > 0 ? p->n_cpus : 1;
    int r1 = mz_profile_restore_threads(p, 1), r2 = mz_profile_restore_threads(p, 2),
        rh = mz_profile_restore_threads(p, MZ_MAX(n / 2, 1));
    printf("  restore threads beside 1 / 2 / %d compute threads: %d / %d / %d\n", MZ_MAX(n / 2, 1),
           r1, r2, rh);
    /* Below 4 restore threads every one of them pre-faults (mz_restore_split_plan). */
    printf("  of them pre-faulting: %d / %d / %d\n",
           r1 < 4 ? r1 : mz_profile_prefault_threads(p, r1),
           r2 < 4 ? r2 : mz_profile_prefault_threads(p, r2),
           rh < 4 ? rh : mz_profile_prefault_threads(p, rh));
    printf("  of them decoding (the policy's t_d is spread over them): %d / %d / %d\n",
           mz_profile_decode_threads(p, r1), mz_profile_decode_threads(p, r2),
           mz_profile_decode_threads(p, rh));
}

/* Runs the hybrid planner on a fresh simulated table of the shape, evicting
 * down to `remaining` of the evictable bytes, and reports the planned
 * restore time of each path and the stage reached. */
static int simulate(const mz_unit_times *t, int n_layer, size_t n_chunks, size_t kv_bytes,
                    size_t enc_bytes, size_t block_bytes, double remaining, double *mem_ms,
                    double *sto_ms, mz_evict_stage *stage)
{
    mz_unit *w = calloc((size_t)n_layer, sizeof *w);
    mz_unit *kv = calloc((size_t)n_layer * n_chunks, sizeof *kv);
    uint64_t *seq = calloc((size_t)n_layer * n_chunks, sizeof *seq);
    mz_policy *pol = mz_policy_hybrid_init(NULL);
    mz_evict_plan plan;
    int rc = -1;
    if (!w || !kv || !seq || !pol || mz_evict_plan_init(&plan, n_layer, n_chunks)) goto out;
    for (int l = 0; l < n_layer; l++) {
        w[l] = (mz_unit){.kind = MZ_UNIT_WEIGHTS, .layer = l, .chunk = -1, .bytes = block_bytes};
        mz_unit_set(&w[l], MZ_UNIT_RESIDENT);
        for (size_t c = 0; c < n_chunks; c++) {
            mz_unit *u = &kv[(size_t)l * n_chunks + c];
            *u = (mz_unit){.kind = MZ_UNIT_KV, .layer = l, .chunk = (int)c, .bytes = kv_bytes};
            mz_unit_set(u, MZ_UNIT_RESIDENT);
        }
    }
    mz_policy_view v = {.n_layer = n_layer, .max_chunks = n_chunks, .n_chunks = n_chunks,
                        .weights = w, .kv = kv, .kv_seq = seq, .weights_evictable = true,
                        .can_store = true, .unit_bytes_kv = kv_bytes,
                        .enc_bytes_kv_est = enc_bytes, .times = *t};
    double total = (double)n_layer * ((double)block_bytes + (double)n_chunks * (double)kv_bytes);
    pol->plan(pol, &v, (size_t)(total * (1.0 - remaining)), &plan);
    uint64_t pushes = 0;
    for (size_t i = 0; i < plan.n; i++) {
        const mz_evict_step *s = &plan.steps[i];
        if (s->kind == MZ_UNIT_WEIGHTS) {
            mz_unit_set(&w[s->layer], MZ_UNIT_DROPPED);
            continue;
        }
        size_t k = (size_t)s->layer * n_chunks + s->chunk;
        mz_unit_state to = s->dest == MZ_DEST_COMPRESS ? MZ_UNIT_COMPRESSED
                           : s->dest == MZ_DEST_STORE_RAW ? MZ_UNIT_STORED_RAW
                                                          : MZ_UNIT_STORED_COMPRESSED;
        kv[k].enc_bytes = enc_bytes;
        seq[k] = ++pushes;
        mz_unit_set(&kv[k], to);
    }
    mz_restore_plan_times rt;
    mz_policy_restore_times(&v, &rt);
    *mem_ms = (double)rt.mem_ns / 1e6;
    *sto_ms = (double)rt.storage_ns / 1e6;
    *stage = plan.n ? plan.steps[plan.n - 1].stage : MZ_EVICT_STAGE_NONE;
    rc = 0;
    mz_evict_plan_free(&plan);
out:
    if (pol) pol->free(pol);
    free(w);
    free(kv);
    free(seq);
    return rc;
}

static int print_derived(const mz_device_profile *p, const char *label, int n_layer,
                         size_t kv_bytes, size_t block_bytes, const char *codec, const char *ctxs)
{
    mz_unit_times t;
    /* The split beside half the CPUs computing (the rule's default). */
    const int n_dec = mz_profile_decode_threads(p, mz_profile_restore_threads(p, 0));
    mz_profile_units pu = {.kv_chunk_bytes = kv_bytes, .block_bytes = block_bytes, .codec = codec,
                           .decode_threads = n_dec};
    mz_profile_derive(p, &pu, &t);
    const mz_profile_codec *pc = mz_profile_codec_find(p, codec);
    size_t enc = (size_t)((double)kv_bytes * (pc ? pc->ratio : 1.0));
    long long T = (long long)mz_profile_threshold(&t, n_layer);
    long long Tx = (long long)mz_profile_threshold_exact(&t, n_layer);
    printf("\n%s: %d layers, KV chunk %.1f KiB, weight block %.2f MiB, codec %s, t_d over %d "
           "decoding thread%s\n",
           label, n_layer, kv_bytes / 1024.0, block_bytes / 1048576.0, codec, n_dec,
           n_dec == 1 ? "" : "s");
    printf("  t_d %.3f ms | t_rKV %.3f ms | t_rW %.3f ms | t_rKVc %.3f ms | alloc %.3f ms/chunk, "
           "%.3f ms/block\n",
           t.t_d_ns / 1e6, t.t_rkv_ns / 1e6, t.t_rw_ns / 1e6, t.t_rkvc_ns / 1e6,
           t.t_alloc_kv_ns / 1e6, t.t_alloc_w_ns / 1e6);
    printf("  floor(t_rW/t_d) = %lld chunks per block; T = N_W_total x floor(t_rW/t_d) = %lld "
           "(exact floor(N_W_total x t_rW/t_d) = %lld)\n",
           (long long)(t.t_rw_ns / t.t_d_ns), T, Tx);
    if (!ctxs) return 0;
    printf("  %8s %8s  %-22s %-34s %-34s\n", "context", "N_KV", "case",
           "50% remaining: memory / storage ms", "0% remaining: memory / storage ms");
    char *list = strdup(ctxs), *save = NULL;
    for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int ctx = 0;
        if (cli_opt_int("--ctx", tok, 1, CLI_MAX_CTX, &ctx)) continue; /* checked at parse time */
        size_t n_chunks = ((size_t)ctx + MZ_KV_CHUNK_TOKENS - 1) / MZ_KV_CHUNK_TOKENS;
        long long n_kv = (long long)n_layer * (long long)n_chunks;
        double m50 = 0, s50 = 0, m0 = 0, s0 = 0;
        mz_evict_stage st50, st0;
        simulate(&t, n_layer, n_chunks, kv_bytes, enc, block_bytes, 0.5, &m50, &s50, &st50);
        simulate(&t, n_layer, n_chunks, kv_bytes, enc, block_bytes, 0.0, &m0, &s0, &st0);
        char c50[64], c0[64];
        snprintf(c50, sizeof c50, "%.0f / %.0f (%s)", m50, s50, mz_evict_stage_name(st50));
        snprintf(c0, sizeof c0, "%.0f / %.0f (%s)", m0, s0, mz_evict_stage_name(st0));
        printf("  %8d %8lld  %-22s %-34s %-34s\n", ctx, n_kv,
               n_kv > T ? "N_KV > T: kv-only first" : "N_KV <= T: kv-and-w first", c50, c0);
    }
    free(list);
    return 0;
}

/* --ctx N,N,...: every entry a context length. */
static int check_ctx_list(const char *opt, const char *v)
{
    char *list = strdup(v), *save = NULL;
    if (!list) return -1;
    int bad = 0, n = 0, x;
    for (char *tok = strtok_r(list, ",", &save); tok && !bad; tok = strtok_r(NULL, ",", &save), n++)
        bad = cli_opt_int(opt, tok, 1, CLI_MAX_CTX, &x);
    free(list);
    if (!bad && !n) bad = cli_opt_int(opt, "", 1, CLI_MAX_CTX, &x);
    return bad ? -1 : 0;
}

int cmd_profile(int argc, char **argv)
{
    mz_profile_run_params rp = mz_profile_run_params_default();
    const char *out_path = NULL, *shape = NULL, *model = NULL, *wtype = "F16", *codec = "q8";
    const char *ctxs = "8192,16384,32768";
    bool show = false, quiet = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if ((!strcmp(a, "-o") || !strcmp(a, "--output")) && v) out_path = argv[++i];
        else if (!strcmp(a, "--dir") && v) rp.dir = argv[++i];
        else if (!strcmp(a, "--quick")) rp.quick = true;
        else if ((!strcmp(a, "--file-mib") || !strcmp(a, "--mem-mib")) && v) {
            size_t mib;
            if (cli_opt_size(a, v, 1, 1u << 20, &mib)) return 2;
            *(!strcmp(a, "--file-mib") ? &rp.file_bytes : &rp.mem_bytes) = mib << 20;
            i++;
        } else if (!strcmp(a, "--wait") && v) {
            if (cli_opt_double(a, v, 0, 3600, &rp.reclaim_wait_s)) return 2;
            i++;
        }
        else if (!strcmp(a, "--no-loaded")) rp.skip_loaded = true;
        else if (!strcmp(a, "--no-storage")) rp.skip_storage = true;
        else if (!strcmp(a, "--no-memory")) rp.skip_memory = true;
        else if (!strcmp(a, "--show")) show = true;
        else if (!strcmp(a, "--shape") && v) shape = argv[++i];
        else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && v) model = argv[++i];
        else if (!strcmp(a, "--weight-type") && v) wtype = argv[++i];
        else if (!strcmp(a, "--codec") && v) codec = argv[++i];
        else if (!strcmp(a, "--ctx") && v) {
            if (check_ctx_list(a, v)) return 2;
            ctxs = argv[++i];
        }
        else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) quiet = true;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: mzcache profile [options]\n\n"
                   "Measures this machine once and writes the device profile that eviction uses\n"
                   "to balance its two restore paths (paper §4.3): decode speed of every KV codec,\n"
                   "O_DIRECT read speed by request size (64 KiB-4 MiB) and reads in flight (1-8),\n"
                   "idle and beside a compute thread, and the cost of touching memory the OS took\n"
                   "back. Takes about a minute; the test file is removed at once.\n\n"
                   "  -o, --output FILE    profile file (default $XDG_CACHE_HOME/mzcache/profile.json,\n"
                   "                       else ~/.cache/mzcache/profile.json)\n"
                   "      --dir DIR        where the test file goes (default: the swap file's directory)\n"
                   "      --quick          a few seconds, coarse (for tests)\n"
                   "      --file-mib N     test file size (default 256)\n"
                   "      --mem-mib N      first-touch test size (default 256)\n"
                   "      --wait S         seconds to let the OS reclaim released memory (default 3)\n"
                   "      --no-loaded      skip the measurements beside compute\n"
                   "      --no-storage, --no-memory   skip those parts\n"
                   "      --show           print the saved profile instead of measuring\n"
                   "  -m, --model FILE     also print the per-unit times, T and planned restore times\n"
                   "                       for this model (or --shape qwen3-0.6b|smollm2-135m|\n"
                   "                       llama3.2-1b with --weight-type F16|Q8_0|Q4_0)\n"
                   "      --codec NAME     KV codec for those figures (default q8; q8, cachegen,\n"
                   "                       cachegen-layer, raw, ...: every codec is measured)\n"
                   "      --ctx N,N,...    context lengths for those figures (default 8192,16384,32768)\n"
                   "  -q, --quiet          no progress lines\n");
            return 0;
        } else {
            fprintf(stderr, "mzcache profile: unknown option '%s' (see mzcache profile --help)\n", a);
            return 2;
        }
    }
    char def[1024];
    if (!out_path) {
        if (mz_profile_default_path(def, sizeof def)) {
            fprintf(stderr, "mzcache profile: %s; use -o FILE\n", mz_last_error());
            return 1;
        }
        out_path = def;
    }
    mz_device_profile p;
    if (show) {
        if (mz_profile_load(out_path, &p))
            fprintf(stderr, "mzcache profile: %s (showing the built-in estimate)\n", mz_last_error());
    } else {
        rp.log = quiet ? NULL : stderr;
        if (mz_profile_run(&rp, &p)) {
            fprintf(stderr, "mzcache profile: %s\n", mz_last_error());
            return 1;
        }
        if (mz_profile_save(&p, out_path)) {
            fprintf(stderr, "mzcache profile: %s\n", mz_last_error());
            return 1;
        }
        if (!quiet) fprintf(stderr, "wrote %s\n", out_path);
    }
    if (show) print_profile(&p, out_path);

    if (shape) {
        size_t i = 0;
        while (i < MZ_ARRAY_LEN(k_shapes) && strcmp(k_shapes[i].name, shape)) i++;
        if (i == MZ_ARRAY_LEN(k_shapes)) {
            fprintf(stderr, "mzcache profile: unknown shape '%s' (qwen3-0.6b, smollm2-135m, "
                            "llama3.2-1b)\n", shape);
            return 2;
        }
        mz_profile_shape sh = {.qwen3 = k_shapes[i].qwen3, .n_layer = k_shapes[i].n_layer,
                               .n_embd = k_shapes[i].n_embd, .n_head = k_shapes[i].n_head,
                               .n_head_kv = k_shapes[i].n_head_kv,
                               .head_dim = k_shapes[i].head_dim, .n_ff = k_shapes[i].n_ff,
                               .weight_type = wtype};
        size_t kvb, blk;
        if (mz_profile_shape_units(&sh, &kvb, &blk)) {
            fprintf(stderr, "mzcache profile: %s\n", mz_last_error());
            return 2;
        }
        char label[96];
        snprintf(label, sizeof label, "%s %s (shape)", shape, wtype);
        print_derived(&p, label, sh.n_layer, kvb, blk, codec, ctxs);
    }
    if (model) {
        mz_model_params mp = mz_model_params_default();
        mz_model_t *m = NULL;
        if (mz_model_load(model, &mp, &m)) {
            fprintf(stderr, "mzcache profile: %s\n", mz_last_error());
            return 1;
        }
        mz_model_info mi;
        mz_model_get_info(m, &mi);
        size_t kvb = mi.kv_bytes_per_token / (size_t)mi.n_layer * MZ_KV_CHUNK_TOKENS;
        char label[192];
        snprintf(label, sizeof label, "%s (%s)", model, mi.weight_type);
        print_derived(&p, label, mi.n_layer, kvb, mi.block_bytes, codec, ctxs);
        mz_model_free(m);
    }
    return 0;
}
