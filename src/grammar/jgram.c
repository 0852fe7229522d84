/*
 * jgram.c — the byte-level JSON grammar (see grammar.h for the language).
 *
 * State: a stack of frames, one per open JSON construct, the root at the
 * bottom. The top frame handles each byte and answers CONSUMED, REJECT or
 * RETRY (it replaced itself, pushed a child or popped — the byte then goes to
 * the new top). A parent sets the state it resumes in before pushing a child,
 * so a pop needs no notification. A value that ends without a closing byte
 * (a number, a literal such as `true`) pops on the first byte that cannot
 * continue it and passes that byte on (RETRY).
 *
 * Checking a token copies only the live frames (a few dozen bytes), so the
 * full-vocabulary mask costs one small copy and a few byte steps per token;
 * the filter skips tokens whose first byte is already known to be refused.
 */
#include "grammar/grammar_impl.h"

#include <stdlib.h>
#include <string.h>

#define MAX_FRAMES (2 * MZ_JGRAM_MAX_DEPTH + 8)

enum { FR_ROOT, FR_VALUE, FR_OBJ, FR_ARR, FR_STR, FR_NUM, FR_LIT };
enum { O_OPEN, O_KEY, O_COLON, O_AFTER, O_NEXT };
enum { A_OPEN, A_AFTER, A_NEXT };
enum { S_CHAR, S_ESC, S_HEX, S_UTF, S_LOW_BS, S_LOW_U };
enum { N_START, N_MINUS, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP };
enum { CONSUMED, REJECT, RETRY };

#define MAX_INT_DIGITS 18
#define MAX_FRAC_DIGITS 18
#define MAX_EXP_DIGITS 2

typedef struct jframe {
    const jnode *node;
    uint8_t kind, st, ws, aux; /* aux: string continuation bytes / hex digits left */
    uint8_t lo, hi;            /* string: range of the next continuation byte */
    uint32_t a, b, c;          /* obj: next property, key candidate, key bytes;
                                  arr: items; num: digits in part; lit: candidate, bytes */
} jframe;

struct mz_jgram {
    const mz_jschema *s;
    int n;
    jframe f[MAX_FRAMES];
};

