/*
 * test_baselines.c — the engine modes (mzcache and the baselines os-paging,
 * partial-offload, recompute) on a generated tiny model and on the real
 * SmolLM2-135M (skipped when models/ lacks it):
 *   - every mode is lossless: after evicting 50 % and after evicting
 *     everything, the next answer's logits are memcmp-identical to those of a
 *     context that was never evicted (restored by mz_prefill_restore, by
 *     mz_restore + mz_prefill, and by mz_prefill alone);
 *   - mz_get_mem_stats reports the eviction (remaining_pct falls, by mincore
 *     for os-paging) and the restore;
 *   - os-paging with a zram swap device (scripts/zram-swap.sh, root only;
 *     skipped with a message elsewhere, or when MZ_TEST_NO_ZRAM is set): KV
 *     goes to swap, not to the file-mapping fallback;
 *   - names and parsing of the modes; a model file-mapped for os-paging
 *     refuses contexts of other modes.
 */
#define _GNU_SOURCE
#include "baseline/baseline.h"
#include "evict_util.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *T = "test_baselines";

#define N_FOLLOW 8

typedef struct setup {
    const char *name;
    const char *path;
    size_t n_base;
    int n_ctx;
    mz_token base[1024];
    mz_token follow[3][N_FOLLOW];
    float *ref[4];             /* logits: after base, after follow 0, 1, 2 */
    int n_vocab;
} setup;

static int make_reference(setup *su)
{
    mz_model_t *m = ev_load(su->path);
    if (!m) return -1;
    su->n_vocab = mz_model_n_vocab(m);
    mz_ctx_t *c = ev_mode_ctx(m, MZ_MODE_MZCACHE, su->n_ctx, "ref");
    int rc = -1;
    if (!c) goto out;
    for (int i = 0; i < 4; i++) {
        su->ref[i] = malloc((size_t)su->n_vocab * sizeof(float));
        if (!su->ref[i]) goto out;
    }
    if (ev_prefill_logits(c, su->base, su->n_base, su->ref[0], su->n_vocab)) goto out;
    for (int f = 0; f < 3; f++)
        if (ev_prefill_logits(c, su->follow[f], N_FOLLOW, su->ref[f + 1], su->n_vocab)) goto out;
    rc = 0;
out:
    if (rc) fprintf(stderr, "reference: %s\n", mz_last_error());
    mz_ctx_free(c);
    mz_model_free(m);
    return rc;
}

static bool same_logits(const mz_ctx_t *c, const float *ref, int n_vocab)
{
    const float *lg = mz_ctx_logits(c);
    return lg && memcmp(lg, ref, (size_t)n_vocab * sizeof(float)) == 0;
}

/* True when another process maps path: then its pages cannot leave the page
 * cache, and os-paging (truthfully) cannot free the weights. */
static bool mapped_elsewhere(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0) return false;
    DIR *d = opendir("/proc");
    if (!d) return false;
    bool found = false;
    char self[32];
    snprintf(self, sizeof self, "%d", (int)getpid());
    for (struct dirent *e; !found && (e = readdir(d));) {
        if (e->d_name[0] < '1' || e->d_name[0] > '9' || !strcmp(e->d_name, self)) continue;
        char mp[300], line[1024];
        snprintf(mp, sizeof mp, "/proc/%s/maps", e->d_name);
        FILE *f = fopen(mp, "r");
        if (!f) continue;
        while (!found && fgets(line, sizeof line, f)) {
            unsigned long long ino = 0;
            unsigned maj = 0, mnr = 0;
            if (sscanf(line, "%*s %*s %*s %x:%x %llu", &maj, &mnr, &ino) == 3 &&
                ino == (unsigned long long)st.st_ino && ino != 0)
                found = true;
        }
        fclose(f);
    }
    closedir(d);
    return found;
}

/* One mode: evict 50 %, everything, everything; each time the next answer
 * must equal the reference, and the stats must show the eviction. */
