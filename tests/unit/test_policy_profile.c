/*
 * test_policy_profile.c — the device profile: JSON round trip, a tolerant
 * parser that refuses damaged files (and the engine falls back to the
 * built-in estimate), derivation of per-unit times and T, unit sizes from a
 * shape checked against the model loader, and a quick measurement run (on
 * a filesystem that refuses O_DIRECT it falls back to buffered reads and
 * records direct = false).
 */
#include "mem/codec_choice.h"
#include "mem/profile.h"
#include "testutil.h"

#include <math.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *T = "test_policy_profile";

static void test_roundtrip(void)
{
    mz_device_profile a, b;
    mz_profile_builtin(&a);
    a.measured = true;
    snprintf(a.cpu, sizeof a.cpu, "Test \"CPU\" \\ with\ttab");
    snprintf(a.created, sizeof a.created, "2026-11-30T00:00:00Z");
    a.read_gbps_loaded[2][1] = 0.75;
    a.codec[a.n_codecs++] = (mz_profile_codec){.name = "cachegen", .decode_gbps = 0.4,
                                               .decode_gbps_loaded = 0.3, .ratio = 0.25};
    char buf[8192];
    size_t n = mz_profile_to_json(&a, buf, sizeof buf);
    CHECK(n > 100 && n < sizeof buf);
    CHECK(mz_profile_from_json(buf, n, &b) == MZ_OK);
    CHECK(b.measured && !strcmp(b.cpu, a.cpu) && !strcmp(b.created, a.created));
    CHECK(b.n_sizes == a.n_sizes && b.n_qd == a.n_qd && b.n_codecs == a.n_codecs);
    for (int i = 0; i < a.n_sizes; i++) {
        CHECK(b.read_size[i] == a.read_size[i]);
        for (int j = 0; j < a.n_qd; j++) {
            CHECK(fabs(b.read_gbps[i][j] - a.read_gbps[i][j]) < 1e-4);
            CHECK(fabs(b.read_gbps_loaded[i][j] - a.read_gbps_loaded[i][j]) < 1e-4);
        }
    }
    CHECK(!strcmp(b.codec[2].name, "cachegen") && fabs(b.codec[2].ratio - 0.25) < 1e-4);
    CHECK(fabs(b.touch_cold_s_per_gib - a.touch_cold_s_per_gib) < 1e-4);
    /* Truncated output reports the full length. */
    char small[32];
    CHECK(mz_profile_to_json(&a, small, sizeof small) == n && strlen(small) == sizeof small - 1);

    /* Save / load through a file; unknown keys and reordering are fine. */
    const char *path = t_tmp_path("profile-rt/sub/profile.json");
    CHECK(mz_profile_save(&a, path) == MZ_OK);
    CHECK(mz_profile_load(path, &b) == MZ_OK && b.n_codecs == a.n_codecs);
    const char *extra =
        "{ \"future\": {\"x\": [1, 2, {\"y\": null}]}, \"codecs\": [{\"ratio\": 0.5, "
        "\"name\": \"q8\", \"decode_gbps\": 5, \"extra\": true}], \"mzcache_profile\": 1,"
        "\"storage\": {\"queue_depths\": [1], \"sizes\": [65536, 1048576],"
        "\"read_gbps\": [[0.5], [1.5e0]]} }";
    CHECK(mz_profile_from_json(extra, strlen(extra), &b) == MZ_OK);
    CHECK(b.n_codecs == 1 && b.n_sizes == 2 && b.n_qd == 1 && b.read_gbps[1][0] == 1.5);
    CHECK(b.memcpy_gbps > 0 && b.touch_cold_s_per_gib > 0); /* defaulted */
}

