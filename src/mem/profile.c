/*
 * profile.c — the device profile (contract in profile.h).
 *
 * Divisions (reading order):
 *   1. built-in estimate
 *   2. JSON: a writer (snprintf into a buffer) and a small parser (a flat
 *      node pool, recursive descent, depth-limited) with typed getters
 *   3. derivation: per-unit times, thresholds, unit sizes from a shape
 *   4. measurement: codecs, storage, memory, and the compute load thread
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
    out->n_codecs = 5;
    out->codec[2] = (mz_profile_codec){.name = "cachegen", .decode_gbps = CG_BUILTIN_DEC,
                                       .encode_gbps = CG_BUILTIN_ENC, .ratio = 0.250};
    out->codec[3] = (mz_profile_codec){.name = "cachegen-layer", .decode_gbps = CG_BUILTIN_DEC,
                                       .encode_gbps = CG_BUILTIN_ENC, .ratio = 0.205};
    out->codec[4] = (mz_profile_codec){.name = "cachegen-q7", .decode_gbps = CG_BUILTIN_DEC,
                                       .encode_gbps = CG_BUILTIN_ENC, .ratio = 0.183};
}

/* ---- 2. JSON ------------------------------------------------------------------------ */

typedef struct jbuf {
    char *p;
    size_t cap, len;
} jbuf;

static void jb_printf(jbuf *b, const char *fmt, ...) MZ_PRINTF(2, 3);
static void jb_printf(jbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t room = b->len < b->cap ? b->cap - b->len : 0;
    int n = vsnprintf(room ? b->p + b->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0) b->len += (size_t)n;
}

static void jb_str(jbuf *b, const char *s)
{
    jb_printf(b, "\"");
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') jb_printf(b, "\\%c", ch);
        else if (ch < 0x20) jb_printf(b, "\\u%04x", ch);
        else jb_printf(b, "%c", ch);
    }
    jb_printf(b, "\"");
}

/* Finite numbers only (JSON has no inf/nan). */
static double fin(double x) { return isfinite(x) ? x : 0.0; }

size_t mz_profile_to_json(const mz_device_profile *p, char *buf, size_t cap)
{
    jbuf b = {buf, cap, 0};
    if (cap) buf[0] = '\0';
    jb_printf(&b, "{\n  \"mzcache_profile\": %d,\n  \"measured\": %s,\n  \"created\": ",
              p->version, p->measured ? "true" : "false");
    jb_str(&b, p->created);
    jb_printf(&b, ",\n  \"cpu\": ");
    jb_str(&b, p->cpu);
    jb_printf(&b, ",\n  \"n_cpus\": %d,\n  \"restore_threads\": %d,\n  \"storage\": {\n"
                  "    \"dir\": ", p->n_cpus, mz_profile_restore_threads(p));
    jb_str(&b, p->dir);
    jb_printf(&b, ",\n    \"direct\": %s,\n    \"uring\": %s,\n    \"file_bytes\": %llu,\n"
                  "    \"cached_pages_max\": %zu,\n    \"sizes\": [",
              p->direct ? "true" : "false", p->uring ? "true" : "false",
              (unsigned long long)p->file_bytes, p->cached_pages_max);
    for (int i = 0; i < p->n_sizes; i++) jb_printf(&b, "%s%zu", i ? ", " : "", p->read_size[i]);
    jb_printf(&b, "],\n    \"queue_depths\": [");
    for (int j = 0; j < p->n_qd; j++) jb_printf(&b, "%s%d", j ? ", " : "", p->read_qd[j]);
    jb_printf(&b, "],\n    \"read_gbps\": [");
    for (int pass = 0; pass < 2; pass++) {
        if (pass) jb_printf(&b, "],\n    \"read_gbps_loaded\": [");
        for (int i = 0; i < p->n_sizes; i++) {
            jb_printf(&b, "%s\n      [", i ? "," : "");
            for (int j = 0; j < p->n_qd; j++)
                jb_printf(&b, "%s%.4f", j ? ", " : "",
                          fin(pass ? p->read_gbps_loaded[i][j] : p->read_gbps[i][j]));
            jb_printf(&b, "]");
        }
    }
    jb_printf(&b, "],\n    \"saturation\": {\"size\": %zu, \"queue_depth\": %d}\n  },\n",
              p->sat_size, p->sat_qd);
    jb_printf(&b, "  \"memory\": {\n    \"memcpy_gbps\": %.4f,\n"
                  "    \"first_touch_hot_s_per_gib\": %.4f,\n"
                  "    \"first_touch_cold_s_per_gib\": %.4f,\n"
                  "    \"first_touch_cold_2t_s_per_gib\": %.4f,\n"
                  "    \"reclaim_wait_s\": %.2f\n  },\n  \"codecs\": [",
              fin(p->memcpy_gbps), fin(p->touch_hot_s_per_gib), fin(p->touch_cold_s_per_gib),
              fin(p->touch_cold2_s_per_gib), fin(p->reclaim_wait_s));
    for (int i = 0; i < p->n_codecs; i++) {
        const mz_profile_codec *c = &p->codec[i];
        jb_printf(&b, "%s\n    {\"name\": ", i ? "," : "");
        jb_str(&b, c->name);
        jb_printf(&b, ", \"decode_gbps\": %.4f, \"decode_gbps_loaded\": %.4f, "
                      "\"encode_gbps\": %.4f, \"ratio\": %.5f}",
                  fin(c->decode_gbps), fin(c->decode_gbps_loaded), fin(c->encode_gbps),
                  fin(c->ratio));
    }
    jb_printf(&b, "\n  ]\n}\n");
    return b.len;
}

/* -- parser: every value becomes a node; containers link their children. -- */

enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };

typedef struct jnode {
    int type;
    double num;                /* J_NUM, J_BOOL (0/1) */
    const char *s;             /* J_STR: raw text between the quotes (escapes kept) */
    size_t slen;
    const char *key;           /* member of an object: raw key text */
    size_t klen;
    int child, next;           /* first child, next sibling (-1: none) */
} jnode;

