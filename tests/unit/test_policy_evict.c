/*
 * test_policy_evict.c — the hybrid policy through the real mechanism, on a
 * generated tiny model (4 layers, 3 KV chunks per layer; vocab from the real
 * model, skipped with 77 without it).
 *
 * Two device profiles written as JSON make the same model fall into the
 * paper's two cases: t_rW / t_d = 2 (T = 8 < N_KV = 12: KVonly, then
 * KVandW) and 8 (T = 32 >= 12: KVandW at once, then Wonly). For each, with
 * the raw and q8 codecs, a sequence of evictions (growing amounts, a partial
 * forward-in restore by prefill of the first layers, eviction again from
 * there) must keep:
 *   - the answer bit-identical to a never-evicted context (raw) or to one
 *     whose chunks went through the same q8 round trips;
 *   - stages moving forward between restores (case 1 starts in KVonly, case 2
 *     never sees it);
 *   - the stats: the stage of the last step, planned restore times equal to
 *     the per-unit times times the units in each state, balanced within one
 *     unit's time while the stage is KVonly or KVandW;
 *   - backward-out: resident units of each kind a prefix of the forward order;
 *   - freed >= requested, or everything evictable gone.
 * Also: forward-out and random-out give correct answers too (the ablation
 * orders are slower to restore, never wrong).
 */
#include "evict_util.h"
#include "mem/profile.h"

#include <math.h>

#define N_LAYER 4
#define N_CTX 1024
#define N_BASE 700 /* 3 chunks per layer */
#define N_FOLLOW 12

static const char *T = "test_policy_evict";
static mz_model_t *g_m, *g_ref_m;
static int g_vocab;
static mz_token g_base[N_BASE], g_follow[N_FOLLOW];

/* disk_gbps: every read; q8q4r_gbps > 0 adds a q8-q4r entry decoding at that
 * rate (the default codec's candidate, codec_choice.h). */
static const char *write_profile_q8q4r(const char *name, double decode_gbps, double disk_gbps,
                                       double q8q4r_gbps)
{
    mz_device_profile p;
    mz_profile_builtin(&p);
    p.measured = true;
    p.n_sizes = 2;
    p.n_qd = 2;
    p.read_size[0] = 64 << 10;
    p.read_size[1] = 1 << 20;
    p.read_qd[0] = 1;
    p.read_qd[1] = 4;
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) p.read_gbps[i][j] = disk_gbps, p.read_gbps_loaded[i][j] = 0;
    /* Chunks (32 KiB) and blocks (~40 KiB) are below 64 KiB: each read costs
     * what a 64 KiB one does (65.5 us); decoding 32 KiB costs 32.8 us / gbps. */
    p.n_codecs = 2;
    p.codec[0] = (mz_profile_codec){.name = "raw", .decode_gbps = decode_gbps, .ratio = 1.0};
    p.codec[1] = (mz_profile_codec){.name = "q8", .decode_gbps = decode_gbps, .ratio = 0.53};
    if (q8q4r_gbps > 0)
        p.codec[p.n_codecs++] = (mz_profile_codec){.name = "q8-q4r", .decode_gbps = q8q4r_gbps, .ratio = 0.406};
    static char path[2][512];
    static int k;
    char *out = path[k++ % 2];
    snprintf(out, 512, "%s", t_tmp_path(name));
    return mz_profile_save(&p, out) == MZ_OK ? out : NULL;
}

static const char *write_profile(const char *name, double decode_gbps)
{
    return write_profile_q8q4r(name, decode_gbps, 1.0, 0);
}

static mz_ctx_t *ctx_with(mz_model_t *m, const char *codec, const char *profile,
                          mz_evict_order order)
{
    mz_ctx_params cp = mz_ctx_params_default();
    cp.n_ctx = N_CTX;
    cp.n_threads = 2;
    cp.kv_codec = codec;
    cp.swap_dir = t_tmp_path("swap-policy");
    cp.profile_path = profile;
    const mz_ctx_experimental xp = {.evict_order = order, .evict_seed = 5};
    cp.experimental = &xp;
    mz_ctx_t *c = NULL;
    if (mz_ctx_init(m, &cp, &c)) fprintf(stderr, "ctx: %s\n", mz_last_error());
    return c;
}

