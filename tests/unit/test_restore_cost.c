/*
 * test_restore_cost.c — what the hybrid policy's placements cost a restore
 * on many threads, by the device profile: the policy's per-unit times
 * (mz_profile_derive) with the decoding spread over the restore's decoding
 * threads, checked on the 16-vCPU device's measured profile (the JSON of its
 * 06:08 run, docs/BENCHMARKS.md, issue 18 part 3) and the target-2 job
 * (qwen3-0.6b F16 shape, 16k context).
 *
 *   decode threads  mz_profile_decode_threads follows the restore split:
 *                   one decoding thread below 4 restore threads (the 2-vCPU
 *                   split), from 4 on all but one storage lane (and but
 *                   thread 0 when every thread pre-faults)
 *   derive          t_d (and the decode half of t_rkvc) divide by them; the
 *                   reads do not (one disk)
 *   balance         the plan's two paths are level in wall time: the dropped
 *                   blocks' reads against the compressed chunks' decoding
 *                   over the decoding threads (the rule with one decoding
 *                   thread dropped 6 blocks at 75 % remaining, 0.18 s of
 *                   disk beside 0.08 s of decoding on 2 threads)
 *   q8 at 50 %      every placement needs the same disk bytes: compressing
 *                   all KV frees at most (1 - ratio) of it, the rest comes
 *                   from one disk whichever unit holds it
 *
 * `test_restore_cost PROFILE.json` prints the cost table of every codec and
 * level for that profile instead (the analysis recorded in BENCHMARKS.md).
 */
#include "mem/policy.h"
#include "mem/profile.h"
#include "testutil.h"

#include <stdint.h>
#include <string.h>

static const char *T = "test_restore_cost";

/* The 16-vCPU Xeon's profile as measured at 2026-12-02 06:08 UTC (storage
 * rows and memory figures verbatim; the codecs this test uses). */
static const char *DEVICE_PROFILE =
    "{\"mzcache_profile\": 1, \"measured\": true, \"n_cpus\": 16, \"restore_threads\": 0,"
    " \"storage\": {\"direct\": true, \"uring\": true, \"file_bytes\": 268435456,"
    "  \"sizes\": [65536, 131072, 262144, 524288, 1048576, 2097152, 4194304],"
    "  \"queue_depths\": [1, 2, 4, 8],"
    "  \"read_gbps\": [[0.7335, 0.9141, 0.9348, 1.0854], [0.9400, 1.0671, 1.0232, 1.1974],"
    "   [0.9724, 1.0991, 1.1151, 1.1654], [0.9962, 1.1195, 1.0987, 1.1215],"
    "   [1.0350, 1.3066, 1.0420, 1.1516], [0.9899, 1.0695, 1.0903, 1.2290],"
    "   [1.0245, 1.1761, 1.1904, 1.3419]],"
    "  \"saturation\": {\"size\": 1048576, \"queue_depth\": 2}},"
    " \"memory\": {\"memcpy_gbps\": 6.1105, \"first_touch_hot_s_per_gib\": 0.4295,"
    "  \"first_touch_cold_s_per_gib\": 0.5370, \"first_touch_cold_2t_s_per_gib\": 0.3128,"
    "  \"reclaim_wait_s\": 1.00, \"prefault_threads\": [1, 2, 4, 8, 16],"
    "  \"prefault_s_per_gib\": [0.3523, 0.1962, 0.1503, 0.2147, 0.2763]},"
    " \"codecs\": ["
    "  {\"name\": \"raw\", \"decode_gbps\": 18.2341, \"encode_gbps\": 18.5879, \"ratio\": 1.00002},"
    "  {\"name\": \"q8\", \"decode_gbps\": 7.4931, \"encode_gbps\": 1.5957, \"ratio\": 0.53127},"
    "  {\"name\": \"cachegen\", \"decode_gbps\": 0.5356, \"encode_gbps\": 0.0673, \"ratio\": 0.23449},"
    "  {\"name\": \"cachegen-q7\", \"decode_gbps\": 0.6743, \"encode_gbps\": 0.0769,"
    "   \"ratio\": 0.16511}]}";