static bool is_ws(unsigned char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
static bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
static bool is_hex(unsigned char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

/* Whitespace in a gap: allowed up to the bound. */
static int gap_ws(jframe *f)
{
    if (f->ws >= MZ_JGRAM_MAX_WS) return REJECT;
    f->ws++;
    return CONSUMED;
}

static bool push(mz_jgram *g, uint8_t kind, const jnode *node)
{
    if (g->n >= MAX_FRAMES) return false;
    g->f[g->n++] = (jframe){.node = node, .kind = kind};
    return true;
}

/* A value frame turns into the frame of the construct its first byte starts. */
static int value_start(mz_jgram *g, jframe *f, unsigned char c)
{
    if (is_ws(c)) return gap_ws(f);
    const jnode *n = f->node;
    if (n->kind == J_ALT) {
        int i = 0;
        while (i < n->n_alts && !jfirst_has(n->alts[i]->first, c)) i++;
        if (i == n->n_alts) return REJECT;
        n = n->alts[i];
    }
    if (!jfirst_has(n->first, c)) return REJECT;
    jkind k = n->kind;
    if (k == J_ANY) {
        /* Free-form nesting is bounded; scalars are always possible. */
        if ((c == '{' || c == '[') && g->n > MZ_JGRAM_MAX_DEPTH) return REJECT;
        if (c == '{') n = g->s->any_obj;
        else if (c == '[') n = g->s->any_arr;
        else if (c == '"') k = J_STRING;
        else if (c == 't' || c == 'f' || c == 'n') n = g->s->tfn;
        else k = J_NUMBER;
        if (n != g->s->any) k = n->kind;
    }
    *f = (jframe){.node = n};
    switch (k) {
    case J_OBJECT: f->kind = FR_OBJ; f->st = O_OPEN; return CONSUMED;
    case J_ARRAY: f->kind = FR_ARR; f->st = A_OPEN; return CONSUMED;
    case J_STRING: f->kind = FR_STR; f->st = S_CHAR; return CONSUMED;
    case J_NUMBER: f->kind = FR_NUM; f->aux = 0; return RETRY;
    case J_INTEGER: f->kind = FR_NUM; f->aux = 1; return RETRY;
    case J_LITERALS: f->kind = FR_LIT; return RETRY;
    default: return REJECT;
    }
}

/* Object keys of a schema object: the key literals of properties
 * [a, next_req[a]] (a required property cannot be skipped). The candidate
 * b shares its first c bytes with every other candidate still possible. */
static int key_byte(jframe *f, unsigned char ch)
{
    const jnode *n = f->node;
    int last = n->next_req[f->a] < n->n_props ? n->next_req[f->a] : n->n_props - 1;
    const jprop *cur = &n->props[f->b];
    for (int j = (int)f->b; j <= last; j++) {
        const jprop *p = &n->props[j];
        if (p->len > f->c && (unsigned char)p->lit[f->c] == ch && !memcmp(p->lit, cur->lit, f->c)) {
            f->b = (uint32_t)j;
            f->c++;
            if (f->c == p->len) { /* the closing quote: the key is complete */
                f->st = O_COLON;
                f->ws = 0;
            }
            return CONSUMED;
        }
    }
    return REJECT;
}

static int obj_byte(mz_jgram *g, jframe *f, unsigned char c)
{
    const jnode *n = f->node;
    switch (f->st) {
    case O_OPEN:
    case O_NEXT:
        if (is_ws(c)) return gap_ws(f);
        if (c == '}' && f->st == O_OPEN && (n->any_keys || n->next_req[f->a] == n->n_props)) {
            g->n--;
            return CONSUMED;
        }
        if (c != '"') return REJECT;
        if (n->any_keys) {
            f->st = O_COLON;
            f->ws = 0;
            if (!push(g, FR_STR, NULL)) return REJECT;
            g->f[g->n - 1].st = S_CHAR;
            return CONSUMED;
        }
        if ((int)f->a >= n->n_props) return REJECT;
        f->st = O_KEY;
        f->b = f->a;
        f->c = 0;
        return key_byte(f, c);
    case O_KEY: return key_byte(f, c);
    case O_COLON:
        if (is_ws(c)) return gap_ws(f);
        if (c != ':') return REJECT;
        f->st = O_AFTER;
        f->ws = 0;
        if (n->any_keys) return push(g, FR_VALUE, g->s->any) ? CONSUMED : REJECT;
        f->a = f->b + 1;
        return push(g, FR_VALUE, n->props[f->b].val) ? CONSUMED : REJECT;
    case O_AFTER:
        if (is_ws(c)) return gap_ws(f);
        if (c == ',' && (n->any_keys || (int)f->a < n->n_props)) {
            f->st = O_NEXT;
            f->ws = 0;
            return CONSUMED;
        }
        if (c == '}' && (n->any_keys || n->next_req[f->a] == n->n_props)) {
            g->n--;
            return CONSUMED;
        }
        return REJECT;
    default: return REJECT;
    }
}

static int arr_byte(mz_jgram *g, jframe *f, unsigned char c)
{
    const jnode *n = f->node;
    if (is_ws(c)) return gap_ws(f);
    if (f->st == A_AFTER) {
        if (c == ',' && f->a < n->max_items) {
            f->st = A_NEXT;
            f->ws = 0;
            return CONSUMED;
        }
        if (c == ']' && f->a >= n->min_items) {
            g->n--;
            return CONSUMED;
        }
        return REJECT;
    }
    if (c == ']' && f->st == A_OPEN && n->min_items == 0) {
        g->n--;
        return CONSUMED;
    }
    if (f->a >= n->max_items) return REJECT;
    f->st = A_AFTER;
    f->ws = 0;
    f->a++;
    return push(g, FR_VALUE, n->items) ? RETRY : REJECT;
}

static int str_byte(mz_jgram *g, jframe *f, unsigned char c)
{
    switch (f->st) {
    case S_CHAR:
        if (c == '"') {
            g->n--;
            return CONSUMED;
        }
        if (c == '\\') {
            f->st = S_ESC;
            return CONSUMED;
        }
        if (c < 0x20) return REJECT;
        if (c < 0x80) return CONSUMED;
        /* UTF-8 lead bytes, with the ranges of the byte after them (no
         * overlongs, surrogates or values past U+10FFFF), as the detokenizer. */
        f->lo = 0x80;
        f->hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) f->aux = 1;
        else if (c >= 0xE0 && c <= 0xEF) f->aux = 2;
        else if (c >= 0xF0 && c <= 0xF4) f->aux = 3;
        else return REJECT;
        if (c == 0xE0) f->lo = 0xA0;
        else if (c == 0xED) f->hi = 0x9F;
        else if (c == 0xF0) f->lo = 0x90;
        else if (c == 0xF4) f->hi = 0x8F;
        f->st = S_UTF;
        return CONSUMED;
    case S_UTF:
        if (c < f->lo || c > f->hi) return REJECT;
        f->lo = 0x80;
        f->hi = 0xBF;
        if (--f->aux == 0) f->st = S_CHAR;
        return CONSUMED;
    case S_ESC:
        if (c == 'u') {
            f->st = S_HEX;
            f->aux = 4;
            f->a = 0;
            f->b = 0;
            return CONSUMED;
        }
        if (!strchr("\"\\/bfnrt", c) || !c) return REJECT;
        f->st = S_CHAR;
        return CONSUMED;
    case S_HEX: {
        /* Surrogates only in pairs (strict parsers refuse lone ones), decided
         * by the second digit at the latest, so no prefix is a dead end. */
        if (!is_hex(c)) return REJECT;
        unsigned h = is_digit(c) ? (unsigned)(c - '0') : (unsigned)((c | 0x20) - 'a' + 10);
        f->a = f->a * 16 + h;
        int pos = 4 - f->aux;
        if (pos == 0 && f->b && h != 0xD) return REJECT;
        if (pos == 1) {
            bool low = f->a >= 0xDC && f->a <= 0xDF;
            if (f->b ? !low : low) return REJECT;
        }
        if (--f->aux == 0) {
            f->st = !f->b && f->a >= 0xD800 && f->a <= 0xDBFF ? S_LOW_BS : S_CHAR;
            f->b = 0;
        }
        return CONSUMED;
    }
    case S_LOW_BS:
        if (c != '\\') return REJECT;
        f->st = S_LOW_U;
        return CONSUMED;
    case S_LOW_U:
        if (c != 'u') return REJECT;
        f->st = S_HEX;
        f->aux = 4;
        f->a = 0;
        f->b = 1;
        return CONSUMED;
    default: return REJECT;
    }
}

static bool num_can_end(const jframe *f)
{
    return f->st == N_ZERO || f->st == N_INT || f->st == N_FRAC || f->st == N_EXP;
}

static int num_byte(mz_jgram *g, jframe *f, unsigned char c)
{
    bool integer = f->aux;
    switch (f->st) {
    case N_START:
        if (c == '-') {
            f->st = N_MINUS;
            return CONSUMED;
        }
        /* fallthrough */
    case N_MINUS:
        if (c == '0') {
            f->st = N_ZERO;
            return CONSUMED;
        }
        if (c >= '1' && c <= '9') {
            f->st = N_INT;
            f->a = 1;
            return CONSUMED;
        }
        return REJECT;
    case N_ZERO:
    case N_INT:
        if (is_digit(c) && f->st == N_INT && f->a < MAX_INT_DIGITS) {
            f->a++;
            return CONSUMED;
        }
        if (c == '.' && !integer) {
            f->st = N_DOT;
            f->a = 0;
            return CONSUMED;
        }
        if ((c == 'e' || c == 'E') && !integer) {
            f->st = N_E;
            return CONSUMED;
        }
        break;
    case N_DOT:
    case N_FRAC:
        if (is_digit(c) && f->a < MAX_FRAC_DIGITS) {
            f->st = N_FRAC;
            f->a++;
            return CONSUMED;
        }
        if (f->st == N_FRAC && (c == 'e' || c == 'E')) {
            f->st = N_E;
            return CONSUMED;
        }
        if (f->st == N_DOT) return REJECT;
        break;
    case N_E:
        if (c == '+' || c == '-') {
            f->st = N_ESIGN;
            return CONSUMED;
        }
        /* fallthrough */
    case N_ESIGN:
    case N_EXP:
        if (is_digit(c) && (f->st != N_EXP || f->a < MAX_EXP_DIGITS)) {
            if (f->st != N_EXP) f->a = 0;
            f->st = N_EXP;
            f->a++;
            return CONSUMED;
        }
        if (f->st != N_EXP) return REJECT;
        break;
    default: return REJECT;
    }
    if (!num_can_end(f) || is_digit(c)) return REJECT;
    g->n--;
    return RETRY;
}

/* Literals are sorted, so the candidates sharing the c bytes matched so far
 * are contiguous from b, the shortest (a prefix of the others) first. */
static int lit_byte(mz_jgram *g, jframe *f, unsigned char ch)
{
    const jnode *n = f->node;
    const char *cur = n->lits[f->b];
    for (int j = (int)f->b; j < n->n_lits && n->lit_len[j] >= f->c && !memcmp(n->lits[j], cur, f->c); j++)
        if (n->lit_len[j] > f->c && (unsigned char)n->lits[j][f->c] == ch) {
            f->b = (uint32_t)j;
            f->c++;
            return CONSUMED;
        }
    if (n->lit_len[f->b] != f->c) return REJECT;
    g->n--;
    return RETRY;
}

static bool lit_can_end(const jframe *f) { return f->node->lit_len[f->b] == f->c && f->c > 0; }

static bool step(mz_jgram *g, unsigned char c)
{
    for (int guard = 0; guard < MAX_FRAMES + 4; guard++) {
        jframe *f = &g->f[g->n - 1];
        int r;
        switch (f->kind) {
        case FR_ROOT: r = REJECT; break; /* the document is complete */
        case FR_VALUE: r = value_start(g, f, c); break;
        case FR_OBJ: r = obj_byte(g, f, c); break;
        case FR_ARR: r = arr_byte(g, f, c); break;
        case FR_STR: r = str_byte(g, f, c); break;
        case FR_NUM: r = num_byte(g, f, c); break;
        case FR_LIT: r = lit_byte(g, f, c); break;
        default: r = REJECT; break;
        }
        if (r != RETRY) return r == CONSUMED;
    }
    return false;
}

mz_jgram *mz_jgram_init(const mz_jschema *s)
{
    if (!s || !s->root) return NULL;
    mz_jgram *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->s = s;
    g->f[0] = (jframe){.kind = FR_ROOT};
    g->f[1] = (jframe){.kind = FR_VALUE, .node = s->root};
    g->n = 2;
    return g;
}

void mz_jgram_free(mz_jgram *g) { free(g); }

static void copy_state(mz_jgram *dst, const mz_jgram *src)
{
    dst->s = src->s;
    dst->n = src->n;
    memcpy(dst->f, src->f, (size_t)src->n * sizeof dst->f[0]);
}

static bool run(mz_jgram *g, const char *bytes, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!step(g, (unsigned char)bytes[i])) return false;
    return true;
}