static bool prefix_ok(mz_ctx_t *c)
{
    bool gap = false;
    for (int l = 0; l < N_LAYER; l++) {
        bool r = mz_mem_weights_state(c->mem, l) == MZ_UNIT_RESIDENT;
        if (r && gap) return false;
        gap = gap || !r;
    }
    gap = false;
    for (int l = 0; l < N_LAYER; l++)
        for (size_t k = 0; k < c->kv.n_chunks; k++) {
            bool r = mz_mem_kv_state(c->mem, l, k) == MZ_UNIT_RESIDENT;
            if (r && gap) return false;
            gap = gap || !r;
        }
    return true;
}

/* Stats agree with the unit states and the per-unit times. */
static void check_stats(mz_ctx_t *c, const mz_evict_report *r, const char *label)
{
    mz_mem_stats st;
    mz_get_mem_stats(c, &st);
    const mz_unit_times *t = mz_mem_unit_times(c->mem);
    size_t n_comp = 0, n_raw = 0, n_enc = 0, n_drop = 0;
    for (int l = 0; l < N_LAYER; l++) {
        n_drop += mz_mem_weights_state(c->mem, l) == MZ_UNIT_DROPPED;
        for (size_t k = 0; k < c->kv.n_chunks; k++) {
            mz_unit_state s = mz_mem_kv_state(c->mem, l, k);
            n_comp += s == MZ_UNIT_COMPRESSED;
            n_raw += s == MZ_UNIT_STORED_RAW;
            n_enc += s == MZ_UNIT_STORED_COMPRESSED;
        }
    }
    double mem = (double)n_comp * (double)t->t_d_ns / 1e6;
    double sto = ((double)n_raw * (double)t->t_rkv_ns + (double)n_enc * (double)t->t_rkvc_ns +
                  (double)n_drop * (double)t->t_rw_ns) / 1e6;
    CHECK_MSG(fabs(st.planned_mem_ms - mem) < 1e-9 && fabs(st.planned_storage_ms - sto) < 1e-9,
              "%s: planned %.4f / %.4f ms, states say %.4f / %.4f", label, st.planned_mem_ms,
              st.planned_storage_ms, mem, sto);
    CHECK(!strcmp(st.policy, "hybrid") && st.profile_measured);
    CHECK(st.unit_t_d_ms > 0 && st.unit_t_rkv_ms > 0 && st.unit_t_rw_ms > 0);
    CHECK_EQ_INT(st.threshold_T, (size_t)N_LAYER * (size_t)(t->t_rw_ns / t->t_d_ns));
    if (r->stage == MZ_EVICT_STAGE_KV_ONLY || r->stage == MZ_EVICT_STAGE_KV_AND_W) {
        double u = (double)MZ_MAX(MZ_MAX(t->t_d_ns, t->t_rkv_ns), t->t_rw_ns) / 1e6;
        CHECK_MSG(fabs(st.planned_mem_ms - st.planned_storage_ms) <= u + 1e-9,
                  "%s (%s): memory %.4f ms vs storage %.4f ms", label,
                  mz_evict_stage_name(r->stage), st.planned_mem_ms, st.planned_storage_ms);
    }
    CHECK(st.stage >= r->stage || r->stage == MZ_EVICT_STAGE_NONE);
}

