/*
 * profile.c — the device profile (contract in profile.h): the parts the
 * memory manager uses.
 *
 * Divisions (reading order):
 *   1. built-in estimate
 *   3. derivation: per-unit times, thresholds, unit sizes from a shape
 * (2, the JSON file format, is src/profile/profile_json.c; 4, measurement,
 * src/profile/profile_run.c.)
 *
 * Units: throughputs in GB/s = 1e9 bytes/s; memory costs in seconds per
 * GiB; unit times in integer nanoseconds (policy.h), so the policy's sums
 * are exact.
 */
#define _GNU_SOURCE
#include "profile.h"

#include "../codec/codec.h"
#include "../core/dtype.h"
#include "../io/io.h"
#include "../io/swapfile.h"
#include "../kernels/kernels.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

/* ---- 1. built-in estimate ------------------------------------------------------- */

/* cachegen, one idle Xeon core, real SmolLM2 KV (bench_codec, docs/BENCHMARKS.md):
 * decode 0.53-0.61 GB/s of F16 after the paired decoder, encode 0.07-0.08. */
#define CG_BUILTIN_DEC 0.55
#define CG_BUILTIN_ENC 0.075

void mz_profile_builtin(mz_device_profile *out)
{
    /* shared/MACHINE-NOTES.md (2-vCPU Firecracker VM, ext4 on virtio): O_DIRECT
     * one request at a time 0.59 / 0.90 / 0.96 / 1.30 / 1.11 GB/s at 64 KiB …
     * 4 MiB; io_uring with 4 in flight ≈ 1.7 GB/s at 512 KiB–1 MiB. */
    static const size_t sizes[] = {64 << 10, 256 << 10, 512 << 10, 1 << 20, 4 << 20};
    static const double qd1[] = {0.59, 0.90, 0.96, 1.30, 1.11};
    static const double qd4[] = {0.90, 1.40, 1.70, 1.70, 1.60};
    memset(out, 0, sizeof *out);
    out->version = MZ_PROFILE_VERSION;
    out->measured = false;
    out->n_cpus = mz_n_cpus();
    out->direct = true;
    out->uring = true;
    out->n_sizes = (int)MZ_ARRAY_LEN(sizes);
    out->n_qd = 2;
    out->read_qd[0] = 1;
    out->read_qd[1] = 4;
    for (int i = 0; i < out->n_sizes; i++) {
        out->read_size[i] = sizes[i];
        out->read_gbps[i][0] = qd1[i];
        out->read_gbps[i][1] = qd4[i];
    }
    out->sat_size = 512 << 10;
    out->sat_qd = 4;
    out->memcpy_gbps = 9.5;
    out->touch_hot_s_per_gib = 0.4;
    out->touch_cold_s_per_gib = 1.0;
    out->touch_cold2_s_per_gib = 0.55;
    out->reclaim_wait_s = 3.0;
    out->restore_threads = 0; /* the rule */
    /* Dequantizing 8-bit groups into DRAM: 6.3 GB/s of output (normal stores). */
    out->n_codecs = 2;
    out->codec[0] = (mz_profile_codec){.name = "raw", .decode_gbps = 9.5, .encode_gbps = 9.5,
                                       .ratio = 1.0};
    out->codec[1] = (mz_profile_codec){.name = "q8", .decode_gbps = 6.3, .encode_gbps = 2.0,
                                       .ratio = 68.0 / 128.0};
    /* cachegen: sizes measured on real SmolLM2 KV (docs/CODECS.md) */
    out->n_codecs = 6;
    out->codec[2] = (mz_profile_codec){.name = "cachegen", .decode_gbps = CG_BUILTIN_DEC,
                                       .encode_gbps = CG_BUILTIN_ENC, .ratio = 0.250};
    out->codec[3] = (mz_profile_codec){.name = "cachegen-layer", .decode_gbps = CG_BUILTIN_DEC,
                                       .encode_gbps = CG_BUILTIN_ENC, .ratio = 0.205};
    out->codec[4] = (mz_profile_codec){.name = "cachegen-q7", .decode_gbps = CG_BUILTIN_DEC,
                                       .encode_gbps = CG_BUILTIN_ENC, .ratio = 0.183};
    /* q4: bench_codec on this project's 2-vCPU AMD EPYC VM (2026-12-02):
     * decode of 1 MiB chunks into fresh memory (`--dram 1024`) with the AVX2
     * kernels (normal stores, as q8's 6.3 above) 14.3-14.4 GB/s beside q8's
     * 13.0-13.2 in the same run; encode of real SmolLM2 KV 1.92 vs 2.18. That
     * VM is not the one q8's figures come from, so q4 gets q8's figures
     * scaled by those ratios (decode x1.10, encode x0.88), which keeps the
     * two codecs comparable for the policy. Its ratio is exact. */
    out->codec[5] = (mz_profile_codec){.name = "q4", .decode_gbps = 6.9, .encode_gbps = 1.75,
                                       .ratio = 36.0 / 128.0};
}