bool mz_jgram_check(const mz_jgram *g, const char *bytes, size_t n)
{
    mz_jgram t;
    copy_state(&t, g);
    return run(&t, bytes, n);
}

bool mz_jgram_feed(mz_jgram *g, const char *bytes, size_t n)
{
    mz_jgram t;
    copy_state(&t, g);
    if (!run(&t, bytes, n)) return false;
    copy_state(g, &t);
    return true;
}

bool mz_jgram_complete(const mz_jgram *g)
{
    if (g->n == 1) return true;
    if (g->n != 2) return false;
    const jframe *f = &g->f[1];
    return (f->kind == FR_NUM && num_can_end(f)) || (f->kind == FR_LIT && lit_can_end(f));
}

/* ---- the shortest completion ------------------------------------------------------------ *
 *
 * close_len is the fewest bytes that complete the document from a state:
 * the sum over the open frames of what each still needs once the frames
 * above it are done. Its definition (checked over every byte by
 * test_grammar and fuzz_grammar): 0 exactly when the document is complete,
 * no byte lowers it by more than one, and some byte lowers it by one. */

/* Property k written whole (key, colon, shortest value), then the required
 * ones after it and the closing brace. */
static size_t obj_finish_from(const jnode *n, int k, size_t key_bytes_done)
{
    const jprop *p = &n->props[k];
    size_t len = jlen_add(p->len - key_bytes_done + 1, p->val->min_len);
    return jlen_add(jlen_add(len, jnode_required_tail(n, k + 1)), 1);
}