static void run_profile(const char *profile, const char *codec, bool case1)
{
    float *a = malloc((size_t)g_vocab * sizeof(float)), *b = malloc((size_t)g_vocab * sizeof(float));
    unsigned char went[N_LAYER * 4] = {0};
    mz_ctx_t *c = ctx_with(g_m, codec, profile, MZ_EVICT_BACKWARD);
    mz_ctx_t *ref = ev_ctx(g_ref_m, "raw", MZ_KV_PLACE_COMPRESSED, N_CTX, "swap-policy-ref");
    bool lossy = !strcmp(codec, "q8");
    CHECK(a && b && c && ref);
    if (!a || !b || !c || !ref) goto out;
    CHECK(mz_prefill(c, g_base, N_BASE) == MZ_OK && mz_prefill(ref, g_base, N_BASE) == MZ_OK);
    size_t total = ev_evictable_total(c);
    mz_mem_stats st;
    mz_get_mem_stats(c, &st);
    CHECK_MSG(st.stage == (case1 ? MZ_EVICT_STAGE_KV_ONLY : MZ_EVICT_STAGE_KV_AND_W),
              "fresh stage %s", mz_evict_stage_name(st.stage));
    /* Amounts of each round (fractions of the total); round 3 starts after a
     * partial restore of layers 0-1 (as prefill of a query would). */
    const double amounts[] = {0.08, 0.25, 0.5, 0.3, 1.0, 2.0};
    mz_evict_stage seen_max = MZ_EVICT_STAGE_NONE;
    bool saw_kvonly = false;
    for (size_t i = 0; i < MZ_ARRAY_LEN(amounts); i++) {
        char label[96];
        snprintf(label, sizeof label, "%s/%s/round %zu", case1 ? "case1" : "case2", codec, i);
        if (i == 3)
            for (int l = 0; l < 2; l++) CHECK(mz_mem_acquire_layer(c->mem, l, 3) == MZ_OK);
        size_t want = (size_t)((double)total * amounts[i]);
        mz_evict_report r;
        CHECK_MSG(mz_evict(c, want, &r) == MZ_OK, "%s: %s", label, mz_ctx_errmsg(c));
        CHECK_MSG(r.complete || ev_all_resident(c) == 0, "%s", label);
        mz_get_mem_stats(c, &st);
        if (!r.complete) CHECK_MSG(st.stage == MZ_EVICT_STAGE_DONE, "%s: incomplete at %s", label,
                                   mz_evict_stage_name(st.stage));
        else CHECK(r.bytes_freed >= want);
        if (getenv("MZ_TEST_VERBOSE")) fprintf(stderr, "%s: stage %s, freed %zu of %zu, now %s\n", label, mz_evict_stage_name(r.stage), r.bytes_freed, want, mz_evict_stage_name(st.stage));
        saw_kvonly = saw_kvonly || r.stage == MZ_EVICT_STAGE_KV_ONLY;
        /* Stages move forward between restores (round 5 has nothing left to do). */
        if (i != 3 && r.stage != MZ_EVICT_STAGE_NONE)
            CHECK_MSG(r.stage >= seen_max, "%s: stage went back", label);
        if (r.stage != MZ_EVICT_STAGE_NONE) seen_max = r.stage;
        CHECK(mz_mem_is_valid(c->mem));
        CHECK_MSG(prefix_ok(c), "%s: resident units are not a prefix", label);
        check_stats(c, &r, label);
        ev_mark_encoded(c, went);
    }
    /* Case 1 starts in KVonly; case 2 never sees it. (Wonly may pass inside
     * one request; the report keeps the last stage, test_policy the rest.) */
    CHECK(case1 ? saw_kvonly : !saw_kvonly);
    /* The answer after all that (restored on demand) equals the reference. */
    if (lossy) CHECK(ev_apply_marks(ref, mz_mem_codec(c->mem), went) == 0);
    CHECK(ev_prefill_logits(c, g_follow, N_FOLLOW, a, g_vocab) == MZ_OK);
    CHECK(ev_prefill_logits(ref, g_follow, N_FOLLOW, b, g_vocab) == MZ_OK);
    CHECK_MSG(memcmp(a, b, (size_t)g_vocab * sizeof(float)) == 0, "%s %s: logits differ",
              case1 ? "case1" : "case2", codec);
    CHECK(ev_all_resident(c));
out:
    mz_ctx_free(c);
    mz_ctx_free(ref);
    free(a);
    free(b);
}