static void run_mode(setup *su, mz_engine_mode mode)
{
    const char *mn = mz_engine_mode_name(mode);
    mz_model_t *m = ev_load(su->path);
    CHECK(m != NULL);
    if (!m) return;
    char swap[64];
    snprintf(swap, sizeof swap, "swap-%s", mn);
    mz_ctx_t *c = ev_mode_ctx(m, mode, su->n_ctx, swap);
    CHECK(c != NULL);
    if (!c) goto out;

    CHECK_MSG(mz_prefill(c, su->base, su->n_base) == MZ_OK, "%s: %s", mn, mz_ctx_errmsg(c));
    CHECK_MSG(same_logits(c, su->ref[0], su->n_vocab), "%s/%s: base logits differ", su->name, mn);
    mz_mem_stats st;
    mz_get_mem_stats(c, &st);
    size_t total = st.weights.total_bytes + st.kv.total_bytes;
    CHECK(total > 0);
    CHECK_MSG(st.remaining_pct > 99.0, "%s/%s: %.1f %% remaining before eviction", su->name, mn,
              st.remaining_pct);

    for (int round = 0; round < 3; round++) {
        size_t want = round == 0 ? total / 2 : SIZE_MAX;
        mz_evict_report er;
        mz_status s = mz_evict(c, want, &er);
        CHECK_MSG(s == MZ_OK, "%s/%s round %d: evict: %s", su->name, mn, round, mz_ctx_errmsg(c));
        mz_get_mem_stats(c, &st);
        double freed_pct = 100.0 * (double)er.bytes_freed / (double)total;
        if (mode == MZ_MODE_OS_PAGING && mapped_elsewhere(su->path)) {
            printf("  NOTE %s/os-paging: another process maps %s, so its pages cannot leave "
                   "the page cache; only the KV and the answers are checked\n", su->name,
                   su->path);
            CHECK(round == 0 || st.kv.resident_bytes == 0);
            goto answer;
        }
        printf("  %s/%s round %d: asked %s, freed %.1f %%, remaining %.1f %% "
               "(weights %zu/%zu resident, kv %zu/%zu resident, %zu compressed, %zu stored; "
               "placement %s) in %.1f ms\n",
               su->name, mn, round, round == 0 ? "50 %" : "all", freed_pct, st.remaining_pct,
               st.weights.resident_bytes, st.weights.total_bytes, st.kv.resident_bytes,
               st.kv.total_bytes, st.kv.compressed_bytes, st.kv.stored_bytes, st.placement,
               er.time_ms);
        if (round == 0) {
            CHECK_MSG(er.complete && freed_pct >= 49.0, "%s/%s: freed only %.1f %%", su->name, mn,
                      freed_pct);
            /* recompute drops everything whatever is asked. */
            if (mode == MZ_MODE_RECOMPUTE) CHECK(st.remaining_pct < 1.0);
            else CHECK_MSG(st.remaining_pct <= 51.0 && st.remaining_pct >= 1.0,
                           "%s/%s: %.1f %% remaining after evicting 50 %%", su->name, mn,
                           st.remaining_pct);
        } else {
            CHECK_MSG(st.remaining_pct < 2.0, "%s/%s: %.1f %% remaining after evicting all",
                      su->name, mn, st.remaining_pct);
            CHECK(st.kv.resident_bytes == 0);
        }
        CHECK_EQ_INT(mz_ctx_n_tokens(c), su->n_base + (size_t)round * N_FOLLOW);

    answer:
        if (round == 1) {
            mz_restore_report rr;
            s = mz_restore(c, &rr);
            CHECK_MSG(s == MZ_OK, "%s/%s: restore: %s", su->name, mn, mz_ctx_errmsg(c));
            mz_get_mem_stats(c, &st);
            CHECK_MSG(st.remaining_pct > 99.0, "%s/%s: %.1f %% remaining after mz_restore",
                      su->name, mn, st.remaining_pct);
        }
        if (round == 0) {
            mz_restore_timings tm;
            s = mz_prefill_restore(c, su->follow[round], N_FOLLOW, NULL, &tm);
            CHECK(tm.ttft_ms >= tm.prefill_ms);
        } else {
            s = mz_prefill(c, su->follow[round], N_FOLLOW);
        }
        CHECK_MSG(s == MZ_OK, "%s/%s: prefill: %s", su->name, mn, mz_ctx_errmsg(c));
        CHECK_MSG(same_logits(c, su->ref[round + 1], su->n_vocab),
                  "%s/%s round %d: logits after eviction differ from never-evicted", su->name, mn,
                  round);
        mz_get_mem_stats(c, &st);
        /* Everything the forward pass read is back (by page faults for os-paging). */
        CHECK_MSG(st.remaining_pct > 99.0, "%s/%s: %.1f %% remaining after the answer", su->name,
                  mn, st.remaining_pct);
    }
    if (mode == MZ_MODE_OS_PAGING) {
        bool zram = false;
        size_t swap_total = mz_ospage_swap_total(&zram);
        if (swap_total == 0) CHECK_MSG(strcmp(st.placement, "file-mapping") == 0,
                                       "no swap, placement %s", st.placement);
    }
out:
    mz_ctx_free(c);
    mz_model_free(m);
}