static size_t obj_close(const jframe *f)
{
    const jnode *n = f->node;
    if (f->st == O_OPEN) return n->min_len - 1; /* the value without its '{' */
    if (n->any_keys) {
        switch (f->st) {
        case O_NEXT: return 5;  /* "":0} */
        case O_COLON: return 3; /* :0} */
        default: return 1;      /* } */
        }
    }
    switch (f->st) {
    case O_NEXT:
        if (n->next_req[f->a] < n->n_props) return obj_finish_from(n, n->next_req[f->a], 0);
        { /* after a comma with nothing required left: the shortest optional one */
            size_t best = MZ_JGRAM_LEN_MAX;
            for (int k = (int)f->a; k < n->n_props; k++) {
                size_t len = obj_finish_from(n, k, 0);
                if (len < best) best = len;
            }
            return best;
        }
    case O_KEY: {
        /* The candidates key_byte still allows: those sharing the c bytes matched. */
        int last = n->next_req[f->a] < n->n_props ? n->next_req[f->a] : n->n_props - 1;
        const jprop *cur = &n->props[f->b];
        size_t best = MZ_JGRAM_LEN_MAX;
        for (int j = (int)f->b; j <= last; j++) {
            const jprop *p = &n->props[j];
            if (p->len > f->c && !memcmp(p->lit, cur->lit, f->c)) {
                size_t len = obj_finish_from(n, j, f->c);
                if (len < best) best = len;
            }
        }
        return best;
    }
    case O_COLON: return obj_finish_from(n, (int)f->b, n->props[f->b].len);
    case O_AFTER: return jlen_add(jnode_required_tail(n, (int)f->a), 1);
    default: return MZ_JGRAM_LEN_MAX;
    }
}