static void test_corrupt(void)
{
    mz_device_profile p, builtin;
    mz_profile_builtin(&builtin);
    char good[8192];
    size_t n = mz_profile_to_json(&builtin, good, sizeof good);
    const char *bad[] = {
        "",
        "{",
        "[]",
        "{\"mzcache_profile\": 2}",
        "{\"mzcache_profile\": 1}",
        "{\"mzcache_profile\": 1, \"storage\": {\"sizes\": [65536], \"queue_depths\": [1], "
        "\"read_gbps\": [[0]]}, \"codecs\": [{\"name\": \"q8\", \"decode_gbps\": 1}]}",
        "{\"mzcache_profile\": 1, \"storage\": {\"sizes\": [65536, 4096], \"queue_depths\": [1], "
        "\"read_gbps\": [[1], [1]]}, \"codecs\": [{\"name\": \"q8\", \"decode_gbps\": 1}]}",
        "{\"mzcache_profile\": 1, \"storage\": {\"sizes\": [65536], \"queue_depths\": [1], "
        "\"read_gbps\": [[1, 2]]}, \"codecs\": [{\"name\": \"q8\", \"decode_gbps\": 1}]}",
        "{\"mzcache_profile\": 1, \"storage\": {\"sizes\": [65536], \"queue_depths\": [1], "
        "\"read_gbps\": [[1]]}, \"codecs\": []}",
        "{\"a\": \"\\x\"}",
        "{\"a\": 1e999}",
        "{\"a\": [[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]}",
        "{\"mzcache_profile\": 1} trailing",
        /* Fractions where the file holds whole numbers: 1.2 and 1.73 ascend
         * but both truncate to 1 (the fuzzer's fixed-point failure). */
        "{\"mzcache_profile\": 1, \"storage\": {\"sizes\": [65536], \"queue_depths\": [1.2, 1.73], "
        "\"read_gbps\": [[1, 2]]}, \"codecs\": [{\"name\": \"q8\", \"decode_gbps\": 1}]}",
        "{\"mzcache_profile\": 1, \"storage\": {\"sizes\": [65536.5], \"queue_depths\": [1], "
        "\"read_gbps\": [[1]]}, \"codecs\": [{\"name\": \"q8\", \"decode_gbps\": 1}]}",
        "{\"mzcache_profile\": 1.5, \"storage\": {\"sizes\": [65536], \"queue_depths\": [1], "
        "\"read_gbps\": [[1]]}, \"codecs\": [{\"name\": \"q8\", \"decode_gbps\": 1}]}",
        "{\"mzcache_profile\": 1, \"n_cpus\": 2.5, \"storage\": {\"sizes\": [65536], "
        "\"queue_depths\": [1], \"read_gbps\": [[1]]}, \"codecs\": [{\"name\": \"q8\", "
        "\"decode_gbps\": 1}]}",
        "{\"mzcache_profile\": 1, \"storage\": {\"sizes\": [65536], \"queue_depths\": [1], "
        "\"read_gbps\": [[1]]}, \"memory\": {\"prefault_threads\": [1, 1.5], "
        "\"prefault_s_per_gib\": [1, 1]}, \"codecs\": [{\"name\": \"q8\", \"decode_gbps\": 1}]}",
    };
    for (size_t i = 0; i < MZ_ARRAY_LEN(bad); i++) {
        mz_status s = mz_profile_from_json(bad[i], strlen(bad[i]), &p);
        CHECK_MSG(s == MZ_E_FORMAT, "bad[%zu] gave %d", i, s);
        CHECK(!p.measured && p.n_codecs == builtin.n_codecs); /* the built-in estimate */
    }
    /* Every truncation and a byte flipped anywhere: refused or parsed, never a crash. */
    for (size_t k = 0; k + 2 < n; k += 7) {
        mz_status s1 = mz_profile_from_json(good, k, &p);
        CHECK(s1 == MZ_E_FORMAT); /* every strict prefix is incomplete */
        char tmp[8192];
        memcpy(tmp, good, n);
        tmp[k] ^= 0x55;
        mz_status s2 = mz_profile_from_json(tmp, n, &p);
        CHECK(s2 == MZ_OK || s2 == MZ_E_FORMAT);
        if (s2) CHECK(!p.measured && p.n_codecs == builtin.n_codecs);
    }
    /* A missing file: an error from load, the estimate (and no failure) from
     * load_or_builtin. */
    CHECK(mz_profile_load(t_tmp_path("no-such-profile.json"), &p) == MZ_E_IO);
    /* Over 1 MiB (JSON spaces after a good profile): refused unparsed. */
    const char *big = t_tmp_path("profile-big.json");
    FILE *f = fopen(big, "wb");
    CHECK(f != NULL);
    if (f) {
        CHECK(fwrite(good, 1, n, f) == n);
        for (size_t i = n; i <= ((size_t)1 << 20); i++) fputc(' ', f);
        CHECK(fclose(f) == 0);
        CHECK_EQ_INT(mz_profile_load(big, &p), MZ_E_FORMAT);
        CHECK_MSG(strstr(mz_last_error(), "larger than 1 MiB") != NULL, "%s", mz_last_error());
        CHECK(!p.measured && p.n_codecs == builtin.n_codecs);
    }
    mz_profile_load_or_builtin(t_tmp_path("no-such-profile.json"), &p);
    CHECK(!p.measured && p.n_codecs >= 2);
}