static void test_names(void)
{
    const char *names[] = {"mzcache", "os-paging", "partial-offload", "recompute"};
    for (int i = 0; i < 4; i++) {
        mz_engine_mode md = MZ_MODE_RECOMPUTE;
        CHECK(strcmp(mz_engine_mode_name((mz_engine_mode)i), names[i]) == 0);
        CHECK(mz_engine_mode_parse(names[i], &md) == MZ_OK && (int)md == i);
    }
    mz_engine_mode md;
    CHECK(mz_engine_mode_parse("paging", &md) == MZ_E_INVAL);
    CHECK(mz_engine_mode_parse(NULL, &md) == MZ_E_INVAL);
    CHECK(mz_engine_mode_name((mz_engine_mode)9) == NULL);
    CHECK(mz_ctx_params_default().mode == MZ_MODE_MZCACHE);
}

/* A model whose weights are file-mapped takes only os-paging contexts, and the
 * weights come back into the model's buffers afterwards. */
static void test_mixing(setup *su)
{
    mz_model_t *m = ev_load(su->path);
    CHECK(m != NULL);
    if (!m) return;
    mz_ctx_t *a = ev_mode_ctx(m, MZ_MODE_OS_PAGING, su->n_ctx, "mix"), *b = NULL;
    CHECK(a != NULL);
    mz_ctx_params cp = mz_ctx_params_default();
    cp.n_ctx = su->n_ctx;
    cp.mode = MZ_MODE_MZCACHE;
    CHECK(mz_ctx_init(m, &cp, &b) == MZ_E_INVAL && b == NULL);
    /* A second context joins the engine of the first: same swap directory
     * (an engine has one); another one is refused. */
    mz_ctx_t *a2 = ev_mode_ctx(m, MZ_MODE_OS_PAGING, su->n_ctx, "mix2");
    CHECK(a2 == NULL);
    a2 = ev_mode_ctx(m, MZ_MODE_OS_PAGING, su->n_ctx, "mix");
    CHECK(a2 != NULL);
    mz_ctx_free(a2);
    mz_ctx_free(a);
    /* Back in the model's buffers: a mzcache context works and matches. */
    b = ev_mode_ctx(m, MZ_MODE_MZCACHE, su->n_ctx, "mix3");
    CHECK(b != NULL);
    if (b) {
        CHECK(mz_prefill(b, su->base, su->n_base) == MZ_OK);
        CHECK(same_logits(b, su->ref[0], su->n_vocab));
        cp.mode = MZ_MODE_OS_PAGING;
        CHECK(mz_ctx_init(m, &cp, &a) == MZ_E_INVAL);
    }
    mz_ctx_free(b);
    cp.mode = (mz_engine_mode)17;
    CHECK(mz_ctx_init(m, &cp, &a) == MZ_E_INVAL);
    mz_model_free(m);
}