typedef struct jparser {
    const char *t, *end;
    jnode *n;
    int n_nodes, cap;
    int depth;
} jparser;

#define J_MAX_DEPTH 16

static void j_ws(jparser *p)
{
    while (p->t < p->end && (*p->t == ' ' || *p->t == '\t' || *p->t == '\n' || *p->t == '\r'))
        p->t++;
}

static int j_new(jparser *p, int type)
{
    if (p->n_nodes == p->cap) return -1;
    jnode *n = &p->n[p->n_nodes];
    memset(n, 0, sizeof *n);
    n->type = type;
    n->child = n->next = -1;
    return p->n_nodes++;
}

/* Scans a string starting at the opening quote; validates escapes. */
static bool j_string(jparser *p, const char **s, size_t *len)
{
    if (p->t >= p->end || *p->t != '"') return false;
    const char *start = ++p->t;
    while (p->t < p->end && *p->t != '"') {
        unsigned char ch = (unsigned char)*p->t;
        if (ch < 0x20) return false;
        if (ch == '\\') {
            if (++p->t >= p->end) return false;
            if (*p->t == 'u') {
                for (int i = 0; i < 4; i++)
                    if (++p->t >= p->end || !strchr("0123456789abcdefABCDEF", *p->t) || !*p->t)
                        return false;
            } else if (!strchr("\"\\/bfnrt", *p->t) || !*p->t) {
                return false;
            }
        }
        p->t++;
    }
    if (p->t >= p->end) return false;
    *s = start;
    *len = (size_t)(p->t - start);
    p->t++;
    return true;
}

static int j_value(jparser *p);

static int j_container(jparser *p, bool obj)
{
    int me = j_new(p, obj ? J_OBJ : J_ARR), last = -1;
    if (me < 0 || ++p->depth > J_MAX_DEPTH) return -1;
    p->t++; /* [ or { */
    j_ws(p);
    if (p->t < p->end && *p->t == (obj ? '}' : ']')) {
        p->t++;
        p->depth--;
        return me;
    }
    for (;;) {
        const char *k = NULL;
        size_t kl = 0;
        j_ws(p);
        if (obj) {
            if (!j_string(p, &k, &kl)) return -1;
            j_ws(p);
            if (p->t >= p->end || *p->t != ':') return -1;
            p->t++;
        }
        int v = j_value(p);
        if (v < 0) return -1;
        p->n[v].key = k;
        p->n[v].klen = kl;
        if (last < 0) p->n[me].child = v;
        else p->n[last].next = v;
        last = v;
        j_ws(p);
        if (p->t >= p->end) return -1;
        if (*p->t == ',') {
            p->t++;
            continue;
        }
        if (*p->t != (obj ? '}' : ']')) return -1;
        p->t++;
        p->depth--;
        return me;
    }
}

static int j_value(jparser *p)
{
    j_ws(p);
    if (p->t >= p->end) return -1;
    char c = *p->t;
    if (c == '{' || c == '[') return j_container(p, c == '{');
    if (c == '"') {
        int me = j_new(p, J_STR);
        if (me < 0 || !j_string(p, &p->n[me].s, &p->n[me].slen)) return -1;
        return me;
    }
    static const struct { const char *w; int type; double v; } lits[] = {
        {"true", J_BOOL, 1}, {"false", J_BOOL, 0}, {"null", J_NULL, 0}};
    for (size_t i = 0; i < MZ_ARRAY_LEN(lits); i++) {
        size_t wl = strlen(lits[i].w);
        if ((size_t)(p->end - p->t) >= wl && !memcmp(p->t, lits[i].w, wl)) {
            int me = j_new(p, lits[i].type);
            if (me < 0) return -1;
            p->n[me].num = lits[i].v;
            p->t += wl;
            return me;
        }
    }
    /* A number: copy at most 63 characters of [-+.0-9eE] and strtod them. */
    char tmp[64];
    size_t k = 0;
    while (p->t + k < p->end && k < sizeof tmp - 1 && strchr("-+.0123456789eE", p->t[k]) &&
           p->t[k])
        k++;
    if (k == 0 || k == sizeof tmp - 1) return -1;
    memcpy(tmp, p->t, k);
    tmp[k] = '\0';
    char *e = NULL;
    double v = strtod(tmp, &e);
    if (e != tmp + k || !isfinite(v)) return -1;
    int me = j_new(p, J_NUM);
    if (me < 0) return -1;
    p->n[me].num = v;
    p->t += k;
    return me;
}

static int j_get(const jparser *p, int obj, const char *key)
{
    if (obj < 0 || p->n[obj].type != J_OBJ) return -1;
    size_t kl = strlen(key);
    for (int c = p->n[obj].child; c >= 0; c = p->n[c].next)
        if (p->n[c].klen == kl && !memcmp(p->n[c].key, key, kl)) return c;
    return -1;
}

static double j_num(const jparser *p, int obj, const char *key, double def)
{
    int v = j_get(p, obj, key);
    return v >= 0 && (p->n[v].type == J_NUM || p->n[v].type == J_BOOL) ? p->n[v].num : def;
}

/* Unescapes a string value into dst (non-ASCII \u escapes become '?'). */
static void j_strcpy(const jparser *p, int obj, const char *key, char *dst, size_t cap)
{
    int v = j_get(p, obj, key);
    size_t o = 0;
    if (cap == 0) return;
    if (v >= 0 && p->n[v].type == J_STR) {
        const char *s = p->n[v].s, *e = s + p->n[v].slen;
        while (s < e && o + 1 < cap) {
            char ch = *s++;
            if (ch == '\\' && s < e) {
                char x = *s++;
                switch (x) {
                case 'n': ch = '\n'; break;
                case 't': ch = '\t'; break;
                case 'r': ch = '\r'; break;
                case 'b': ch = '\b'; break;
                case 'f': ch = '\f'; break;
                case 'u': {
                    char hex[5] = {0};
                    memcpy(hex, s, MZ_MIN((size_t)4, (size_t)(e - s)));
                    long u = strtol(hex, NULL, 16);
                    ch = u > 0 && u < 0x80 ? (char)u : '?';
                    s += MZ_MIN((size_t)4, (size_t)(e - s));
                    break;
                }
                default: ch = x; break;
                }
            }
            dst[o++] = ch;
        }
    }
    dst[o] = '\0';
}

