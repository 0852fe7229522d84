/*
 * profile_json.c — the device profile's file format (contract in
 * src/mem/profile.h, division 2): a JSON writer (snprintf into a buffer) and
 * a small tolerant parser (a flat node pool, recursive descent,
 * depth-limited) with typed getters; loading, saving, the default path.
 * Kept out of the memory manager: it is a file format, fuzzed by
 * tests/fuzz/fuzz_profile.c.
 */
#define _GNU_SOURCE
#include "../mem/profile.h"

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

/* Finite numbers only (JSON has no inf/nan), within +-1e12. Written "%.6g":
 * six significant digits read back to a double that prints the same text (the
 * file is a fixed point), and a positive rate stays positive (a fixed "%.4f"
 * wrote 0.000022 GB/s as 0.0000, which the parser rightly refused). */
static double fin(double x)
{
    if (!isfinite(x)) return 0.0;
    return x > 1e12 ? 1e12 : x < -1e12 ? -1e12 : x;
}

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
                  "    \"dir\": ", p->n_cpus, p->restore_threads);
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
                jb_printf(&b, "%s%.6g", j ? ", " : "",
                          fin(pass ? p->read_gbps_loaded[i][j] : p->read_gbps[i][j]));
            jb_printf(&b, "]");
        }
    }
    jb_printf(&b, "],\n    \"saturation\": {\"size\": %zu, \"queue_depth\": %d}\n  },\n",
              p->sat_size, p->sat_qd);
    jb_printf(&b, "  \"memory\": {\n    \"memcpy_gbps\": %.6g,\n"
                  "    \"first_touch_hot_s_per_gib\": %.6g,\n"
                  "    \"first_touch_cold_s_per_gib\": %.6g,\n"
                  "    \"first_touch_cold_2t_s_per_gib\": %.6g,\n"
                  "    \"reclaim_wait_s\": %.6g,\n    \"prefault_threads\": [",
              fin(p->memcpy_gbps), fin(p->touch_hot_s_per_gib), fin(p->touch_cold_s_per_gib),
              fin(p->touch_cold2_s_per_gib), fin(p->reclaim_wait_s));
    for (int i = 0; i < p->n_touch; i++) jb_printf(&b, "%s%d", i ? ", " : "", p->touch_threads[i]);
    jb_printf(&b, "],\n    \"prefault_s_per_gib\": [");
    for (int i = 0; i < p->n_touch; i++)
        jb_printf(&b, "%s%.6g", i ? ", " : "", fin(p->touch_mt_s_per_gib[i]));
    jb_printf(&b, "]\n  },\n  \"codecs\": [");
    for (int i = 0; i < p->n_codecs; i++) {
        const mz_profile_codec *c = &p->codec[i];
        jb_printf(&b, "%s\n    {\"name\": ", i ? "," : "");
        jb_str(&b, c->name);
        jb_printf(&b, ", \"decode_gbps\": %.6g, \"decode_gbps_loaded\": %.6g, "
                      "\"encode_gbps\": %.6g, \"ratio\": %.6g}",
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

/* v lies in [lo, hi]; false for NaN. Every number of the profile passes it
 * before it is converted to an integer type, where a value outside the
 * type's range would be undefined behaviour. */
static bool num_in(double v, double lo, double hi) { return v >= lo && v <= hi; }

/* A whole number in [lo, hi]. Counts, sizes and depths are integers in the
 * file; a fraction would be truncated on reading, so two values that ascend
 * as written (1.2, 1.73) could become equal ones, and the profile written
 * back would not read again. */
static bool whole_in(double v, double lo, double hi)
{
    return num_in(v, lo, hi) && v == floor(v);
}

/* The whole number under key (def when absent) if it lies in [lo, hi]. */
static bool j_whole_in(const jparser *p, int obj, const char *key, double def, double lo,
                       double hi, double *out)
{
    double v = j_num(p, obj, key, def);
    if (!whole_in(v, lo, hi)) return false;
    *out = v;
    return true;
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
        if (p->n[c].type != J_NUM || !num_in(p->n[c].num, 0, HUGE_VAL)) return false;
        out[i] = p->n[c].num;
    }
    return true;
}

static mz_status parse_profile(jparser *jp, int root, mz_device_profile *out)
{
    mz_device_profile d;
    memset(&d, 0, sizeof d);
    if (root < 0 || jp->n[root].type != J_OBJ) return mz_fail(MZ_E_FORMAT, "not a JSON object");
    double x;
    if (!j_whole_in(jp, root, "mzcache_profile", 0, 0, 1e6, &x) || (int)x != MZ_PROFILE_VERSION)
        return mz_fail(MZ_E_FORMAT, "not an mzcache profile of version %d", MZ_PROFILE_VERSION);
    d.version = (int)x;
    d.measured = j_num(jp, root, "measured", 1) != 0;
    j_strcpy(jp, root, "created", d.created, sizeof d.created);
    j_strcpy(jp, root, "cpu", d.cpu, sizeof d.cpu);
    if (!j_whole_in(jp, root, "n_cpus", 0, 0, 1 << 20, &x))
        return mz_fail(MZ_E_FORMAT, "n_cpus: a whole number 0..%d", 1 << 20);
    d.n_cpus = (int)x;
    if (!j_whole_in(jp, root, "restore_threads", 0, 0, MZ_RESTORE_THREADS_MAX, &x))
        return mz_fail(MZ_E_FORMAT, "restore_threads: 0 (the rule) or 1..%d",
                       MZ_RESTORE_THREADS_MAX);
    d.restore_threads = (int)x;

    int st = j_get(jp, root, "storage");
    if (st < 0) return mz_fail(MZ_E_FORMAT, "no \"storage\" section");
    j_strcpy(jp, st, "dir", d.dir, sizeof d.dir);
    d.direct = j_num(jp, st, "direct", 1) != 0;
    d.uring = j_num(jp, st, "uring", 1) != 0;
    if (!j_whole_in(jp, st, "file_bytes", 0, 0, 1e18, &x))
        return mz_fail(MZ_E_FORMAT, "storage: file_bytes out of range");
    d.file_bytes = (uint64_t)x;
    if (!j_whole_in(jp, st, "cached_pages_max", 0, 0, 1e15, &x))
        return mz_fail(MZ_E_FORMAT, "storage: cached_pages_max out of range");
    d.cached_pages_max = (size_t)x;
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
        if (!whole_in(v[i], 512, 1e12) || (i && v[i] <= v[i - 1]))
            return mz_fail(MZ_E_FORMAT,
                           "storage: sizes must be whole numbers ascending from 512 bytes");
        d.read_size[i] = (size_t)v[i];
    }
    if (!j_nums(jp, qds, d.n_qd, v)) return mz_fail(MZ_E_FORMAT, "storage: bad queue depths");
    for (int j = 0; j < d.n_qd; j++) {
        if (!whole_in(v[j], 1, 4096) || (j && v[j] <= v[j - 1]))
            return mz_fail(MZ_E_FORMAT,
                           "storage: queue depths must be whole numbers ascending from 1");
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
    if (!j_whole_in(jp, sat, "size", 0, 0, 1e12, &x))
        return mz_fail(MZ_E_FORMAT, "storage: saturation size out of range");
    d.sat_size = (size_t)x;
    if (!j_whole_in(jp, sat, "queue_depth", 0, 0, 4096, &x))
        return mz_fail(MZ_E_FORMAT, "storage: saturation queue_depth out of range");
    d.sat_qd = (int)x;

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
    /* Optional (older profiles lack it): pre-fault cost by thread count. */
    int tt = j_get(jp, mem, "prefault_threads"), tc = j_get(jp, mem, "prefault_s_per_gib");
    if ((tt >= 0 || tc >= 0) && !(j_len(jp, tt) == 0 && j_len(jp, tc) == 0)) {
        double th[MZ_PROFILE_MAX_TOUCH];
        int nt = j_len(jp, tt);
        if (nt < 1 || nt > MZ_PROFILE_MAX_TOUCH || !j_nums(jp, tt, nt, th) ||
            !j_nums(jp, tc, nt, d.touch_mt_s_per_gib))
            return mz_fail(MZ_E_FORMAT, "memory: prefault_threads and prefault_s_per_gib must be "
                                        "1..%d numbers each", MZ_PROFILE_MAX_TOUCH);
        for (int i = 0; i < nt; i++) {
            if (!whole_in(th[i], 1, MZ_RESTORE_THREADS_MAX) || (i && th[i] <= th[i - 1]))
                return mz_fail(MZ_E_FORMAT, "memory: prefault_threads must be whole numbers "
                                            "ascending from 1 to at most %d",
                               MZ_RESTORE_THREADS_MAX);
            d.touch_threads[i] = (int)th[i];
        }
        d.n_touch = nt;
    }

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
    char *text;
    size_t len;
    mz_status s = mz_read_file(path, (size_t)1 << 20, &text, &len);
    if (s == MZ_E_RANGE) return mz_fail(MZ_E_FORMAT, "%s: larger than 1 MiB", path);
    if (s) return s; /* the message names the path */
    s = mz_profile_from_json(text, len, out);
    if (s) mz_fail_prefix(s, "%s", path);
    free(text);
    return s;
}

/* The profile's directory, made private (it names the user's devices). */
static mz_status make_parent_dir(const char *path)
{
    char dir[1024];
    if (snprintf(dir, sizeof dir, "%s", path) >= (int)sizeof dir) return mz_fail(MZ_E_RANGE, "path too long");
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir) return MZ_OK;
    *slash = '\0';
    return mz_dir_make_private(dir);
}

mz_status mz_profile_save(const mz_device_profile *p, const char *path)
{
    mz_status s = make_parent_dir(path);
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