static void test_derive(void)
{
    mz_device_profile p;
    mz_profile_builtin(&p);
    /* qwen3-0.6b F16: KV chunk 1 MiB, block ~30 MiB. */
    mz_profile_shape sh = {.qwen3 = true, .n_layer = 28, .n_embd = 1024, .n_head = 16,
                           .n_head_kv = 8, .head_dim = 128, .n_ff = 3072, .weight_type = "F16"};
    size_t kvb = 0, blk = 0;
    CHECK(mz_profile_shape_units(&sh, &kvb, &blk) == MZ_OK);
    CHECK_EQ_INT(kvb, 1 << 20);
    /* 15 M parameters of F16 (q 2M, k 1M, v 1M, o 2M, gate/up/down 3M each) + norms. */
    CHECK_EQ_INT(blk, 2 * (2097152 + 1048576 + 1048576 + 2097152 + 3 * 3145728) +
                          4 * (1024 + 1024 + 128 + 128));
    mz_unit_times t;
    mz_profile_units u = {.kv_chunk_bytes = kvb, .block_bytes = blk, .codec = "q8"};
    mz_profile_derive(&p, &u, &t);
    /* q8 decodes at 6.3 GB/s: 1 MiB in 0.166 ms; 1 MiB reads at QD 4 go at 1.7 GB/s. */
    CHECK(t.t_d_ns > 160000 && t.t_d_ns < 170000);
    CHECK(t.t_rkv_ns > 600000 && t.t_rkv_ns < 630000);
    CHECK(t.t_rw_ns > 18000000 && t.t_rw_ns < 19000000);
    CHECK(t.t_rkvc_ns > t.t_d_ns && t.t_rkvc_ns < t.t_rkv_ns + t.t_d_ns);
    CHECK(t.t_alloc_kv_ns > 0 && t.t_alloc_w_ns > t.t_alloc_kv_ns);
    CHECK_EQ_INT(mz_profile_threshold(&t, 28), 28 * (t.t_rw_ns / t.t_d_ns));
    CHECK(mz_profile_threshold_exact(&t, 28) >= mz_profile_threshold(&t, 28));
    CHECK(mz_profile_threshold_exact(&t, 28) - mz_profile_threshold(&t, 28) < 28);
    /* Q8_0 blocks are 34/64 of F16: T about halves. */
    sh.weight_type = "Q8_0";
    size_t blk8 = 0;
    CHECK(mz_profile_shape_units(&sh, &kvb, &blk8) == MZ_OK);
    CHECK(blk8 < blk * 0.54 && blk8 > blk * 0.52);
    /* Family fallback and unknown codecs. */
    CHECK(mz_profile_codec_find(&p, "q8-g32") == mz_profile_codec_find(&p, "q8"));
    CHECK(mz_profile_codec_find(&p, "nope") == NULL);
    u.codec = "nope";
    mz_profile_derive(&p, &u, &t);
    CHECK(t.t_d_ns > 1000000); /* 1 GB/s: 1 ms per MiB */
    /* Reads: interpolated between sizes, tiny requests cost what the smallest did. */
    double g64 = mz_profile_read_gbps(&p, 64 << 10, 1, false);
    double g128 = mz_profile_read_gbps(&p, 128 << 10, 1, false);
    CHECK(fabs(g64 - 0.59) < 1e-9 && g128 > 0.59 && g128 < 0.90);
    CHECK(fabs(mz_profile_read_gbps(&p, 32 << 10, 1, false) - 0.295) < 1e-9);
    CHECK(fabs(mz_profile_read_gbps(&p, 64 << 20, 8, false) - 1.6) < 1e-9);
    CHECK(fabs(mz_profile_read_gbps(&p, 1 << 20, 2, false) - 1.30) < 1e-9); /* QD 1 row */
    CHECK(mz_profile_shape_units(&(mz_profile_shape){.n_layer = 1, .n_embd = 100, .n_head = 1,
                                                      .n_head_kv = 1, .head_dim = 100,
                                                      .n_ff = 100, .weight_type = "Q8_0"},
                                 &kvb, &blk) == MZ_E_INVAL); /* 100 is not a multiple of 32 */
}

/* Every read of the profile at `gbps`, whatever its size and depth. */
static void set_disk(mz_device_profile *p, double gbps)
{
    for (int i = 0; i < p->n_sizes; i++)
        for (int j = 0; j < p->n_qd; j++) {
            p->read_gbps[i][j] = gbps;
            p->read_gbps_loaded[i][j] = 0;
        }
}

