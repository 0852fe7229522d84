/*
 * pretok.c — the text-side half of byte-level BPE:
 *
 *   1. UTF-8 sanitising (invalid bytes → U+FFFD, as llama.cpp does before it
 *      runs its regexes), and strict UTF-8 checks for the decoder side.
 *   2. The pre-tokenizers: llama.cpp's regex sets for the gpt2, llama3, qwen2
 *      and smollm vocabularies, compiled with PCRE2 (UTF + UCP, JIT when the
 *      library has it). A set of several regexes is applied in sequence: each
 *      one splits every fragment the previous one produced into matches and
 *      the unmatched text between them (llama.cpp's unicode_regex_split), so a
 *      fragment boundary is also a boundary for the next regex's lookaheads.
 *   3. The GPT-2 byte↔unicode map used to spell bytes as printable code points.
 *
 * \s is spelled out as an explicit class: llama.cpp's whitespace set is the
 * Unicode White_Space property, which PCRE2's \s (UCP) misses at U+0085.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer_impl.h"

#include <pcre2.h>
#include <string.h>

/* ---- UTF-8 ---------------------------------------------------------------- */

size_t mz_utf8_put(uint32_t cpt, char *out)
{
    if (cpt < 0x80) {
        out[0] = (char)cpt;
        return 1;
    }
    if (cpt < 0x800) {
        out[0] = (char)(0xC0 | (cpt >> 6));
        out[1] = (char)(0x80 | (cpt & 0x3F));
        return 2;
    }
    if (cpt < 0x10000) {
        out[0] = (char)(0xE0 | (cpt >> 12));
        out[1] = (char)(0x80 | ((cpt >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cpt & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cpt >> 18));
    out[1] = (char)(0x80 | ((cpt >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cpt >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cpt & 0x3F));
    return 4;
}

size_t mz_utf8_seq_len(const unsigned char *s, size_t n)
{
    if (n == 0) return 0;
    unsigned b = s[0];
    if (b < 0x80) return 1;
    size_t need;
    unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (b >= 0xC2 && b <= 0xDF) need = 2;
    else if (b >= 0xE0 && b <= 0xEF) {
        need = 3;
        if (b == 0xE0) lo = 0xA0;       /* no overlongs */
        else if (b == 0xED) hi = 0x9F;  /* no surrogates */
    } else if (b >= 0xF0 && b <= 0xF4) {
        need = 4;
        if (b == 0xF0) lo = 0x90;
        else if (b == 0xF4) hi = 0x8F;  /* <= U+10FFFF */
    } else
        return 0;
    if (n < need) return 0;
    if (s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < need; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    return need;
}

bool mz_utf8_valid(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        size_t l = mz_utf8_seq_len(p + i, n - i);
        if (!l) return false;
        i += l;
    }
    return true;
}

/* llama.cpp's lenient decoder (unicode_cpt_from_utf8): the lead byte decides
 * the length and only the continuation bits are checked. Returns the number
 * of bytes consumed (0: invalid, consume one byte and emit U+FFFD). */
static size_t utf8_decode_lenient(const unsigned char *s, size_t n, uint32_t *cpt)
{
    unsigned b = s[0];
    if (!(b & 0x80)) {
        *cpt = b;
        return 1;
    }
    if (!(b & 0x40)) return 0;
    size_t need = !(b & 0x20) ? 2 : !(b & 0x10) ? 3 : !(b & 0x08) ? 4 : 0;
    if (!need || n < need) return 0;
    uint32_t c = b & (0x7F >> need);
    for (size_t i = 1; i < need; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        c = (c << 6) | (s[i] & 0x3F);
    }
    *cpt = c;
    return need;
}

mz_status mz_utf8_sanitize(const char *src, size_t len, char **out, size_t *out_len)
{
    /* Worst case: every byte becomes U+FFFD (3 bytes). */
    size_t cap;
    if (!mz_mul_ok(len, 3, &cap) || !mz_add_ok(cap, 1, &cap))
        return mz_fail(MZ_E_NOMEM, "text of %zu bytes is too long", len);
    char *dst = mz_malloc(cap);
    if (!dst) return MZ_E_NOMEM;
    const unsigned char *s = (const unsigned char *)src;
    size_t i = 0, o = 0;
    while (i < len) {
        uint32_t cpt = 0;
        size_t l = utf8_decode_lenient(s + i, len - i, &cpt);
        if (!l) {
            l = 1;
            cpt = 0xFFFD;
        } else if ((cpt >= 0xD800 && cpt <= 0xDFFF) || cpt > 0x10FFFF) {
            cpt = 0xFFFD; /* PCRE2 cannot take these; llama.cpp keeps surrogates */
        }
        i += l;
        o += mz_utf8_put(cpt, dst + o);
    }
    dst[o] = '\0';
    *out = dst;
    *out_len = o;
    return MZ_OK;
}

/* ---- GPT-2 byte ↔ unicode map ------------------------------------------- */

/* Bytes that are printable Latin-1 map to themselves; the other 68 map, in
 * byte order, to U+0100, U+0101, … */
static bool byte_is_direct(unsigned b)
{
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t mz_byte_to_cpt(uint8_t b)
{
    if (byte_is_direct(b)) return b;
    uint32_t n = 0;
    for (unsigned c = 0; c < b; c++)
        if (!byte_is_direct(c)) n++;
    return 256 + n;
}

int mz_cpt_to_byte(uint32_t cpt)
{
    if (cpt < 256) return byte_is_direct(cpt) ? (int)cpt : -1;
    if (cpt >= 256 + 68) return -1;
    uint32_t n = 0;
    for (unsigned c = 0; c < 256; c++) {
        if (byte_is_direct(c)) continue;
        if (n == cpt - 256) return (int)c;
        n++;
    }
    return -1;
}

/* ---- pre-tokenizer regexes -------------------------------------------------- */

/* Unicode White_Space, the set llama.cpp's unicode tables call whitespace. */
#define WS "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

/* GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static const char RE_GPT2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" WS "\\p{L}\\p{N}]+"
    "|[" WS "]+(?![^" WS "])|[" WS "]+";

/* Llama 3 (case-insensitive contractions spelled out, as llama.cpp does). */
static const char RE_LLAMA3[] =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
    "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*"
    "|[" WS "]*[\\r\\n]+|[" WS "]+(?![^" WS "])|[" WS "]+";

/* Qwen2: Llama 3 with single digits. */
static const char RE_QWEN2[] =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
    "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*"
    "|[" WS "]*[\\r\\n]+|[" WS "]+(?![^" WS "])|[" WS "]+";

/* SmolLM / StarCoder: every digit is its own fragment first, then GPT-2. */
static const char RE_DIGIT[] = "\\p{N}";

#define MZ_PRETOK_MAX_RE 4

typedef struct pretok_def {
    const char *kind;          /* canonical name */
    const char *names;         /* '|'-separated tokenizer.ggml.pre values */
    bool ignore_merges;
    const char *re[MZ_PRETOK_MAX_RE];
} pretok_def;

static const pretok_def g_defs[] = {
    {"gpt2", "|gpt2|default|mpt|olmo|jais|", false, {RE_GPT2}},
    {"llama3", "|llama3|llama-v3|llama-bpe|", true, {RE_LLAMA3}},
    {"llama3", "|dbrx|smaug-bpe|chatglm-bpe|", false, {RE_LLAMA3}},
    {"qwen2", "|qwen2|stablelm2|hunyuan|", false, {RE_QWEN2}},
    {"smollm", "|smollm|starcoder|refact|command-r|codeshell|exaone|minerva|", false,
     {RE_DIGIT, RE_GPT2}},
};

struct mz_pretok {
    const char *kind;
    int n_re;
    pcre2_code *re[MZ_PRETOK_MAX_RE];
};

static bool name_in_list(const char *list, const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || strchr(name, '|')) return false;
    for (const char *p = list; (p = strstr(p, name)) != NULL; p++)
        if (p[-1] == '|' && p[n] == '|') return true;
    return false;
}

void mz_pretok_free(mz_pretok *p)
{
    if (!p) return;
    for (int i = 0; i < p->n_re; i++) pcre2_code_free(p->re[i]);
    free(p);
}

const char *mz_pretok_name(const mz_pretok *p) { return p->kind; }

mz_status mz_pretok_init(const char *name, mz_pretok **out, bool *ignore_merges)
{
    *out = NULL;
    const pretok_def *def = &g_defs[0];
    bool found = false;
    if (name) {
        for (size_t i = 0; i < MZ_ARRAY_LEN(g_defs); i++) {
            if (name_in_list(g_defs[i].names, name)) {
                def = &g_defs[i];
                found = true;
                break;
            }
        }
        if (!found)
            mz_log(MZ_LOG_WARN, "tokenizer: unknown pre-tokenizer '%s', using gpt2", name);
    }
    mz_pretok *p = mz_calloc(1, sizeof *p);
    if (!p) return MZ_E_NOMEM;
    p->kind = def->kind;
    for (int i = 0; i < MZ_PRETOK_MAX_RE && def->re[i]; i++) {
        int err = 0;
        PCRE2_SIZE erroff = 0;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)def->re[i], PCRE2_ZERO_TERMINATED,
                                       PCRE2_UTF | PCRE2_UCP, &err, &erroff, NULL);
        if (!re) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof msg);
            mz_pretok_free(p);
            return mz_fail(MZ_E_UNSUPPORTED, "tokenizer: PCRE2 cannot compile the %s regex at %zu: %s",
                           def->kind, (size_t)erroff, (const char *)msg);
        }
        /* JIT is an optimisation: without it pcre2_match interprets. */
        (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
        p->re[p->n_re++] = re;
    }
    *ignore_merges = def->ignore_merges;
    *out = p;
    return MZ_OK;
}