/* ---- a job table of one model shape ------------------------------------------------ */

typedef struct job {
    int n_layer;
    size_t n_chunks;
    size_t kv_bytes, enc_bytes, blk_bytes;
    mz_unit *w, *kv;
    uint64_t *seq, pushes;
    mz_policy_view v;
    mz_evict_plan plan;
} job;

static int job_init(job *j, int n_layer, size_t n_chunks, size_t kv_bytes, size_t enc_bytes,
                    size_t blk_bytes, mz_unit_times times)
{
    memset(j, 0, sizeof *j);
    j->n_layer = n_layer;
    j->n_chunks = n_chunks;
    j->kv_bytes = kv_bytes;
    j->enc_bytes = enc_bytes;
    j->blk_bytes = blk_bytes;
    size_t nk = (size_t)n_layer * n_chunks;
    j->w = calloc((size_t)n_layer, sizeof *j->w);
    j->kv = calloc(nk, sizeof *j->kv);
    j->seq = calloc(nk, sizeof *j->seq);
    if (!j->w || !j->kv || !j->seq) return -1;
    if (mz_evict_plan_init(&j->plan, n_layer, n_chunks)) return -1;
    for (int l = 0; l < n_layer; l++) {
        j->w[l] = (mz_unit){.kind = MZ_UNIT_WEIGHTS, .layer = l, .chunk = -1, .bytes = blk_bytes};
        mz_unit_set(&j->w[l], MZ_UNIT_RESIDENT);
        for (size_t c = 0; c < n_chunks; c++) {
            mz_unit *u = &j->kv[(size_t)l * n_chunks + c];
            *u = (mz_unit){.kind = MZ_UNIT_KV, .layer = l, .chunk = (int)c, .bytes = kv_bytes};
            mz_unit_set(u, MZ_UNIT_RESIDENT);
        }
    }
    j->v = (mz_policy_view){.n_layer = n_layer, .max_chunks = n_chunks, .n_chunks = n_chunks,
                            .weights = j->w, .kv = j->kv, .kv_seq = j->seq,
                            .weights_evictable = true, .can_store = true,
                            .unit_bytes_kv = kv_bytes, .enc_bytes_kv_est = enc_bytes,
                            .times = times};
    return 0;
}

static void job_free(job *j)
{
    free(j->w);
    free(j->kv);
    free(j->seq);
    mz_evict_plan_free(&j->plan);
}

/* Where the plan put the units. */
typedef struct placed {
    size_t n_comp, n_raw, n_storedc, n_drop;
} placed;

/* Plans (1 - remaining) of the evictable bytes with the hybrid policy and
 * applies the steps as the mechanism would (the estimate's sizes). */
static int plan_level(job *j, double remaining, placed *out)
{
    memset(out, 0, sizeof *out);
    mz_policy *pol = mz_policy_hybrid_init(NULL);
    if (!pol) return -1;
    double total = (double)j->n_layer * ((double)j->blk_bytes + (double)j->n_chunks * (double)j->kv_bytes);
    size_t nbytes = (size_t)(total * (1.0 - remaining));
    pol->plan(pol, &j->v, nbytes, &j->plan);
    for (size_t i = 0; i < j->plan.n; i++) {
        const mz_evict_step *s = &j->plan.steps[i];
        if (s->kind == MZ_UNIT_WEIGHTS) {
            mz_unit_set(&j->w[s->layer], MZ_UNIT_DROPPED);
            out->n_drop++;
            continue;
        }
        mz_unit *u = &j->kv[(size_t)s->layer * j->n_chunks + s->chunk];
        switch (s->dest) {
        case MZ_DEST_COMPRESS:
            u->enc_bytes = j->enc_bytes;
            j->seq[u - j->kv] = ++j->pushes;
            mz_unit_set(u, MZ_UNIT_COMPRESSED);
            out->n_comp++;
            break;
        case MZ_DEST_STORE_RAW:
            mz_unit_set(u, MZ_UNIT_STORED_RAW);
            out->n_raw++;
            break;
        case MZ_DEST_STORE_COMPRESSED:
            if (mz_unit_state_get(u) == MZ_UNIT_COMPRESSED) out->n_comp--;
            u->enc_bytes = j->enc_bytes;
            mz_unit_set(u, MZ_UNIT_STORED_COMPRESSED);
            out->n_storedc++;
            break;
        default: break;
        }
    }
    pol->free(pol);
    return 0;
}