static int j_len(const jparser *p, int arr)
{
    int n = 0;
    if (arr < 0 || p->n[arr].type != J_ARR) return -1;
    for (int c = p->n[arr].child; c >= 0; c = p->n[c].next) n++;
    return n;
}

static int j_at(const jparser *p, int arr, int i)
{
    int c = arr >= 0 ? p->n[arr].child : -1;
    while (c >= 0 && i-- > 0) c = p->n[c].next;
    return c;
}

/* Reads an array of n non-negative numbers; false if it is anything else. */
static bool j_nums(const jparser *p, int arr, int n, double *out)
{
    if (j_len(p, arr) != n) return false;
    for (int i = 0; i < n; i++) {
        int c = j_at(p, arr, i);
        if (p->n[c].type != J_NUM || !(p->n[c].num >= 0)) return false;
        out[i] = p->n[c].num;
    }
    return true;
}

static mz_status parse_profile(jparser *jp, int root, mz_device_profile *out)
{
    mz_device_profile d;
    memset(&d, 0, sizeof d);
    if (root < 0 || jp->n[root].type != J_OBJ) return mz_fail(MZ_E_FORMAT, "not a JSON object");
    d.version = (int)j_num(jp, root, "mzcache_profile", 0);
    if (d.version != MZ_PROFILE_VERSION)
        return mz_fail(MZ_E_FORMAT, "not an mzcache profile of version %d", MZ_PROFILE_VERSION);
    d.measured = j_num(jp, root, "measured", 1) != 0;
    j_strcpy(jp, root, "created", d.created, sizeof d.created);
    j_strcpy(jp, root, "cpu", d.cpu, sizeof d.cpu);
    d.n_cpus = (int)j_num(jp, root, "n_cpus", 0);
    d.restore_threads = (int)j_num(jp, root, "restore_threads", 0);
    if (d.restore_threads < 0 || d.restore_threads > 3)
        return mz_fail(MZ_E_FORMAT, "restore_threads %d: 0 (the rule) or 1..3", d.restore_threads);

    int st = j_get(jp, root, "storage");
    if (st < 0) return mz_fail(MZ_E_FORMAT, "no \"storage\" section");
    j_strcpy(jp, st, "dir", d.dir, sizeof d.dir);
    d.direct = j_num(jp, st, "direct", 1) != 0;
    d.uring = j_num(jp, st, "uring", 1) != 0;
    d.file_bytes = (uint64_t)j_num(jp, st, "file_bytes", 0);
    d.cached_pages_max = (size_t)j_num(jp, st, "cached_pages_max", 0);
    int sizes = j_get(jp, st, "sizes"), qds = j_get(jp, st, "queue_depths");
    d.n_sizes = j_len(jp, sizes);
    d.n_qd = j_len(jp, qds);
    if (d.n_sizes < 1 || d.n_sizes > MZ_PROFILE_MAX_SIZES || d.n_qd < 1 ||
        d.n_qd > MZ_PROFILE_MAX_QD)
        return mz_fail(MZ_E_FORMAT, "storage: %d sizes and %d queue depths (1..%d, 1..%d)",
                       d.n_sizes, d.n_qd, MZ_PROFILE_MAX_SIZES, MZ_PROFILE_MAX_QD);
    double v[MZ_PROFILE_MAX_SIZES];
    if (!j_nums(jp, sizes, d.n_sizes, v)) return mz_fail(MZ_E_FORMAT, "storage: bad sizes");
    for (int i = 0; i < d.n_sizes; i++) {
        if (v[i] < 512 || v[i] > 1e12 || (i && v[i] <= v[i - 1]))
            return mz_fail(MZ_E_FORMAT, "storage: sizes must ascend from 512 bytes");
        d.read_size[i] = (size_t)v[i];
    }
    if (!j_nums(jp, qds, d.n_qd, v)) return mz_fail(MZ_E_FORMAT, "storage: bad queue depths");
    for (int j = 0; j < d.n_qd; j++) {
        if (v[j] < 1 || v[j] > 4096 || (j && v[j] <= v[j - 1]))
            return mz_fail(MZ_E_FORMAT, "storage: queue depths must ascend from 1");
        d.read_qd[j] = (int)v[j];
    }
    for (int pass = 0; pass < 2; pass++) {
        int m = j_get(jp, st, pass ? "read_gbps_loaded" : "read_gbps");
        if (m < 0 && pass) break; /* optional */
        if (j_len(jp, m) != d.n_sizes)
            return mz_fail(MZ_E_FORMAT, "storage: read table is not %d rows", d.n_sizes);
        for (int i = 0; i < d.n_sizes; i++) {
            double *row = pass ? d.read_gbps_loaded[i] : d.read_gbps[i];
            if (!j_nums(jp, j_at(jp, m, i), d.n_qd, row))
                return mz_fail(MZ_E_FORMAT, "storage: read table row %d is not %d numbers", i,
                               d.n_qd);
            for (int j = 0; j < d.n_qd && !pass; j++)
                if (!(row[j] > 0))
                    return mz_fail(MZ_E_FORMAT, "storage: read throughput must be > 0");
        }
    }
    int sat = j_get(jp, st, "saturation");
    d.sat_size = (size_t)j_num(jp, sat, "size", 0);
    d.sat_qd = (int)j_num(jp, sat, "queue_depth", 0);

    mz_device_profile b;
    mz_profile_builtin(&b);
    int mem = j_get(jp, root, "memory");
    d.memcpy_gbps = j_num(jp, mem, "memcpy_gbps", b.memcpy_gbps);
    d.touch_hot_s_per_gib = j_num(jp, mem, "first_touch_hot_s_per_gib", b.touch_hot_s_per_gib);
    d.touch_cold_s_per_gib = j_num(jp, mem, "first_touch_cold_s_per_gib", b.touch_cold_s_per_gib);
    d.touch_cold2_s_per_gib =
        j_num(jp, mem, "first_touch_cold_2t_s_per_gib", b.touch_cold2_s_per_gib);
    d.reclaim_wait_s = j_num(jp, mem, "reclaim_wait_s", b.reclaim_wait_s);
    if (!(d.memcpy_gbps > 0) || !(d.touch_cold_s_per_gib >= 0) || !(d.touch_hot_s_per_gib >= 0) ||
        !(d.touch_cold2_s_per_gib >= 0))
        return mz_fail(MZ_E_FORMAT, "memory: bad figures");

    int cs = j_get(jp, root, "codecs");
    int nc = j_len(jp, cs);
    if (nc < 1) return mz_fail(MZ_E_FORMAT, "no codecs");
    for (int i = 0; i < nc && d.n_codecs < MZ_PROFILE_MAX_CODECS; i++) {
        int c = j_at(jp, cs, i);
        mz_profile_codec *pc = &d.codec[d.n_codecs];
        j_strcpy(jp, c, "name", pc->name, sizeof pc->name);
        pc->decode_gbps = j_num(jp, c, "decode_gbps", 0);
        pc->decode_gbps_loaded = j_num(jp, c, "decode_gbps_loaded", 0);
        pc->encode_gbps = j_num(jp, c, "encode_gbps", 0);
        pc->ratio = j_num(jp, c, "ratio", 1);
        if (!pc->name[0] || !(pc->decode_gbps > 0) || !(pc->ratio > 0) ||
            !(pc->decode_gbps_loaded >= 0))
            return mz_fail(MZ_E_FORMAT, "codec entry %d: needs a name, decode_gbps > 0, ratio > 0",
                           i);
        d.n_codecs++;
    }
    *out = d;
    return MZ_OK;
}