static mz_status span_push(mz_span_vec *v, size_t start, size_t len)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        mz_span *a = realloc(v->a, cap * sizeof *a);
        if (!a) return mz_fail(MZ_E_NOMEM, "tokenizer: out of memory splitting text");
        v->a = a;
        v->cap = cap;
    }
    v->a[v->n].start = start;
    v->a[v->n].len = len;
    v->n++;
    return MZ_OK;
}

/* Splits each span of in by re into out (matches and the gaps between). */
static mz_status split_one(const pcre2_code *re, pcre2_match_data *md, const char *text,
                           const mz_span_vec *in, mz_span_vec *out)
{
    mz_status st = MZ_OK;
    for (size_t f = 0; f < in->n && st == MZ_OK; f++) {
        const size_t base = in->a[f].start, flen = in->a[f].len;
        PCRE2_SPTR subj = (PCRE2_SPTR)(text + base);
        size_t prev = 0, off = 0;
        while (off < flen) {
            int rc = pcre2_match(re, subj, flen, off, PCRE2_NO_UTF_CHECK, md, NULL);
            if (rc == PCRE2_ERROR_NOMATCH) break;
            if (rc < 0) {
                PCRE2_UCHAR msg[256];
                pcre2_get_error_message(rc, msg, sizeof msg);
                return mz_fail(MZ_E_INVAL, "tokenizer: regex match failed: %s", (const char *)msg);
            }
            const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            size_t ms = ov[0], me = ov[1];
            if (ms > prev && (st = span_push(out, base + prev, ms - prev)) != MZ_OK) return st;
            if (me > ms && (st = span_push(out, base + ms, me - ms)) != MZ_OK) return st;
            prev = me > prev ? me : prev;
            if (me > ms) {
                off = me;
            } else { /* empty match: step one character */
                off = me + 1;
                while (off < flen && ((unsigned char)text[base + off] & 0xC0) == 0x80) off++;
            }
        }
        if (prev < flen) st = span_push(out, base + prev, flen - prev);
    }
    return st;
}

mz_status mz_pretok_split(const mz_pretok *p, const char *text, size_t len, mz_span_vec *out)
{
    if (len == 0) return MZ_OK;
    mz_status st = MZ_OK;
    mz_span_vec a = {0}, b = {0};
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    if (!md) return mz_fail(MZ_E_NOMEM, "tokenizer: out of memory (PCRE2 match data)");
    if ((st = span_push(&a, 0, len)) != MZ_OK) goto out_free;
    for (int i = 0; i < p->n_re; i++) {
        b.n = 0;
        if ((st = split_one(p->re[i], md, text, &a, &b)) != MZ_OK) goto out_free;
        mz_span_vec t = a;
        a = b;
        b = t;
    }
    for (size_t i = 0; i < a.n && st == MZ_OK; i++) st = span_push(out, a.a[i].start, a.a[i].len);
out_free:
    free(a.a);
    free(b.a);
    pcre2_match_data_free(md);
    return st;
}