static void set_codec(mz_device_profile *p, const char *name, double decode_gbps, double ratio)
{
    mz_profile_codec *c = NULL;
    for (int i = 0; i < p->n_codecs; i++)
        if (!strcmp(p->codec[i].name, name)) c = &p->codec[i];
    if (!c) c = &p->codec[p->n_codecs++];
    *c = (mz_profile_codec){.decode_gbps = decode_gbps, .encode_gbps = 1.0, .ratio = ratio};
    snprintf(c->name, sizeof c->name, "%s", name);
}

/* The default KV codec (codec_choice.h) on the qwen3-0.6b F16 shape at 16k
 * (28 blocks of 30 MiB, 28 x 64 chunks of 1 MiB). Half of it is 1.31 GB;
 * whatever the placement, what the memory path cannot free leaves through
 * the disk, so the disk-bound times below are worked out by hand from the
 * ratio alone: q8 (0.531) frees at most 1792 x 0.469 MiB = 0.88 GB in
 * memory, q8-q4r (0.406) 1.12 GB. */
static void test_codec_choice(void)
{
    mz_device_profile p;
    mz_profile_builtin(&p);
    const int n_layer = 28;
    const size_t n_chunks = 64, kvb = (size_t)1 << 20, blk = 31465472;
    mz_profile_units u = {.kv_chunk_bytes = kvb, .block_bytes = blk, .decode_threads = 7};
    mz_codec_choice ch;
    const double half = 0.5 * (n_layer * (double)blk + n_layer * (double)n_chunks * (double)kvb);

    /* The built-in profile has no q8-q4r of its own (its family entry is q8's): q8. */
    CHECK(mz_codec_choose(&p, &u, n_layer, n_chunks, &ch) == MZ_OK);
    CHECK_MSG(!strcmp(ch.name, "q8") && ch.restore_ns[0] > 0 && ch.restore_ns[1] == -1, "built-in: %s",
              ch.name);

    /* The 16-vCPU machine's kind: 7 decoding threads, a 1 GB/s disk. */
    set_disk(&p, 1.0);
    set_codec(&p, "q8", 9.0, 0.531);
    set_codec(&p, "q8-q4r", 5.0, 0.406);
    CHECK(mz_codec_choose(&p, &u, n_layer, n_chunks, &ch) == MZ_OK);
    double disk_q8 = (half - 1792.0 * kvb * (1 - 0.531)) / 1e9;
    double disk_q8q4r = (half - 1792.0 * kvb * (1 - 0.406)) / 1e9;
    double got_q8 = (double)ch.restore_ns[0] * 1e-9, got_q8q4r = (double)ch.restore_ns[1] * 1e-9;
    CHECK_MSG(got_q8 > 0.9 * disk_q8 && got_q8 < 1.15 * disk_q8, "q8 %.3f s, disk floor %.3f s", got_q8,
              disk_q8);
    CHECK_MSG(got_q8q4r > 0.9 * disk_q8q4r && got_q8q4r < 1.15 * disk_q8q4r, "q8-q4r %.3f s, floor %.3f s",
              got_q8q4r, disk_q8q4r);
    CHECK_MSG(!strcmp(ch.name, "q8-q4r"), "slow disk, 7 decoding threads: %s", ch.name);

    /* Two cores' kind: one decoding thread, q8-q4r decoding at 0.44 of q8
     * (this project's 2-vCPU AMD EPYC), a 2 GB/s disk: decoding is the long
     * pole, and q8-q4r's 1792 chunks take 0.49 s of it alone. */
    u.decode_threads = 1;
    set_disk(&p, 2.0);
    set_codec(&p, "q8", 8.7, 0.531);
    set_codec(&p, "q8-q4r", 3.8, 0.406);
    CHECK(mz_codec_choose(&p, &u, n_layer, n_chunks, &ch) == MZ_OK);
    CHECK_MSG(!strcmp(ch.name, "q8"), "one decoding thread: %s (q8 %.3f s, q8-q4r %.3f s)", ch.name,
              (double)ch.restore_ns[0] * 1e-9, (double)ch.restore_ns[1] * 1e-9);
    CHECK(ch.restore_ns[1] > 0);

    /* A tie keeps q8, and so does a gain of under a tenth: q8-q4r given q8's
     * own figures plans the same restore. */
    u.decode_threads = 7;
    set_disk(&p, 1.0);
    set_codec(&p, "q8-q4r", 9.0, 0.531);
    CHECK(mz_codec_choose(&p, &u, n_layer, n_chunks, &ch) == MZ_OK);
    CHECK(!strcmp(ch.name, "q8") && ch.restore_ns[0] == ch.restore_ns[1]);

    /* No chunks (a context of no tokens) or no layers: q8, nothing planned. */
    CHECK(mz_codec_choose(&p, &u, n_layer, 0, &ch) == MZ_OK && !strcmp(ch.name, "q8"));
    CHECK(mz_codec_choose(&p, &u, 0, n_chunks, &ch) == MZ_OK && !strcmp(ch.name, "q8"));
}