/* The profile's estimate of a restore of what `pl` evicted, in seconds:
 * the disk's bytes at its read rate (one device: requests in flight do not
 * multiply it), the decoding's CPU time over n_dec threads, pre-faulting
 * every evicted unit at the profile's rate for n_pf threads. The all-ready
 * time is at least the largest of the three. */
typedef struct cost {
    double disk_mb, disk_s, dec_cpu_s, dec_s, alloc_s, ready_s;
} cost;

static double prefault_s_per_gib(const mz_device_profile *p, int n_pf)
{
    double s = p->touch_cold_s_per_gib > 0 ? p->touch_cold_s_per_gib : 1.0;
    for (int i = 0; i < p->n_touch; i++)
        if (p->touch_threads[i] <= n_pf && p->touch_mt_s_per_gib[i] > 0) s = p->touch_mt_s_per_gib[i];
    return s;
}

static cost cost_of(const mz_device_profile *p, const job *j, const placed *pl, const char *codec,
                    int n_dec, int n_pf)
{
    cost c = {0};
    const mz_profile_codec *pc = mz_profile_codec_find(p, codec);
    double dec_gbps = pc && pc->decode_gbps > 0 ? pc->decode_gbps : 1.0;
    size_t io = 0;
    int qd = 0;
    mz_profile_io_shape(p, &io, &qd);
    double disk = (double)pl->n_drop * (double)j->blk_bytes + (double)pl->n_raw * (double)j->kv_bytes +
                  (double)pl->n_storedc * (double)j->enc_bytes;
    c.disk_mb = disk / 1e6;
    c.disk_s = disk / (mz_profile_read_gbps(p, io, qd, false) * 1e9);
    c.dec_cpu_s = (double)(pl->n_comp + pl->n_storedc) * (double)j->kv_bytes / (dec_gbps * 1e9);
    c.dec_s = c.dec_cpu_s / (n_dec > 0 ? n_dec : 1);
    double evicted = (double)pl->n_drop * (double)j->blk_bytes +
                     (double)(pl->n_comp + pl->n_raw + pl->n_storedc) * (double)j->kv_bytes;
    c.alloc_s = evicted / (1024.0 * 1024 * 1024) * prefault_s_per_gib(p, n_pf);
    c.ready_s = MZ_MAX(c.disk_s, MZ_MAX(c.dec_s, c.alloc_s));
    return c;
}

/* qwen3-0.6b F16 at 16k: 28 layers x 64 chunks of 1 MiB, 30 MiB blocks. */
static int target2_job(const mz_device_profile *p, const char *codec, int decode_threads, job *j)
{
    mz_profile_shape sh = {.qwen3 = true, .n_layer = 28, .n_embd = 1024, .n_head = 16,
                           .n_head_kv = 8, .head_dim = 128, .n_ff = 3072, .weight_type = "F16"};
    size_t kvb = 0, blk = 0;
    if (mz_profile_shape_units(&sh, &kvb, &blk) != MZ_OK) return -1;
    const mz_profile_codec *pc = mz_profile_codec_find(p, codec);
    size_t enc = (size_t)((double)kvb * (pc ? pc->ratio : 1.0));
    mz_profile_units u = {.kv_chunk_bytes = kvb, .kv_enc_bytes = enc, .block_bytes = blk,
                          .codec = codec, .decode_threads = decode_threads};
    mz_unit_times t;
    mz_profile_derive(p, &u, &t);
    return job_init(j, sh.n_layer, 16384 / 256, kvb, enc, blk, t);
}