mz_status mz_profile_from_json(const char *text, size_t len, mz_device_profile *out)
{
    mz_profile_builtin(out);
    /* Every node takes at least one character of text. */
    int cap = (int)MZ_MIN(len + 1, (size_t)1 << 20);
    jparser jp = {.t = text, .end = text + len, .cap = cap};
    jp.n = mz_calloc((size_t)cap, sizeof *jp.n);
    if (!jp.n) return MZ_E_NOMEM;
    mz_status s;
    int root = j_value(&jp);
    j_ws(&jp);
    if (root < 0 || jp.t != jp.end)
        s = mz_fail(MZ_E_FORMAT, "malformed JSON near byte %zu", (size_t)(jp.t - text));
    else
        s = parse_profile(&jp, root, out);
    free(jp.n);
    if (s) mz_profile_builtin(out);
    return s;
}

mz_status mz_profile_default_path(char *buf, size_t cap)
{
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n;
    if (xdg && xdg[0] == '/') n = snprintf(buf, cap, "%s/mzcache/profile.json", xdg);
    else if (home && home[0]) n = snprintf(buf, cap, "%s/.cache/mzcache/profile.json", home);
    else return mz_fail(MZ_E_INVAL, "neither XDG_CACHE_HOME nor HOME is set");
    if (n < 0 || (size_t)n >= cap) return mz_fail(MZ_E_RANGE, "profile path too long");
    return MZ_OK;
}

mz_status mz_profile_load(const char *path, mz_device_profile *out)
{
    mz_profile_builtin(out);
    FILE *f = fopen(path, "rb");
    if (!f) return mz_fail(MZ_E_IO, "cannot open %s: %s", path, strerror(errno));
    char *text = NULL;
    size_t len = 0, cap = 0;
    mz_status s = MZ_OK;
    for (;;) {
        if (len + 4096 > cap) {
            if (cap >= ((size_t)1 << 20)) {
                s = mz_fail(MZ_E_FORMAT, "%s: larger than 1 MiB", path);
                break;
            }
            cap = cap ? cap * 2 : 8192;
            char *bigger = realloc(text, cap);
            if (!bigger) {
                s = mz_fail(MZ_E_NOMEM, "out of memory reading %s", path);
                break;
            }
            text = bigger;
        }
        size_t n = fread(text + len, 1, cap - len, f);
        len += n;
        if (n == 0) {
            if (ferror(f)) s = mz_fail(MZ_E_IO, "cannot read %s", path);
            break;
        }
    }
    fclose(f);
    if (!s) s = mz_profile_from_json(text, len, out);
    if (s) mz_fail_prefix(s, "%s", path);
    free(text);
    return s;
}

static mz_status mkdir_parents(const char *path)
{
    char tmp[1024];
    if (snprintf(tmp, sizeof tmp, "%s", path) >= (int)sizeof tmp)
        return mz_fail(MZ_E_RANGE, "path too long");
    char *slash = strrchr(tmp, '/');
    if (!slash || slash == tmp) return MZ_OK;
    *slash = '\0';
    for (char *q = tmp + 1; *q; q++) {
        if (*q != '/') continue;
        *q = '\0';
        if (mkdir(tmp, 0700) && errno != EEXIST)
            return mz_fail(MZ_E_IO, "cannot create %s: %s", tmp, strerror(errno));
        *q = '/';
    }
    if (mkdir(tmp, 0700) && errno != EEXIST)
        return mz_fail(MZ_E_IO, "cannot create %s: %s", tmp, strerror(errno));
    return MZ_OK;
}

mz_status mz_profile_save(const mz_device_profile *p, const char *path)
{
    mz_status s = mkdir_parents(path);
    if (s) return s;
    size_t need = mz_profile_to_json(p, NULL, 0) + 1;
    char *buf = mz_malloc(need);
    if (!buf) return MZ_E_NOMEM;
    mz_profile_to_json(p, buf, need);
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        s = mz_fail(MZ_E_IO, "cannot write %s: %s", tmp, strerror(errno));
        goto out_free;
    }
    bool ok = fwrite(buf, 1, need - 1, f) == need - 1;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path)) {
        s = mz_fail(MZ_E_IO, "cannot write %s: %s", path, strerror(errno));
        unlink(tmp);
    }