/* ---- 3. derivation ------------------------------------------------------------------- */

const mz_profile_codec *mz_profile_codec_find(const mz_device_profile *p, const char *name)
{
    if (!name) return NULL;
    for (int i = 0; i < p->n_codecs; i++)
        if (!strcmp(p->codec[i].name, name)) return &p->codec[i];
    /* The family: "q8-g32" is measured as "q8" if it was not measured itself. */
    size_t fam = strcspn(name, "-");
    for (int i = 0; i < p->n_codecs; i++)
        if (strlen(p->codec[i].name) == fam && !strncmp(p->codec[i].name, name, fam))
            return &p->codec[i];
    return NULL;
}

static double cell(const mz_device_profile *p, int i, int j, bool loaded)
{
    double l = p->read_gbps_loaded[i][j];
    return loaded && l > 0 ? l : p->read_gbps[i][j];
}

double mz_profile_read_gbps(const mz_device_profile *p, size_t bytes, int qd, bool loaded)
{
    if (p->n_sizes < 1 || p->n_qd < 1) return 1.0;
    int j = 0;
    for (int k = 0; k < p->n_qd; k++)
        if (p->read_qd[k] <= qd) j = k;
    double x = (double)MZ_MAX(bytes, (size_t)1), g;
    if (x <= (double)p->read_size[0]) {
        /* Below the smallest size a request costs what the smallest did. */
        g = cell(p, 0, j, loaded) * x / (double)p->read_size[0];
    } else if (x >= (double)p->read_size[p->n_sizes - 1]) {
        g = cell(p, p->n_sizes - 1, j, loaded);
    } else {
        int i = 0;
        while ((double)p->read_size[i + 1] < x) i++;
        double a = log2((double)p->read_size[i]), b = log2((double)p->read_size[i + 1]);
        double f = (log2(x) - a) / (b - a);
        g = cell(p, i, j, loaded) * (1 - f) + cell(p, i + 1, j, loaded) * f;
    }
    return g > 1e-6 ? g : 1e-6;
}

static int64_t ns_of(double bytes, double gbps)
{
    double ns = bytes / gbps; /* bytes / (1e9 B/s) = ns */
    if (!(ns >= 1)) return 1;
    return ns > 9e15 ? (int64_t)9e15 : (int64_t)llround(ns);
}

void mz_profile_derive(const mz_device_profile *p, const mz_profile_units *u, mz_unit_times *out)
{
    const mz_profile_codec *c = mz_profile_codec_find(p, u->codec);
    double dec = 1.0, ratio = 1.0;
    if (c) {
        dec = u->loaded && c->decode_gbps_loaded > 0 ? c->decode_gbps_loaded : c->decode_gbps;
        ratio = c->ratio;
    }
    if (!(dec > 0)) dec = 1.0;
    if (!(ratio > 0)) ratio = 1.0;
    int qd = u->queue_depth > 0 ? u->queue_depth : 4;
    size_t max_io = u->max_io_bytes ? u->max_io_bytes : (size_t)1 << 20;
    double kv = (double)u->kv_chunk_bytes, blk = (double)u->block_bytes;
    double enc = u->kv_enc_bytes ? (double)u->kv_enc_bytes : kv * ratio;
    /* Decoding spreads over the decoding threads; reads share one disk. */
    out->t_d_ns = ns_of(kv, dec * (u->decode_threads > 1 ? u->decode_threads : 1));
    out->t_rkv_ns = ns_of(kv, mz_profile_read_gbps(p, MZ_MIN(u->kv_chunk_bytes, max_io), qd, u->loaded));
    out->t_rkvc_ns = ns_of(enc, mz_profile_read_gbps(p, MZ_MIN((size_t)enc, max_io), qd, u->loaded)) +
                     out->t_d_ns;
    out->t_rw_ns = ns_of(blk, mz_profile_read_gbps(p, MZ_MIN(u->block_bytes, max_io), qd, u->loaded));
    double s_per_gib = p->touch_cold_s_per_gib > 0 ? p->touch_cold_s_per_gib : 1.0;
    out->t_alloc_kv_ns = ns_of(kv, GIB / s_per_gib / 1e9);
    out->t_alloc_w_ns = ns_of(blk, GIB / s_per_gib / 1e9);
}