/* ---- tests ---------------------------------------------------------------------------- */

static void load_device(mz_device_profile *p)
{
    mz_status s = mz_profile_from_json(DEVICE_PROFILE, strlen(DEVICE_PROFILE), p);
    if (s != MZ_OK) {
        fprintf(stderr, "%s: the device profile did not parse\n", T);
        exit(1);
    }
}

static void test_decode_threads(void)
{
    mz_device_profile p;
    load_device(&p);
    /* Below 4 restore threads the split decodes on one thread (2 = the
     * 2-vCPU machine: decoding beside one storage thread). */
    CHECK_EQ_INT(mz_profile_decode_threads(&p, 1), 1);
    CHECK_EQ_INT(mz_profile_decode_threads(&p, 2), 1);
    CHECK_EQ_INT(mz_profile_decode_threads(&p, 3), 1);
    CHECK_EQ_INT(mz_profile_decode_threads(&p, 0), 1);
    /* From 4 on: all but one storage lane, and but thread 0 when every
     * thread pre-faults. The device's table pre-faults on 4: with 4 restore
     * threads all pre-fault (2 decode), with 8 four do (7 decode). */
    CHECK_EQ_INT(mz_profile_decode_threads(&p, 4), 2);
    CHECK_EQ_INT(mz_profile_decode_threads(&p, 8), 7);
    /* The device with 8 compute threads: 8 restore threads (as wide as the
     * compute; 4 of them pre-fault), 7 decoding; with 2 compute threads 4
     * (its pre-fault saturation count), 2 decoding. */
    CHECK_EQ_INT(mz_profile_decode_threads(&p, mz_profile_restore_threads(&p, 8)), 7);
    CHECK_EQ_INT(mz_profile_decode_threads(&p, mz_profile_restore_threads(&p, 2)), 2);
    /* No table: every thread pre-faults. */
    mz_device_profile n = p;
    n.n_touch = 0;
    CHECK_EQ_INT(mz_profile_decode_threads(&n, 8), 6);
    /* The built-in profile (2 vCPUs) keeps one. */
    mz_device_profile b;
    mz_profile_builtin(&b);
    b.n_cpus = 2;
    CHECK_EQ_INT(mz_profile_decode_threads(&b, mz_profile_restore_threads(&b, 2)), 1);
}

static void test_derive_spread(void)
{
    mz_device_profile p;
    load_device(&p);
    mz_profile_units u = {.kv_chunk_bytes = 1 << 20, .block_bytes = 31500000, .codec = "q8"};
    mz_unit_times t1, t0, t7;
    u.decode_threads = 1;
    mz_profile_derive(&p, &u, &t1);
    u.decode_threads = 0; /* unset: one thread, as before the field existed */
    mz_profile_derive(&p, &u, &t0);
    u.decode_threads = 7;
    mz_profile_derive(&p, &u, &t7);
    CHECK(!memcmp(&t0, &t1, sizeof t0));
    /* Decoding spreads: 1 MiB of q8 at 7.49 GB/s is 140 us on one thread. */
    CHECK(t1.t_d_ns > 139000 && t1.t_d_ns < 141000);
    CHECK(t7.t_d_ns >= t1.t_d_ns / 7 - 1 && t7.t_d_ns <= t1.t_d_ns / 7 + 1);
    /* Reads do not: one disk. */
    CHECK_EQ_INT(t7.t_rw_ns, t1.t_rw_ns);
    CHECK_EQ_INT(t7.t_rkv_ns, t1.t_rkv_ns);
    CHECK_EQ_INT(t7.t_alloc_kv_ns, t1.t_alloc_kv_ns);
    /* An encoded chunk read back: its read stays, its decoding spreads. */
    CHECK_EQ_INT(t1.t_rkvc_ns - t1.t_d_ns, t7.t_rkvc_ns - t7.t_d_ns);
}