/* os-paging with a zram swap device: the KV goes to swap. */
static void test_zram(setup *su)
{
    if (getenv("MZ_TEST_NO_ZRAM")) {
        t_skip_part("zram case", "MZ_TEST_NO_ZRAM is set");
        return;
    }
    if (system("sh scripts/zram-swap.sh check") != 0) {
        t_skip_part("zram case", "no zram swap possible here (see the message above: not root "
               "or no zram)");
        return;
    }
    char dev[64];
    if (!t_zram_up("256M", dev, sizeof dev)) return;
    printf("  zram swap on %s\n", dev);

    mz_model_t *m = ev_load(su->path);
    mz_ctx_t *c = m ? ev_mode_ctx(m, MZ_MODE_OS_PAGING, su->n_ctx, "zram") : NULL;
    CHECK(c != NULL);
    if (c) {
        CHECK(mz_prefill(c, su->base, su->n_base) == MZ_OK);
        mz_evict_report er;
        CHECK(mz_evict(c, SIZE_MAX, &er) == MZ_OK);
        mz_mem_stats st;
        mz_get_mem_stats(c, &st);
        printf("  zram: remaining %.1f %%, kv resident %zu, in zram (compressed) %zu of %zu, "
               "placement %s, freed %zu net\n", st.remaining_pct, st.kv.resident_bytes,
               st.kv.compressed_bytes, st.kv.total_bytes, st.placement, er.bytes_freed);
        CHECK_MSG(strcmp(st.placement, "zram-swap") == 0, "placement %s", st.placement);
        CHECK(st.swap_file_bytes == 0); /* no file fallback */
        CHECK(st.kv.resident_bytes == 0);
        CHECK(st.kv.compressed_bytes > 0 && st.kv.compressed_bytes < st.kv.total_bytes);
        CHECK(mz_prefill(c, su->follow[0], N_FOLLOW) == MZ_OK);
        CHECK_MSG(same_logits(c, su->ref[1], su->n_vocab), "zram: logits differ");
    }
    mz_ctx_free(c);
    mz_model_free(m);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "sh scripts/zram-swap.sh down %s", dev);
    CHECK_MSG(system(cmd) == 0, "zram-swap.sh down %s failed", dev);
}

static int prepare(setup *su, const char *name, const char *path, size_t n_base, int n_ctx)
{
    memset(su, 0, sizeof *su);
    su->name = name;
    su->path = path;
    su->n_base = n_base;
    su->n_ctx = n_ctx;
    mz_model_t *m = ev_load(path);
    if (!m) return -1;
    int nv = mz_model_n_vocab(m);
    mz_model_free(m);
    ev_tokens(su->base, n_base, nv, 11);
    for (int f = 0; f < 3; f++) ev_tokens(su->follow[f], N_FOLLOW, nv, 100 + (unsigned)f);
    return make_reference(su);
}

static void release(setup *su)
{
    for (int i = 0; i < 4; i++) free(su->ref[i]);
}

int main(void)
{
    test_names();
    const char *real = t_real_model_path();
    if (!real) return t_skip(T, "models/SmolLM2-135M-Instruct.Q4_1.gguf is missing (scripts/fetch-model)");
    static char tiny[4096];
    snprintf(tiny, sizeof tiny, "%s", t_tmp_path("baselines-tiny.gguf"));
    if (ev_gen_tiny(tiny, 4)) {
        fprintf(stderr, "gen: %s\n", mz_last_error());
        return 1;
    }
    static setup su;
    const mz_engine_mode modes[] = {MZ_MODE_MZCACHE, MZ_MODE_OS_PAGING, MZ_MODE_PARTIAL_OFFLOAD,
                                    MZ_MODE_RECOMPUTE};
    /* tiny: 3 chunks a layer (the last one partial); real: 2. */
    if (prepare(&su, "tiny", tiny, 600, 1024)) return 1;
    for (size_t i = 0; i < MZ_ARRAY_LEN(modes); i++) run_mode(&su, modes[i]);
    test_mixing(&su);
    test_zram(&su);
    release(&su);

    if (prepare(&su, "smollm2", real, 300, 512)) return 1;
    /* Under the sanitizers the real model's forward passes cost minutes per
     * mode; there it runs os-paging only, the one mode whose weight path
     * (Q4_1 read from the file mapping) the tiny F16 model does not cover. */
    const bool sanitized = getenv("MZ_SANITIZED") != NULL;
    if (sanitized) printf("%s: MZ_SANITIZED: SmolLM2 in os-paging mode only\n", T);
    for (size_t i = 0; i < MZ_ARRAY_LEN(modes); i++)
        if (!sanitized || modes[i] == MZ_MODE_OS_PAGING) run_mode(&su, modes[i]);
    release(&su);
    return t_done(T);
}