/* Unit sizes from the shape match what the loader lays out. */
static void test_shape_vs_loader(void)
{
    const char *real = t_real_model_path();
    if (!real) {
        fprintf(stderr, "  (shape vs loader skipped: real model absent)\n");
        return;
    }
    const struct { const char *preset; bool qwen3; int L, E, H, HKV, HD, F; const char *wt; } m[] = {
        {"tiny-qwen3", true, 2, 64, 4, 2, 32, 160, "Q8_0"},
        {"tiny-llama", false, 2, 64, 4, 2, 16, 128, "F16"},
    };
    for (size_t i = 0; i < MZ_ARRAY_LEN(m); i++) {
        const char *path = t_tmp_path("profile-shape.gguf");
        mz_gen_params gp = mz_gen_params_default();
        gp.preset = m[i].preset;
        gp.weight_type = m[i].wt;
        gp.vocab_from = real;
        mz_model_t *model = NULL;
        CHECK(mz_gen_model(path, &gp) == MZ_OK);
        mz_model_params mp = mz_model_params_default();
        mp.n_threads = 1;
        CHECK(mz_model_load(path, &mp, &model) == MZ_OK);
        if (!model) continue;
        mz_model_info mi;
        mz_model_get_info(model, &mi);
        mz_profile_shape sh = {.qwen3 = m[i].qwen3, .n_layer = m[i].L, .n_embd = m[i].E,
                               .n_head = m[i].H, .n_head_kv = m[i].HKV, .head_dim = m[i].HD,
                               .n_ff = m[i].F, .weight_type = m[i].wt};
        size_t kvb = 0, blk = 0;
        CHECK(mz_profile_shape_units(&sh, &kvb, &blk) == MZ_OK);
        CHECK_MSG(blk == mi.block_bytes, "%s: shape %zu, loader %zu", m[i].preset, blk,
                  mi.block_bytes);
        CHECK_EQ_INT(kvb, mi.kv_bytes_per_token / (size_t)mi.n_layer * MZ_KV_CHUNK_TOKENS);
        mz_model_free(model);
    }
}

static void test_quick_run(void)
{
    mz_profile_run_params rp = mz_profile_run_params_default();
    rp.quick = true;
    rp.dir = t_tmp_dir();
    rp.file_bytes = 16u << 20;
    rp.mem_bytes = 8u << 20;
    rp.reclaim_wait_s = 0;
    mz_device_profile p, q;
    mz_status s = mz_profile_run(&rp, &p);
    CHECK_MSG(s == MZ_OK, "%s", mz_last_error());
    if (s) return;
    CHECK(p.measured && p.n_sizes == 2 && p.n_qd == 2 && p.file_bytes == 16u << 20);
    CHECK(p.read_gbps[0][0] > 0 && p.read_gbps[1][1] > 0 && p.sat_size && p.sat_qd);
    if (p.direct) CHECK_EQ_INT(p.cached_pages_max, 0);
    CHECK(p.touch_cold_s_per_gib > 0 && p.memcpy_gbps > 0);
    bool have_q8 = false, have_q4 = false, have_raw = false;
    for (int i = 0; i < p.n_codecs; i++) {
        CHECK(p.codec[i].decode_gbps > 0 && p.codec[i].ratio > 0);
        have_q8 = have_q8 || !strcmp(p.codec[i].name, "q8");
        have_q4 = have_q4 || !strcmp(p.codec[i].name, "q4");
        have_raw = have_raw || !strcmp(p.codec[i].name, "raw");
    }
    CHECK(have_q8 && have_q4 && have_raw);
    const char *path = t_tmp_path("profile-quick.json");
    CHECK(mz_profile_save(&p, path) == MZ_OK);
    CHECK(mz_profile_load(path, &q) == MZ_OK && q.n_codecs == p.n_codecs);
    /* Nothing left behind in the test directory but our JSON. */
    char probe[1024];
    snprintf(probe, sizeof probe, "%s/mzprofile-%ld.tmp", t_tmp_dir(), (long)getpid());
    FILE *f = fopen(probe, "r");
    CHECK(f == NULL);
    if (f) fclose(f);
}

int main(void)
{
    test_roundtrip();
    test_corrupt();
    test_derive();
    test_codec_choice();
    test_shape_vs_loader();
    test_quick_run();
    return t_done(T);
}