/* Decoding threads of the device's split beside 8 compute threads. */
static int device_decode_threads(const mz_device_profile *p)
{
    return mz_profile_decode_threads(p, mz_profile_restore_threads(p, 8));
}

/* The plan levels the two paths in wall time with the split's decoding
 * threads (7 of the device's 8 restore threads beside 8 compute threads);
 * the rule that charged the decoding to one thread (decode_threads 1) fails
 * the check: at 75 % remaining it drops 6 weight blocks (0.18 s of disk,
 * 0.02 s of decoding) where the balanced plan drops 1 (0.03 s) and
 * compresses more. */
static void test_balance_75(void)
{
    mz_device_profile p;
    load_device(&p);
    size_t dropped[2] = {0, 0};
    for (int rule = 0; rule < 2; rule++) {
        const int n_dec = device_decode_threads(&p);
        job j;
        CHECK(target2_job(&p, "q8", rule ? n_dec : 1, &j) == 0);
        placed pl;
        CHECK(plan_level(&j, 0.75, &pl) == 0);
        cost c = cost_of(&p, &j, &pl, "q8", n_dec, mz_profile_prefault_threads(&p, 8));
        /* Wall-time balance within one unit: one block's read, or one
         * chunk's decode on one thread. */
        double unit_s = MZ_MAX(j.v.times.t_rw_ns, j.v.times.t_d_ns * n_dec) / 1e9;
        bool level = c.disk_s <= c.dec_s + unit_s;
        dropped[rule] = pl.n_drop;
        if (rule) {
            CHECK_MSG(level, "disk %.3f s vs decoding %.3f s on %d threads", c.disk_s, c.dec_s, n_dec);
        } else {
            /* The one-thread rule: the check above fails. */
            CHECK_MSG(!level, "dropped %zu, disk %.3f s, decoding %.3f s", pl.n_drop, c.disk_s,
                      c.dec_s);
        }
        job_free(&j);
    }
    CHECK_MSG(dropped[1] < dropped[0], "%zu vs %zu blocks", dropped[1], dropped[0]);
}

/* q8 at 50 %: the memory path can free at most (1 - ratio) of the KV; the
 * rest comes from the disk, and every storage placement frees one byte per
 * byte read (a raw chunk, a dropped block) — so the disk's bytes, and its
 * floor, are the same whichever plan: the weight blocks are not a worse
 * choice than stored chunks. */
static void test_q8_disk_floor(void)
{
    mz_device_profile p;
    load_device(&p);
    job j;
    const int n_dec = device_decode_threads(&p);
    CHECK(target2_job(&p, "q8", n_dec, &j) == 0);
    placed pl;
    CHECK(plan_level(&j, 0.50, &pl) == 0);
    double total = 28.0 * ((double)j.blk_bytes + 64.0 * (double)j.kv_bytes);
    double need = total * 0.5;
    double mem_max = 28.0 * 64.0 * (double)(j.kv_bytes - j.enc_bytes);
    double floor_bytes = need - mem_max;
    cost c = cost_of(&p, &j, &pl, "q8", n_dec, mz_profile_prefault_threads(&p, 8));
    CHECK_EQ_INT(pl.n_comp, 28 * 64); /* all KV compressed */
    CHECK_MSG(c.disk_mb * 1e6 >= floor_bytes && c.disk_mb * 1e6 < floor_bytes + (double)j.blk_bytes,
              "disk %.0f MB, floor %.0f MB", c.disk_mb, floor_bytes / 1e6);
    job_free(&j);
}