static size_t arr_close(const jframe *f)
{
    const jnode *n = f->node;
    size_t v = n->items->min_len;
    if (f->st == A_OPEN) return n->min_len - 1; /* the value without its '[' */
    size_t have = f->a + (f->st == A_NEXT ? 1 : 0), more = n->min_items > have ? n->min_items - have : 0;
    size_t len = jlen_add(jlen_items(more, v), 1);
    return f->st == A_NEXT ? jlen_add(len, v) : len;
}

static size_t str_close(const jframe *f)
{
    switch (f->st) {
    case S_CHAR: return 1;
    case S_ESC: return 2;
    case S_UTF: return (size_t)f->aux + 1;
    case S_HEX: {
        /* A high surrogate (D800-DBFF, fixed by the first two digits) must be
         * followed by an escaped low one: \uDC00. */
        int k = 4 - f->aux;
        bool high = !f->b && k >= 2 && (f->a >> 4 * (k - 2)) >= 0xD8 && (f->a >> 4 * (k - 2)) <= 0xDB;
        return (size_t)f->aux + (high ? 6 : 0) + 1;
    }
    case S_LOW_BS: return 7; /* \uDC00" */
    case S_LOW_U: return 6;  /* uDC00" */
    default: return MZ_JGRAM_LEN_MAX;
    }
}

static size_t lit_close(const jframe *f)
{
    const jnode *n = f->node;
    const char *cur = n->lits[f->b];
    size_t best = MZ_JGRAM_LEN_MAX;
    for (int j = (int)f->b; j < n->n_lits && n->lit_len[j] >= f->c && !memcmp(n->lits[j], cur, f->c); j++)
        if (n->lit_len[j] - f->c < best) best = n->lit_len[j] - f->c;
    return best;
}

static size_t frame_close(const jframe *f)
{
    switch (f->kind) {
    case FR_ROOT: return 0;
    case FR_VALUE: return f->node->min_len;
    case FR_OBJ: return obj_close(f);
    case FR_ARR: return arr_close(f);
    case FR_STR: return str_close(f);
    case FR_NUM: return num_can_end(f) ? 0 : 1;
    case FR_LIT: return lit_close(f);
    default: return MZ_JGRAM_LEN_MAX;
    }
}

size_t mz_jgram_close_len(const mz_jgram *g)
{
    size_t len = 0;
    for (int i = 0; i < g->n; i++) len = jlen_add(len, frame_close(&g->f[i]));
    return len;
}

bool mz_jgram_check_close(const mz_jgram *g, const char *bytes, size_t n, size_t *close_len)
{
    mz_jgram t;
    copy_state(&t, g);
    if (!run(&t, bytes, n)) return false;
    *close_len = mz_jgram_close_len(&t);
    return true;
}

/* ---- the vocabulary and the sampler filter -------------------------------------------- */

enum { TOK_TEXT = 0, TOK_EOG = 1, TOK_NEVER = 2 };

struct mz_jvocab {
    int n;
    uint32_t *off;       /* [n + 1] into bytes */
    uint8_t *kind;
    char *bytes;
};