out_free:
    free(buf);
    return s;
}

void mz_profile_load_or_builtin(const char *path, mz_device_profile *out)
{
    /* One warning per process (contexts come and go; the advice does not change). */
    static atomic_bool warned;
    char def[1024];
    bool asked = path && path[0];
    if (!asked) {
        if (mz_profile_default_path(def, sizeof def)) {
            mz_profile_builtin(out);
            return;
        }
        path = def;
    }
    if (mz_profile_load(path, out) == MZ_OK) return;
    /* Only when it was asked for or is there but broken: without `mzcache
     * profile` ever run, every context would warn, also those that never
     * evict; mz_mem_stats.profile_measured tells the callers that do. */
    bool there = access(path, F_OK) == 0;
    if ((asked || there) && !atomic_exchange(&warned, true))
        mz_log(MZ_LOG_WARN, "no usable device profile (%s); eviction uses a built-in estimate "
                            "— run `mzcache profile` once to measure this machine",
               mz_last_error());
    mz_clear_error();
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
    out->t_d_ns = ns_of(kv, dec);
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

/* ---- 4. measurement ------------------------------------------------------------------- */

mz_profile_run_params mz_profile_run_params_default(void)
{
    return (mz_profile_run_params){.dir = NULL, .quick = false, .file_bytes = 0, .mem_bytes = 0,
                                   .reclaim_wait_s = -1, .log = NULL};
}

static void logf_(FILE *f, const char *fmt, ...) MZ_PRINTF(2, 3);
static void logf_(FILE *f, const char *fmt, ...)
{
    if (!f) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fflush(f);
}

static double now_s(void) { return mz_time_ms() / 1000.0; }

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) && errno == EINTR) {}
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* -- compute load: a matrix-vector product over a 16 MiB matrix for 8
 * tokens (the paper's 8-token query), the kind of work prefill does while
 * restore workers run. -- */

typedef struct load_thread {
    pthread_t th;
    atomic_bool stop;
    float *w, *x, *y;
    size_t rows, cols;
    volatile float sink;
    bool running;
} load_thread;

static void *load_main(void *arg)
{
    load_thread *lt = arg;
    while (!atomic_load_explicit(&lt->stop, memory_order_relaxed)) {
        for (size_t r = 0; r < lt->rows; r++) {
            const float *wr = lt->w + r * lt->cols;
            for (int t = 0; t < 8; t++) {
                const float *xt = lt->x + (size_t)t * lt->cols;
                float acc = 0;
                for (size_t c = 0; c < lt->cols; c++) acc += wr[c] * xt[c];
                lt->y[(size_t)t * lt->rows + r] = acc;
            }
        }
        lt->sink = lt->y[0];
    }
    return NULL;
}

static bool load_start(load_thread *lt)
{
    memset(lt, 0, sizeof *lt);
    lt->rows = 2048;
    lt->cols = 2048;
    lt->w = malloc(lt->rows * lt->cols * sizeof(float));
    lt->x = malloc(8 * lt->cols * sizeof(float));
    lt->y = malloc(8 * lt->rows * sizeof(float));
    if (!lt->w || !lt->x || !lt->y) goto out_free;
    for (size_t i = 0; i < lt->rows * lt->cols; i++) lt->w[i] = (float)(i % 7) * 0.01f;
    for (size_t i = 0; i < 8 * lt->cols; i++) lt->x[i] = (float)(i % 5) * 0.1f;
    atomic_init(&lt->stop, false);
    if (pthread_create(&lt->th, NULL, load_main, lt)) goto out_free;
    lt->running = true;
    sleep_s(0.02); /* let it reach its loop */
    return true;
out_free:
    free(lt->w);
    free(lt->x);
    free(lt->y);
    return false;
}

static void load_stop(load_thread *lt)
{
    if (!lt->running) return;
    atomic_store(&lt->stop, true);
    pthread_join(lt->th, NULL);
    free(lt->w);
    free(lt->x);
    free(lt->y);
    lt->running = false;
}

/* -- codecs -- */

/* Names the registry knows: taken from mz_codec_find's "(known: …)" message
 * for an unknown name, so codecs added to the registry are measured without
 * a change here; the fixed list covers a message without that list. */
static int codec_names(char names[][24], int cap)
{
    static const char *fallback[] = {"raw", "q8", "q8-g32", "q8-g128", "cachegen"};
    int n = 0;
    (void)mz_codec_find("\x01not-a-codec");
    const char *msg = mz_last_error(), *k = strstr(msg, "known: ");
    if (k) {
        k += 7;
        while (*k && *k != ')' && n < cap) {
            size_t len = strcspn(k, ", )");
            if (len > 0 && len < 24) {
                memcpy(names[n], k, len);
                names[n][len] = '\0';
                n++;
            }
            k += len;
            while (*k == ',' || *k == ' ') k++;
        }
    }
    for (size_t i = 0; i < MZ_ARRAY_LEN(fallback) && n < cap; i++) {
        bool have = false;
        for (int j = 0; j < n; j++) have = have || !strcmp(names[j], fallback[i]);
        if (!have) snprintf(names[n++], 24, "%s", fallback[i]);
    }
    mz_clear_error();
    return n;
}

/* Synthetic KV: per-channel offsets and scales plus noise, the structure of
 * real keys (outlier channels) at one chunk of the qwen3-0.6b shape (256
 * tokens x 8 heads x 128, K then V). */
static void synth_kv(mz_f16 *dst, size_t n)
{
    uint64_t s = 0x243f6a8885a308d3ull;
    for (size_t i = 0; i < n; i++) {
        size_t ch = i % 128;
        float noise = 0;
        for (int k = 0; k < 4; k++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            noise += (float)(s >> 40) / (float)(1u << 24);
        }
        float scale = ch % 17 == 3 ? 4.0f : 0.6f;
        dst[i] = mz_f32_to_f16(0.3f * sinf(0.7f * (float)ch) + (noise - 2.0f) * scale);
    }
}

static double time_decode(const mz_codec *c, const uint8_t *blob, size_t len, mz_f16 *out,
                          size_t n, double budget_s)
{
    double rates[3];
    for (int r = 0; r < 3; r++) {
        double t0 = now_s(), t;
        size_t k = 0;
        do {
            if (mz_codec_decode(c, blob, len, out, n)) return 0;
            k++;
            t = now_s() - t0;
        } while (t < budget_s / 3);
        rates[r] = (double)(k * n * sizeof(mz_f16)) / t / 1e9;
    }
    return median(rates, 3);
}

static void measure_codecs(const mz_profile_run_params *rp, mz_device_profile *out)
{
    const size_t n = (size_t)MZ_KV_CHUNK_TOKENS * 8 * 128 * 2;
    double budget = rp->quick ? 0.03 : 0.3;
    char names[MZ_PROFILE_MAX_CODECS][24];
    int nn = codec_names(names, MZ_PROFILE_MAX_CODECS);
    mz_f16 *src = mz_pages_alloc(n * sizeof *src), *dst = mz_pages_alloc(n * sizeof *dst);
    size_t cap = 0;
    for (int i = 0; i < nn; i++) {
        const mz_codec *c = mz_codec_find(names[i]);
        if (c) cap = MZ_MAX(cap, mz_codec_bound(c, n));
    }
    uint8_t *blob = cap ? mz_pages_alloc(cap) : NULL;
    out->n_codecs = 0;
    if (!src || !dst || !blob) goto out_free;
    synth_kv(src, n);
    for (int i = 0; i < nn && out->n_codecs < MZ_PROFILE_MAX_CODECS; i++) {
        const mz_codec *c = mz_codec_find(names[i]);
        size_t len = 0;
        if (!c) continue;
        double t0 = now_s();
        int reps = 0;
        do {
            if (mz_codec_encode(c, src, n, blob, cap, &len)) break;
            reps++;
        } while (now_s() - t0 < budget / 3);
        double enc_s = now_s() - t0;
        if (!reps) {
            logf_(rp->log, "  codec %-16s cannot encode the test chunk: %s\n", names[i],
                  mz_last_error());
            continue;
        }
        mz_profile_codec *pc = &out->codec[out->n_codecs++];
        memset(pc, 0, sizeof *pc);
        snprintf(pc->name, sizeof pc->name, "%.23s", names[i]);
        pc->encode_gbps = (double)(reps * n * sizeof(mz_f16)) / enc_s / 1e9;
        pc->ratio = (double)len / (double)(n * sizeof(mz_f16));
        pc->decode_gbps = time_decode(c, blob, len, dst, n, budget);
        if (!rp->skip_loaded) {
            load_thread lt;
            if (load_start(&lt)) {
                pc->decode_gbps_loaded = time_decode(c, blob, len, dst, n, budget);
                load_stop(&lt);
            }
        }
        logf_(rp->log, "  codec %-16s decode %6.2f GB/s (beside compute %6.2f), encode %5.2f GB/s, "
                       "size %.3f of raw\n",
              pc->name, pc->decode_gbps, pc->decode_gbps_loaded, pc->encode_gbps, pc->ratio);
    }
out_free:
    mz_pages_free(src, n * sizeof *src);
    mz_pages_free(dst, n * sizeof *dst);
    if (blob) mz_pages_free(blob, cap);
    mz_clear_error();
}

/* -- storage -- */

/* Page-cache pages of the file (mincore on a mapping nobody touches); -1 if unknown. */
static long cached_pages(int fd, uint64_t bytes)
{
    size_t pg = mz_page_size(), np = (size_t)((bytes + pg - 1) / pg);
    void *m = mmap(NULL, (size_t)bytes, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) return -1;
    unsigned char *vec = malloc(np);
    long n = -1;
    if (vec && mincore(m, (size_t)bytes, vec) == 0) {
        n = 0;
        for (size_t i = 0; i < np; i++) n += vec[i] & 1;
    }
    free(vec);
    munmap(m, (size_t)bytes);
    return n;
}

/* Reads pass_bytes sequentially from `start` (wrapping) with qd requests of
 * req bytes in flight; returns GB/s, 0 on error. */
static double read_pass(mz_ioq *q, int fd, bool direct, uint8_t *bufs, size_t req, int qd,
                        uint64_t file_bytes, uint64_t start, uint64_t pass_bytes)
{
    mz_io_piece pieces[16];
    uint64_t off = start % file_bytes, issued = 0, done = 0;
    MZ_ASSERT(qd <= 16);
    double t0 = now_s();
    for (int i = 0; i < qd && issued < pass_bytes; i++) {
        mz_io_piece *p = &pieces[i];
        memset(p, 0, sizeof *p);
        *p = (mz_io_piece){.fd = fd, .direct = direct, .niov = 1, .off = off, .need = req};
        p->iov[0] = (struct iovec){bufs + (size_t)i * req, req};
        mz_ioq_push(q, p);
        issued += req;
        off = off + 2 * req > file_bytes ? 0 : off + req;
    }
    mz_io_piece *p;
    bool failed = false;
    while ((p = mz_ioq_next(q, true))) {
        /* On an error stop issuing but drain: the pieces live on this stack. */
        failed = failed || p->err != 0;
        done += p->done;
        if (!failed && issued < pass_bytes) {
            p->off = off;
            mz_ioq_push(q, p);
            issued += req;
            off = off + 2 * req > file_bytes ? 0 : off + req;
        }
    }
    double t = now_s() - t0;
    return !failed && t > 0 ? (double)done / t / 1e9 : 0;
}

static mz_status measure_storage(const mz_profile_run_params *rp, mz_device_profile *out)
{
    static const size_t full_sizes[] = {64 << 10, 128 << 10, 256 << 10, 512 << 10,
                                        1 << 20,  2 << 20,   4 << 20};
    static const int full_qd[] = {1, 2, 4, 8};
    static const size_t quick_sizes[] = {64 << 10, 1 << 20};
    static const int quick_qd[] = {1, 4};
    const size_t *sizes = rp->quick ? quick_sizes : full_sizes;
    const int *qds = rp->quick ? quick_qd : full_qd;
    int ns = rp->quick ? 2 : 7, nq = rp->quick ? 2 : 4, reps = rp->quick ? 1 : 3;
    uint64_t fbytes = rp->file_bytes ? rp->file_bytes : (rp->quick ? 32u << 20 : 256u << 20);
    fbytes = MZ_MAX(fbytes, (uint64_t)8 << 20) / (4u << 20) * (4u << 20);
    uint64_t pass = rp->quick ? fbytes / 4 : MZ_MIN(fbytes / 2, (uint64_t)128 << 20);
    char dir[512], path[600];
    mz_status s = MZ_OK;
    if (rp->dir && rp->dir[0]) snprintf(dir, sizeof dir, "%s", rp->dir);
    else if ((s = mz_swapfile_default_dir(dir, sizeof dir))) return s;
    snprintf(out->dir, sizeof out->dir, "%.255s", dir);
    if (mkdir(dir, 0700) && errno != EEXIST)
        return mz_fail(MZ_E_IO, "cannot create %s: %s", dir, strerror(errno));
    snprintf(path, sizeof path, "%s/mzprofile-%ld.tmp", dir, (long)getpid());

    bool direct = true;
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_DIRECT, 0600);
    if (fd < 0 && errno == EINVAL) {
        direct = false;
        fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    }
    if (fd < 0) return mz_fail(MZ_E_IO, "cannot create %s: %s", path, strerror(errno));
    unlink(path); /* nothing is left behind, whatever happens next */
    size_t wchunk = 4u << 20, bufs_bytes = 8 * (4u << 20);
    uint8_t *bufs = mz_pages_alloc(bufs_bytes);
    mz_ioq *q = NULL;
    if (!bufs) {
        s = mz_fail(MZ_E_NOMEM, "no memory for read buffers");
        goto out_close;
    }
    /* Write the file (random bytes: no compression or dedup below us). */
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (uint64_t off = 0; off < fbytes; off += wchunk) {
        uint64_t *w = (uint64_t *)(void *)bufs;
        for (size_t i = 0; i < wchunk / 8; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            w[i] = x;
        }
        ssize_t n = pwrite(fd, bufs, wchunk, (off_t)off);
        if (n != (ssize_t)wchunk) {
            if (n < 0 && errno == EINVAL && direct) {
                /* O_DIRECT accepted at open, refused at write: go buffered. */
                int fl = fcntl(fd, F_GETFL);
                if (fl >= 0 && fcntl(fd, F_SETFL, fl & ~O_DIRECT) == 0) {
                    direct = false;
                    off -= wchunk;
                    continue;
                }
            }
            s = mz_fail(MZ_E_IO, "cannot write the %llu-byte test file in %s: %s",
                        (unsigned long long)fbytes, dir, n < 0 ? strerror(errno) : "short write");
            goto out_close;
        }
    }
    fdatasync(fd);
    out->direct = direct;
    out->file_bytes = fbytes;
    if ((s = mz_ioq_init(8, true, &q))) goto out_close;
    out->uring = mz_ioq_uses_uring(q);
    out->n_sizes = ns;
    out->n_qd = nq;
    for (int i = 0; i < ns; i++) out->read_size[i] = sizes[i];
    for (int j = 0; j < nq; j++) out->read_qd[j] = qds[j];
    logf_(rp->log, "  storage: %s, %llu MiB test file, %s, %s\n", dir,
          (unsigned long long)(fbytes >> 20), direct ? "O_DIRECT" : "buffered (O_DIRECT refused)",
          out->uring ? "io_uring" : "pread");

    double samples[2][MZ_PROFILE_MAX_SIZES][MZ_PROFILE_MAX_QD][3];
    uint64_t k = 0;
    bool with_load = !rp->skip_loaded;
    for (int rep = 0; rep < reps; rep++) {
        for (int loaded = 0; loaded < (with_load ? 2 : 1); loaded++) {
            load_thread lt;
            if (loaded && !load_start(&lt)) {
                with_load = false;
                break;
            }
            for (int i = 0; i < ns; i++) {
                for (int j = 0; j < nq; j++) {
                    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
                    long cp = cached_pages(fd, fbytes);
                    if (cp > 0) out->cached_pages_max = MZ_MAX(out->cached_pages_max, (size_t)cp);
                    double g = read_pass(q, fd, direct, bufs, sizes[i], qds[j], fbytes,
                                         (k++ * pass) % fbytes, pass);
                    if (g <= 0) {
                        s = mz_fail(MZ_E_IO, "reading the test file failed");
                        if (loaded) load_stop(&lt);
                        goto out_close;
                    }
                    samples[loaded][i][j][rep] = g;
                }
            }
            if (loaded) load_stop(&lt);
        }
    }
    double best = 0;
    for (int i = 0; i < ns; i++) {
        for (int j = 0; j < nq; j++) {
            out->read_gbps[i][j] = median(samples[0][i][j], reps);
            out->read_gbps_loaded[i][j] = with_load ? median(samples[1][i][j], reps) : 0;
            best = MZ_MAX(best, out->read_gbps[i][j]);
        }
    }
    out->sat_size = 0;
    out->sat_qd = 0;
    for (int i = 0; i < ns && !out->sat_size; i++)
        for (int j = 0; j < nq && !out->sat_size; j++)
            if (out->read_gbps[i][j] >= 0.9 * best) {
                out->sat_size = sizes[i];
                out->sat_qd = qds[j];
            }
    for (int pass_l = 0; pass_l < (with_load ? 2 : 1); pass_l++) {
        logf_(rp->log, "  read GB/s%s   size:", pass_l ? " beside compute" : "");
        for (int i = 0; i < ns; i++) logf_(rp->log, " %7zuK", sizes[i] >> 10);
        logf_(rp->log, "\n");
        for (int j = 0; j < nq; j++) {
            logf_(rp->log, "    %s   QD %d:", pass_l ? "               " : "", qds[j]);
            for (int i = 0; i < ns; i++)
                logf_(rp->log, " %8.2f", pass_l ? out->read_gbps_loaded[i][j] : out->read_gbps[i][j]);
            logf_(rp->log, "\n");
        }
    }
    logf_(rp->log, "  reads saturate at %zu KiB x %d in flight (within 10%% of the best %.2f GB/s)\n",
          out->sat_size >> 10, out->sat_qd, best);
out_close:
    mz_ioq_free(q);
    if (bufs) mz_pages_free(bufs, bufs_bytes);
    close(fd);
    return s;
}