/* A codec of higher ratio (cachegen, 0.23) could free 50 % from memory
 * alone, but decodes at 0.54 GB/s a thread: with one thread charged, the
 * plan sends two thirds of the chunks raw to the disk; charged over the
 * split's decoding threads it sends fewer bytes to the disk and the
 * estimate is lower (still above q8's: 2 threads decode too slowly for
 * cachegen to beat the disk here). */
static void test_cachegen_spread(void)
{
    mz_device_profile p;
    load_device(&p);
    cost cc[2];
    const int n_dec = device_decode_threads(&p), n_pf = mz_profile_prefault_threads(&p, 8);
    for (int rule = 0; rule < 2; rule++) {
        job j;
        CHECK(target2_job(&p, "cachegen", rule ? n_dec : 1, &j) == 0);
        placed pl;
        CHECK(plan_level(&j, 0.50, &pl) == 0);
        cc[rule] = cost_of(&p, &j, &pl, "cachegen", n_dec, n_pf);
        job_free(&j);
    }
    CHECK_MSG(cc[1].disk_mb < cc[0].disk_mb * 0.85, "disk %.0f vs %.0f MB", cc[1].disk_mb, cc[0].disk_mb);
    CHECK_MSG(cc[1].ready_s < cc[0].ready_s, "%.3f vs %.3f s", cc[1].ready_s, cc[0].ready_s);
}

/* ---- the table for a profile (argv[1]) ------------------------------------------------- */

static int print_table(const char *path)
{
    mz_device_profile p;
    if (mz_profile_load(path, &p) != MZ_OK) {
        fprintf(stderr, "%s: cannot load %s\n", T, path);
        return 1;
    }
    const char *codecs[] = {"q8", "cachegen", "cachegen-q7"};
    const double levels[] = {0.75, 0.50, 0.25, 0.0};
    int ncomp[] = {8, 2};
    for (size_t k = 0; k < MZ_ARRAY_LEN(ncomp); k++) {
        int nr = mz_profile_restore_threads(&p, ncomp[k]);
        int nd = mz_profile_decode_threads(&p, nr), npf = mz_profile_prefault_threads(&p, nr);
        printf("\n%d compute threads: %d restore threads, %d decoding, %d pre-faulting\n",
               ncomp[k], nr, nd, npf);
        printf("| codec | remaining | rule | compressed | raw | stored-c | blocks | disk MB | "
               "disk s | decode CPU s | decode s | alloc s | ready >= s |\n"
               "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
        for (size_t ci = 0; ci < MZ_ARRAY_LEN(codecs); ci++) {
            if (!mz_profile_codec_find(&p, codecs[ci])) continue;
            for (size_t li = 0; li < MZ_ARRAY_LEN(levels); li++)
                for (int rule = 0; rule < 2; rule++) {
                    job j;
                    if (target2_job(&p, codecs[ci], rule ? nd : 1, &j)) return 1;
                    placed pl;
                    if (plan_level(&j, levels[li], &pl)) return 1;
                    cost c = cost_of(&p, &j, &pl, codecs[ci], nd, npf);
                    printf("| %s | %.0f %% | %s | %zu | %zu | %zu | %zu | %.0f | %.3f | %.3f | %.3f | "
                           "%.3f | %.3f |\n",
                           codecs[ci], levels[li] * 100, rule ? "spread" : "one thread", pl.n_comp,
                           pl.n_raw, pl.n_storedc, pl.n_drop, c.disk_mb, c.disk_s, c.dec_cpu_s,
                           c.dec_s, c.alloc_s, c.ready_s);
                    job_free(&j);
                }
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1) return print_table(argv[1]);
    test_decode_threads();
    test_derive_spread();
    test_balance_75();
    test_q8_disk_floor();
    test_cachegen_spread();
    return t_done(T);
}