/* After each eviction the next answer matches, for every order. */
static void run_orders(const char *profile)
{
    float *a = malloc((size_t)g_vocab * sizeof(float)), *b = malloc((size_t)g_vocab * sizeof(float));
    mz_ctx_t *ref = ev_ctx(g_ref_m, "raw", MZ_KV_PLACE_COMPRESSED, N_CTX, "swap-policy-ref");
    CHECK(a && b && ref && mz_prefill(ref, g_base, N_BASE) == MZ_OK);
    CHECK(ev_prefill_logits(ref, g_follow, N_FOLLOW, b, g_vocab) == MZ_OK);
    const mz_evict_order orders[] = {MZ_EVICT_BACKWARD, MZ_EVICT_FORWARD, MZ_EVICT_RANDOM};
    for (size_t o = 0; o < MZ_ARRAY_LEN(orders); o++) {
        mz_ctx_t *c = ctx_with(g_m, "raw", profile, orders[o]);
        CHECK(c && mz_prefill(c, g_base, N_BASE) == MZ_OK);
        if (!c) continue;
        size_t total = ev_evictable_total(c);
        const double amounts[] = {0.1, 0.5, 1.0};
        for (size_t i = 0; i < MZ_ARRAY_LEN(amounts); i++) {
            CHECK(mz_ctx_truncate(c, N_BASE) == MZ_OK);
            CHECK(mz_evict(c, (size_t)((double)total * amounts[i]), NULL) == MZ_OK);
            CHECK(mz_mem_is_valid(c->mem));
            mz_mem_stats st;
            mz_get_mem_stats(c, &st);
            CHECK(!strcmp(st.evict_order, mz_evict_order_name(orders[o])));
            if (orders[o] == MZ_EVICT_FORWARD && i == 0)
                CHECK(mz_mem_kv_state(c->mem, 0, 0) != MZ_UNIT_RESIDENT);
            CHECK(ev_prefill_logits(c, g_follow, N_FOLLOW, a, g_vocab) == MZ_OK);
            CHECK_MSG(memcmp(a, b, (size_t)g_vocab * sizeof(float)) == 0, "order %s, %.0f%%",
                      mz_evict_order_name(orders[o]), amounts[i] * 100);
        }
        mz_ctx_free(c);
    }
    mz_ctx_free(ref);
    free(a);
    free(b);
}

/* The default codec (kv_codec NULL): q8-q4r where the profile's disk is the
 * long pole and it decodes fast enough, q8 where its decode would be
 * (codec_choice.h); a codec named by the caller is kept; a profile without a
 * q8-q4r entry of its own gives q8. */
static void run_auto_codec(void)
{
    static const struct {
        const char *file, *asked, *want;
        double decode_gbps, disk_gbps, q8q4r_gbps;
    } cases[] = {
        {"profile-auto-slow-disk.json", NULL, "q8-q4r", 50.0, 0.02, 40.0},
        {"profile-auto-slow-disk.json", "auto", "q8-q4r", 50.0, 0.02, 40.0},
        {"profile-auto-slow-disk.json", "q8", "q8", 50.0, 0.02, 40.0},
        {"profile-auto-slow-decode.json", NULL, "q8", 50.0, 0.02, 0.001},
        {"profile-auto-none.json", NULL, "q8", 50.0, 0.02, 0},
    };
    for (size_t i = 0; i < MZ_ARRAY_LEN(cases); i++) {
        const char *prof =
            write_profile_q8q4r(cases[i].file, cases[i].decode_gbps, cases[i].disk_gbps, cases[i].q8q4r_gbps);
        CHECK(prof != NULL);
        mz_ctx_t *c = prof ? ctx_with(g_m, cases[i].asked, prof, MZ_EVICT_BACKWARD) : NULL;
        CHECK(c != NULL);
        if (!c) continue;
        mz_mem_stats st;
        mz_get_mem_stats(c, &st);
        CHECK_MSG(!strcmp(st.codec, cases[i].want), "%s, kv_codec %s: codec %s, want %s", cases[i].file,
                  cases[i].asked ? cases[i].asked : "NULL", st.codec, cases[i].want);
        mz_ctx_free(c);
    }
}

int main(void)
{
    int setup = ev_pair_setup(T, "policy-tiny.gguf", N_LAYER, &g_m, &g_ref_m, &g_vocab, g_base, N_BASE, g_follow,
                              N_FOLLOW, 11);
    if (setup >= 0) return setup;

    const char *p1 = write_profile("profile-case1.json", 1.0); /* t_rW / t_d = 2 */
    const char *p2 = write_profile("profile-case2.json", 4.0); /* t_rW / t_d = 8 */
    CHECK(p1 && p2);
    if (p1 && p2) {
        for (int k = 0; k < 2; k++) {
            run_profile(p1, k ? "q8" : "raw", true);
            run_profile(p2, k ? "q8" : "raw", false);
        }
        run_orders(p1);
    }
    run_auto_codec();
    mz_model_free(g_m);
    mz_model_free(g_ref_m);
    return t_done(T);
}