mz_jvocab *mz_jvocab_init(const mz_model_t *m)
{
    int n = mz_model_n_vocab(m);
    if (n <= 0) return NULL;
    mz_jvocab *v = calloc(1, sizeof *v);
    mz_detok_t *dt = NULL;
    if (!v || mz_detok_init(m, &dt)) goto fail;
    v->n = n;
    v->off = malloc(((size_t)n + 1) * sizeof *v->off);
    v->kind = malloc((size_t)n);
    size_t total = 0;
    for (int t = 0; t < n; t++) {
        size_t len = 0;
        if (mz_token_piece(m, t, &len)) total += len;
    }
    v->bytes = malloc(total ? total : 1);
    if (!v->off || !v->kind || !v->bytes || total > UINT32_MAX) goto fail;
    uint32_t o = 0;
    for (int t = 0; t < n; t++) {
        size_t len = 0;
        const char *p = mz_token_piece(m, t, &len);
        v->off[t] = o;
        if (!p) len = 0;
        memcpy(v->bytes + o, p ? p : "", len);
        o += (uint32_t)len;
        if (mz_token_is_eog(m, t)) {
            v->kind[t] = TOK_EOG;
            continue;
        }
        /* A control token renders as nothing (its text form never reaches
         * the answer), so the grammar must not count its bytes: refuse it. */
        char buf[64];
        size_t out = mz_detok_push(dt, t, false, buf, sizeof buf);
        size_t more;
        while ((more = mz_detok_flush(dt, buf, sizeof buf)) > 0) out += more;
        v->kind[t] = (len == 0 || out == 0) ? TOK_NEVER : TOK_TEXT;
    }
    v->off[n] = o;
    mz_detok_free(dt);
    return v;
fail:
    mz_detok_free(dt);
    mz_jvocab_free(v);
    return NULL;
}

void mz_jvocab_free(mz_jvocab *v)
{
    if (!v) return;
    free(v->off);
    free(v->kind);
    free(v->bytes);
    free(v);
}

mz_jfilter mz_jfilter_make(mz_jgram *g, const mz_jvocab *v)
{
    return (mz_jfilter){.g = g, .v = v};
}

void mz_jfilter_set_budget(mz_jfilter *f, size_t n_tokens)
{
    f->budgeted = true;
    f->budget = n_tokens;
}

bool mz_jfilter_token_ok(void *user, mz_token t)
{
    mz_jfilter *f = user;
    const mz_jvocab *v = f->v;
    if (t < 0 || t >= v->n || v->kind[t] == TOK_NEVER) return false;
    if (v->kind[t] == TOK_EOG) return mz_jgram_complete(f->g);
    const char *p = v->bytes + v->off[t];
    size_t len = v->off[t + 1] - v->off[t];
    unsigned char b0 = (unsigned char)p[0];
    if (!f->first_ok[b0]) f->first_ok[b0] = mz_jgram_check(f->g, p, 1) ? 1 : 2;
    if (f->first_ok[b0] == 2) return false;
    if (!f->budgeted) return len == 1 || mz_jgram_check(f->g, p, len);
    size_t after;
    if (!mz_jgram_check_close(f->g, p, len, &after)) return false;
    if (!f->close_known) {
        f->close_now = mz_jgram_close_len(f->g);
        f->close_known = true;
    }
    /* Closable in the tokens left after this one; past that, only progress
     * (close_now > budget >= 0 there). */
    size_t left = f->budget > 0 ? f->budget - 1 : 0;
    size_t limit = f->close_now <= f->budget ? left : f->close_now - 1;
    if (after <= limit) return true;
    f->budget_bound = true;
    return false;
}

void mz_jfilter_forget_position(mz_jfilter *f)
{
    memset(f->first_ok, 0, sizeof f->first_ok);
    f->close_known = false;
}

bool mz_jfilter_accept(mz_jfilter *f, mz_token t)
{
    if (!mz_jfilter_token_ok(f, t)) return false;
    const mz_jvocab *v = f->v;
    mz_jfilter_forget_position(f);
    if (v->kind[t] == TOK_EOG) return true;
    if (!mz_jgram_feed(f->g, v->bytes + v->off[t], v->off[t + 1] - v->off[t])) return false;
    if (f->budgeted && f->budget > 0) f->budget--;
    return true;
}