int64_t mz_profile_threshold(const mz_unit_times *t, int n_w_total)
{
    return (int64_t)n_w_total * (t->t_rw_ns / t->t_d_ns);
}

int64_t mz_profile_threshold_exact(const mz_unit_times *t, int n_w_total)
{
    return (int64_t)n_w_total * t->t_rw_ns / t->t_d_ns;
}

static int dtype_by_name(const char *name)
{
    for (int t = 0; t < MZ_DT_COUNT; t++) {
        const char *n = mz_dtype_name(t);
        if (n && mz_dtype_supported(t) && !strcasecmp(n, name)) return t;
    }
    return -1;
}

mz_status mz_profile_shape_units(const mz_profile_shape *s, size_t *kv_chunk_bytes,
                                 size_t *block_bytes)
{
    int wt = dtype_by_name(s->weight_type ? s->weight_type : "F16");
    if (wt < 0) return mz_fail(MZ_E_INVAL, "unknown weight type '%s'", s->weight_type);
    if (s->n_layer <= 0 || s->n_embd <= 0 || s->n_head <= 0 || s->n_head_kv <= 0 ||
        s->head_dim <= 0 || s->n_ff <= 0 || s->n_embd > (1 << 20) || s->n_ff > (1 << 22) ||
        s->n_head > 4096 || s->head_dim > 4096)
        return mz_fail(MZ_E_INVAL, "bad model shape");
    uint64_t E = (uint64_t)s->n_embd, Q = (uint64_t)s->n_head * (uint64_t)s->head_dim;
    uint64_t KV = (uint64_t)s->n_head_kv * (uint64_t)s->head_dim, F = (uint64_t)s->n_ff;
    /* (type, row length, rows): the loader's block layout, each 64-byte aligned. */
    struct { int type; uint64_t ne0, rows; } t[] = {
        {MZ_DT_F32, E, 1},  {wt, E, Q},  {wt, E, KV}, {wt, E, KV}, {wt, Q, E}, {MZ_DT_F32, E, 1},
        {wt, E, F},         {wt, E, F},  {wt, F, E},
        {MZ_DT_F32, s->qwen3 ? (uint64_t)s->head_dim : 0, 1},
        {MZ_DT_F32, s->qwen3 ? (uint64_t)s->head_dim : 0, 1},
    };
    size_t total = 0;
    for (size_t i = 0; i < MZ_ARRAY_LEN(t); i++) {
        if (!t[i].ne0) continue;
        size_t rb = mz_dtype_row_bytes(t[i].type, t[i].ne0);
        if (!rb) return mz_fail(MZ_E_INVAL, "row of %llu values does not fit %s blocks",
                                (unsigned long long)t[i].ne0, mz_dtype_name(t[i].type));
        total += (rb * (size_t)t[i].rows + 63) / 64 * 64;
    }
    *block_bytes = total;
    *kv_chunk_bytes = (size_t)MZ_KV_CHUNK_TOKENS * (size_t)KV * 2 * sizeof(mz_f16);
    return MZ_OK;
}