/* -- memory -- */

typedef struct touch_arg { uint8_t *p; size_t n; } touch_arg;

static void *touch_main(void *arg)
{
    touch_arg *a = arg;
    size_t pg = mz_page_size();
    for (size_t i = 0; i < a->n; i += pg) ((volatile uint8_t *)a->p)[i] = 1;
    return NULL;
}

/* Seconds per GiB to write one byte to every page of [p, p+n) with nth threads. */
static double touch_cost(uint8_t *p, size_t n, int nth)
{
    pthread_t th[2];
    touch_arg a[2];
    size_t half = n / 2 / mz_page_size() * mz_page_size();
    double t0 = now_s();
    if (nth == 2) {
        a[0] = (touch_arg){p, half};
        a[1] = (touch_arg){p + half, n - half};
        bool started = pthread_create(&th[1], NULL, touch_main, &a[1]) == 0;
        touch_main(&a[0]);
        if (started) pthread_join(th[1], NULL);
        else touch_main(&a[1]);
    } else {
        a[0] = (touch_arg){p, n};
        touch_main(&a[0]);
    }
    return (now_s() - t0) * GIB / (double)n;
}

static mz_status measure_memory(const mz_profile_run_params *rp, mz_device_profile *out)
{
    size_t n = rp->mem_bytes ? rp->mem_bytes : (rp->quick ? 16u << 20 : 256u << 20);
    double wait = rp->reclaim_wait_s >= 0 ? rp->reclaim_wait_s : (rp->quick ? 0.2 : 3.0);
    n = MZ_MAX(n / mz_page_size(), (size_t)2) * mz_page_size();
    uint8_t *p = mz_pages_alloc(n);
    if (!p) return mz_fail(MZ_E_NOMEM, "cannot map %zu bytes for the first-touch test", n);
    /* memcpy between two halves. */
    double best = 0;
    touch_cost(p, n, 1);
    for (int r = 0; r < 3; r++) {
        double t0 = now_s();
        memcpy(p, p + n / 2, n / 2);
        double t = now_s() - t0;
        if (t > 0) best = MZ_MAX(best, (double)(n / 2) / t / 1e9);
    }
    out->memcpy_gbps = best;
    madvise(p, n, MADV_DONTNEED);
    out->touch_hot_s_per_gib = touch_cost(p, n, 1);
    madvise(p, n, MADV_DONTNEED);
    sleep_s(wait);
    out->touch_cold_s_per_gib = touch_cost(p, n, 1);
    madvise(p, n, MADV_DONTNEED);
    sleep_s(wait);
    out->touch_cold2_s_per_gib = touch_cost(p, n, 2);
    out->reclaim_wait_s = wait;
    mz_pages_free(p, n);
    logf_(rp->log, "  memory: memcpy %.1f GB/s; first touch per GiB (%zu MiB): %.3f s right after "
                   "release, %.3f s after %.1f s (%.3f s with 2 threads)\n",
          out->memcpy_gbps, n >> 20, out->touch_hot_s_per_gib, out->touch_cold_s_per_gib, wait,
          out->touch_cold2_s_per_gib);
    return MZ_OK;
}

static void cpu_name(char *dst, size_t cap)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[256];
    dst[0] = '\0';
    if (!f) return;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10)) continue;
        const char *v = strchr(line, ':');
        if (v) {
            v++;
            while (*v == ' ') v++;
            snprintf(dst, cap, "%.*s", (int)strcspn(v, "\n"), v);
        }
        break;
    }
    fclose(f);
}

int mz_profile_restore_threads(const mz_device_profile *p)
{
    if (p->restore_threads >= 1 && p->restore_threads <= 3) return p->restore_threads;
    int n = p->n_cpus > 0 ? p->n_cpus : mz_n_cpus();
    return n >= 4 ? 3 : 2;
}

mz_status mz_profile_run(const mz_profile_run_params *rp_in, mz_device_profile *out)
{
    mz_profile_run_params rp = rp_in ? *rp_in : mz_profile_run_params_default();
    mz_status s = MZ_OK;
    double t0 = now_s();
    /* Start from the estimate so a skipped part keeps sensible figures. */
    mz_profile_builtin(out);
    out->measured = true;
    cpu_name(out->cpu, sizeof out->cpu);
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(out->created, sizeof out->created, "%Y-%m-%dT%H:%M:%SZ", &tm);
    logf_(rp.log, "mzcache profile: %s, %d CPUs%s\n", out->cpu[0] ? out->cpu : "unknown CPU",
          out->n_cpus, rp.quick ? " (quick)" : "");
    measure_codecs(&rp, out);
    if (out->n_codecs == 0) {
        mz_device_profile b;
        mz_profile_builtin(&b);
        out->n_codecs = b.n_codecs;
        memcpy(out->codec, b.codec, sizeof b.codec);
    }
    if (!rp.skip_storage && (s = measure_storage(&rp, out))) return s;
    if (!rp.skip_memory && (s = measure_memory(&rp, out))) return s;
    logf_(rp.log, "  done in %.1f s\n", now_s() - t0);
    return MZ_OK;
}