int mz_profile_restore_threads(const mz_device_profile *p, int n_compute)
{
    if (p->restore_threads >= 1 && p->restore_threads <= MZ_RESTORE_THREADS_MAX)
        return p->restore_threads;
    int n = p->n_cpus > 0 ? p->n_cpus : mz_n_cpus();
    if (n < 4) return 2;
    if (n_compute <= 0) n_compute = n / 2;
    int nt = n - n_compute;
    /* Pre-faulting stops scaling at some thread count k (the kernel's page
     * allocator, the hypervisor's backing and the memory bandwidth are
     * shared): past k, restore threads neither fault nor decode faster,
     * and they slow the compute beside them. The 16-vCPU device (k = 4),
     * 2 compute threads, 50 %: 4 restore threads were ready soonest (621
     * ms without overlap; 2 / 3 / 6 / 8: 860 / 692 / 697 / 652) and slowed
     * the prefill beside them least (424 -> 527 ms; 8: 497 -> 747 ms);
     * docs/BENCHMARKS.md, issue 18 part 4. */
    if (p->n_touch >= 2) {
        int k_best = 0;
        double best = 0;
        for (int i = 0; i < p->n_touch && p->touch_threads[i] <= nt; i++)
            if (p->touch_mt_s_per_gib[i] > 0 && (!k_best || p->touch_mt_s_per_gib[i] < best)) {
                best = p->touch_mt_s_per_gib[i];
                k_best = i + 1;
            }
        int last = 0; /* the largest measured count that fits */
        while (last < p->n_touch && p->touch_threads[last] <= nt) last++;
        /* flat before the spare CPUs run out: as many as pre-fault (the
         * smallest count within 10 % of the best) */
        if (k_best && k_best < last) nt = MZ_MIN(nt, mz_profile_prefault_threads(p, nt));
    }
    /* A compute wider than that finishes its share of the first request
     * early and then only waits for the restore, so the restore gets as
     * many threads as the compute, up to the spare CPUs; the pre-faulting
     * among them stays at k (mz_profile_prefault_threads), the others read
     * and decode. The device, 8 compute threads, 50 %, the same call: q4
     * all ready after 229-246 ms with 8 restore threads, 314-319 with 4;
     * q8 (disk-bound) 432-512 vs 469-512 (docs/BENCHMARKS.md, issue 18). */
    if (n_compute > nt) nt = MZ_MIN(n - n_compute, n_compute);
    return MZ_MAX(3, MZ_MIN(nt, MZ_RESTORE_THREADS_MAX));
}

int mz_profile_prefault_threads(const mz_device_profile *p, int n_restore)
{
    if (n_restore <= 0) return 0;
    if (p->n_touch < 2) return n_restore;
    double best = 0;
    for (int i = 0; i < p->n_touch && i < MZ_PROFILE_MAX_TOUCH; i++)
        if (p->touch_threads[i] >= 1 && p->touch_threads[i] <= n_restore &&
            p->touch_mt_s_per_gib[i] > 0 && (best == 0 || p->touch_mt_s_per_gib[i] < best))
            best = p->touch_mt_s_per_gib[i];
    if (best == 0) return n_restore;
    /* touch_threads ascends (the parser refuses anything else): the first
     * count within 10 % of the best is the smallest such count. */
    for (int i = 0; i < p->n_touch && i < MZ_PROFILE_MAX_TOUCH; i++)
        if (p->touch_threads[i] >= 1 && p->touch_threads[i] <= n_restore &&
            p->touch_mt_s_per_gib[i] > 0 && p->touch_mt_s_per_gib[i] <= 1.1 * best)
            return p->touch_threads[i];
    return n_restore;
}

int mz_profile_decode_threads(const mz_device_profile *p, int n_restore)
{
    if (n_restore < 4) return 1;
    /* One storage lane; with every thread pre-faulting, thread 0 does
     * nothing else (mz_restore_split_plan). */
    int d = n_restore - 1 - (mz_profile_prefault_threads(p, n_restore) >= n_restore ? 1 : 0);
    return MZ_MAX(d, 1);
}

void mz_profile_io_shape(const mz_device_profile *p, size_t *io_bytes, int *queue_depth)
{
    *io_bytes = 1u << 20;
    *queue_depth = 4;
    if (!p->measured || !p->sat_size || p->sat_qd < 1) return;
    size_t b = MZ_MAX(p->sat_size, (size_t)64 << 10);
    b = MZ_MIN(b, (size_t)4 << 20);
    *io_bytes = b / 4096 * 4096;
    /* Never fewer than 4 in flight: a saturation point measured at depth 1
     * or 2 (a short or disturbed profile) would otherwise throttle the
     * restore below what the disk gave before the profile had a say. */
    *queue_depth = MZ_MAX(4, MZ_MIN(p->sat_qd, 64));
}
