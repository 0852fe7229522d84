/*
 * tokenizer.c — byte-level BPE (GPT-2 style) and SentencePiece, built from
 * GGUF metadata (tokenizer.ggml.model "gpt2" / "llama").
 *
 * Encoding follows llama.cpp's llama_vocab::tokenize:
 *
 *   1. Special-token partition. Tokens of type control, user-defined and
 *      unknown are searched for literally, longest text first: for each such
 *      token in turn, every still-raw fragment is split at each occurrence.
 *      Without parse_special only user-defined tokens take part.
 *   2. BPE: each raw fragment is sanitised to valid UTF-8 and split into
 *      words by the pre-tokenizer (pretok.c); each word's bytes start as one
 *      symbol per byte (the token spelling that byte in the GPT-2
 *      byte<->unicode map), and the adjacent pair with the lowest merge rank
 *      is merged repeatedly (ties: leftmost first). The merge table maps
 *      (left id, right id) to (rank, merged id), so no strings are built.
 *   3. SentencePiece (llm_tokenizer_spm): a raw fragment gets a leading space
 *      when add_space_prefix is set and it starts the text or follows a
 *      special token, every ' ' becomes U+2581, and the whole fragment is one
 *      word of one symbol per character (by lead byte, no UTF-8 repair); the
 *      adjacent pair whose joined text is a token with the highest score is
 *      merged repeatedly (ties: leftmost first). A final symbol that is no
 *      token falls back to byte tokens "<0xAB>".
 *   Both merge with a binary heap of candidate pairs: O(n log n) per word.
 *
 * Tables (all built once at init, read-only afterwards, so a tokenizer may be
 * shared by threads):
 *   text_*    token spellings as stored in the file (byte-level encoded)
 *   piece_*   decoded bytes of each token (what detokenizing produces)
 *   vhash     open-addressing hash: spelling → id
 *   mhash     open-addressing hash: (left id, right id) → (rank, merged id) (BPE)
 *   scores    SentencePiece merge priorities
 */
#define _GNU_SOURCE /* memmem */
#include "tokenizer_impl.h"

#include <math.h>
#include <string.h>

#define TOKF_EOG 0x01

typedef struct merge_ent {
    uint64_t key;              /* (left << 32) | right; EMPTY_KEY when free */
    int32_t rank;
    int32_t result;
} merge_ent;

#define EMPTY_KEY UINT64_MAX

struct mz_tokenizer {
    int n_vocab;
    char *text;                /* spellings, concatenated */
    uint32_t *text_off;        /* [n_vocab + 1] */
    char *piece;               /* decoded bytes, concatenated (NUL after each) */
    uint32_t *piece_off;       /* [n_vocab + 1]; piece i is [off[i], off[i+1]-1) */
    uint8_t *type;             /* [n_vocab] MZ_TOK_* */
    uint8_t *flags;            /* [n_vocab] TOKF_* */

    int32_t *vhash;            /* ids, -1 = free */
    size_t vhash_mask;
    merge_ent *mhash;
    size_t mhash_mask;
    size_t n_merges;           /* usable merges */

    int32_t byte_tok[256];     /* token spelling each byte, -1 if none */

    mz_token bos, eos, eot, eom, unk, pad;
    bool add_bos, add_eos;
    bool ignore_merges;
    bool spm;                  /* SentencePiece (model "llama"); else byte-level BPE */
    bool add_space_prefix;     /* spm: a space before text that follows a special token or starts */
    float *scores;             /* spm: [n_vocab] merge priority (higher first); NaN read as -inf */

    int32_t *specials;         /* control/user-defined/unknown ids, longest first */
    size_t n_specials;

    mz_pretok *pre;
    mz_chat_tmpl chat;
};

/* ---- hashing ----------------------------------------------------------------- */

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ull;
    }
    return h ^ (h >> 29);
}

static uint64_t hash_u64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static size_t table_cap(size_t n)
{
    size_t cap = 16;
    while (cap < n * 2) cap *= 2;
    return cap;
}

static inline const char *tok_text(const mz_tokenizer *t, int32_t id, size_t *len)
{
    *len = t->text_off[id + 1] - t->text_off[id];
    return t->text + t->text_off[id];
}

static int32_t vocab_find(const mz_tokenizer *t, const char *s, size_t n)
{
    for (size_t i = hash_bytes(s, n) & t->vhash_mask;; i = (i + 1) & t->vhash_mask) {
        int32_t id = t->vhash[i];
        if (id < 0) return -1;
        size_t len;
        const char *txt = tok_text(t, id, &len);
        if (len == n && memcmp(txt, s, n) == 0) return id;
    }
}

/* Later duplicates replace earlier ones, as llama.cpp's token_to_id map does. */
static void vocab_insert(mz_tokenizer *t, int32_t id)
{
    size_t n;
    const char *s = tok_text(t, id, &n);
    for (size_t i = hash_bytes(s, n) & t->vhash_mask;; i = (i + 1) & t->vhash_mask) {
        int32_t cur = t->vhash[i];
        if (cur < 0) {
            t->vhash[i] = id;
            return;
        }
        size_t len;
        const char *txt = tok_text(t, cur, &len);
        if (len == n && memcmp(txt, s, n) == 0) {
            t->vhash[i] = id;
            return;
        }
    }
}

static const merge_ent *merge_find(const mz_tokenizer *t, int32_t l, int32_t r)
{
    uint64_t key = ((uint64_t)(uint32_t)l << 32) | (uint32_t)r;
    for (size_t i = hash_u64(key) & t->mhash_mask;; i = (i + 1) & t->mhash_mask) {
        const merge_ent *e = &t->mhash[i];
        if (e->key == key) return e;
        if (e->key == EMPTY_KEY) return NULL;
    }
}

/* Keeps the first (lowest-rank) entry of a duplicated pair. */
static bool merge_insert(mz_tokenizer *t, int32_t l, int32_t r, int32_t rank, int32_t result)
{
    uint64_t key = ((uint64_t)(uint32_t)l << 32) | (uint32_t)r;
    for (size_t i = hash_u64(key) & t->mhash_mask;; i = (i + 1) & t->mhash_mask) {
        merge_ent *e = &t->mhash[i];
        if (e->key == key) return false;
        if (e->key == EMPTY_KEY) {
            e->key = key;
            e->rank = rank;
            e->result = result;
            return true;
        }
    }
}

/* ---- metadata helpers ---------------------------------------------------------- */

static bool kv_is_int(mz_gguf_type ty)
{
    return ty == MZ_GGUF_UINT8 || ty == MZ_GGUF_INT8 || ty == MZ_GGUF_UINT16 ||
           ty == MZ_GGUF_INT16 || ty == MZ_GGUF_UINT32 || ty == MZ_GGUF_INT32 ||
           ty == MZ_GGUF_UINT64 || ty == MZ_GGUF_INT64;
}

static bool kv_is_signed(mz_gguf_type ty)
{
    return ty == MZ_GGUF_INT8 || ty == MZ_GGUF_INT16 || ty == MZ_GGUF_INT32 || ty == MZ_GGUF_INT64;
}

/* Optional token id: left as it is when absent, -1 when negative; out of
 * range is an error. */
static mz_status get_opt_id(const mz_gguf *g, const char *key, int n_vocab, mz_token *out)
{
    const mz_gguf_kv *kv = mz_gguf_find(g, key);
    if (!kv) return MZ_OK;
    *out = -1;
    if (!kv_is_int(kv->type))
        return mz_fail(MZ_E_FORMAT, "%s has type %s, expected an integer", key,
                       mz_gguf_type_name(kv->type));
    if (kv_is_signed(kv->type) && kv->v.i64 < 0) return MZ_OK;
    if (kv->v.u64 >= (uint64_t)n_vocab)
        return mz_fail(MZ_E_FORMAT, "%s = %llu is out of range (vocabulary has %d tokens)", key,
                       (unsigned long long)kv->v.u64, n_vocab);
    *out = (mz_token)kv->v.u64;
    return MZ_OK;
}

static mz_status get_opt_bool(const mz_gguf *g, const char *key, bool *out)
{
    const mz_gguf_kv *kv = mz_gguf_find(g, key);
    if (!kv) return MZ_OK;
    if (kv->type == MZ_GGUF_BOOL || kv_is_int(kv->type)) {
        *out = kv->v.u64 != 0;
        return MZ_OK;
    }
    return mz_fail(MZ_E_FORMAT, "%s has type %s, expected bool", key, mz_gguf_type_name(kv->type));
}

/* Required or optional array of elem type. *n = 0 and *data = NULL if absent
 * and optional. */
static mz_status get_array(const mz_gguf *g, const char *key, mz_gguf_type elem, bool required,
                           const void **data, uint64_t *n)
{
    *data = NULL;
    *n = 0;
    const mz_gguf_kv *kv = mz_gguf_find(g, key);
    if (!kv) {
        if (required) return mz_fail(MZ_E_FORMAT, "missing %s", key);
        return MZ_OK;
    }
    if (kv->type != MZ_GGUF_ARRAY || kv->arr_type != elem)
        return mz_fail(MZ_E_FORMAT, "%s has type %s%s%s, expected an array of %s", key,
                       mz_gguf_type_name(kv->type), kv->type == MZ_GGUF_ARRAY ? " of " : "",
                       kv->type == MZ_GGUF_ARRAY ? mz_gguf_type_name(kv->arr_type) : "",
                       mz_gguf_type_name(elem));
    *data = kv->arr_data;
    *n = kv->arr_n;
    return MZ_OK;
}

static mz_status get_opt_str(const mz_gguf *g, const char *key, mz_gguf_str *out)
{
    out->ptr = NULL;
    out->len = 0;
    const mz_gguf_kv *kv = mz_gguf_find(g, key);
    if (!kv) return MZ_OK;
    if (kv->type != MZ_GGUF_STRING)
        return mz_fail(MZ_E_FORMAT, "%s has type %s, expected string", key,
                       mz_gguf_type_name(kv->type));
    *out = kv->v.str;
    return MZ_OK;
}

/* ---- building ---------------------------------------------------------------- */

/* Decoded bytes of a normal token: each code point of the spelling that is in
 * the byte map becomes that byte; any other code point (or a stray invalid
 * byte) is kept as it is. dst must hold len bytes; returns bytes written. */
static size_t decode_spelling(const char *s, size_t len, char *dst)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, o = 0;
    while (i < len) {
        size_t l = mz_utf8_seq_len(p + i, len - i);
        if (!l) {
            dst[o++] = (char)p[i++];
            continue;
        }
        uint32_t cpt = p[i];
        if (l > 1) {
            cpt &= 0x7Fu >> l;
            for (size_t k = 1; k < l; k++) cpt = (cpt << 6) | (p[i + k] & 0x3F);
        }
        int b = mz_cpt_to_byte(cpt);
        if (b >= 0) {
            dst[o++] = (char)b;
        } else {
            memcpy(dst + o, p + i, l);
            o += l;
        }
        i += l;
    }
    return o;
}

static int hex_digit(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                          : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Decoded bytes of a SentencePiece token: a byte token "<0xAB>" is that one
 * byte; otherwise each U+2581 (the escaped space) becomes ' '. A byte token
 * spelled otherwise keeps its text. dst must hold len bytes. */
static size_t decode_spelling_spm(const char *s, size_t len, bool is_byte, char *dst)
{
    if (is_byte && len == 6 && !memcmp(s, "<0x", 3) && s[5] == '>' && hex_digit(s[3]) >= 0 &&
        hex_digit(s[4]) >= 0) {
        dst[0] = (char)(hex_digit(s[3]) * 16 + hex_digit(s[4]));
        return 1;
    }
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        if (i + 3 <= len && !memcmp(s + i, "\xe2\x96\x81", 3)) {
            dst[o++] = ' ';
            i += 2;
        } else {
            dst[o++] = s[i];
        }
    }
    return o;
}

static const char *const g_eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>",
    "<|end_of_text|>", "<EOT>", "_<EOT>", "<end_of_utterance>",
};

typedef struct special_key {
    uint32_t len;
    int32_t id;
} special_key;

/* Longest text first; equal lengths by id, so the order is deterministic. */
static int cmp_special(const void *a, const void *b)
{
    const special_key *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static mz_status build_vocab(mz_tokenizer *t, const mz_gguf_str *toks, const int32_t *types)
{
    const size_t n = (size_t)t->n_vocab;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (toks[i].len > UINT32_MAX || !mz_add_ok(total, (size_t)toks[i].len, &total) ||
            total >= UINT32_MAX / 2)
            return mz_fail(MZ_E_FORMAT, "tokenizer.ggml.tokens: token texts are too long");
    }
    t->text = mz_malloc(total + 1);
    t->text_off = mz_calloc(n + 1, sizeof *t->text_off);
    t->piece = mz_malloc(total + n + 1);
    t->piece_off = mz_calloc(n + 1, sizeof *t->piece_off);
    t->type = mz_calloc(n, 1);
    t->flags = mz_calloc(n, 1);
    t->vhash_mask = table_cap(n) - 1;
    t->vhash = mz_malloc((t->vhash_mask + 1) * sizeof *t->vhash);
    if (!t->text || !t->text_off || !t->piece || !t->piece_off || !t->type || !t->flags ||
        !t->vhash)
        return MZ_E_NOMEM;
    memset(t->vhash, 0xff, (t->vhash_mask + 1) * sizeof *t->vhash);

    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        t->text_off[i] = (uint32_t)off;
        if (toks[i].len) memcpy(t->text + off, toks[i].ptr, (size_t)toks[i].len);
        off += (size_t)toks[i].len;
        int ty = types ? types[i] : MZ_TOK_NORMAL;
        if (ty < MZ_TOK_UNDEFINED || ty > MZ_TOK_BYTE)
            return mz_fail(MZ_E_FORMAT, "tokenizer.ggml.token_type[%zu] = %d is not a token type (0..6)",
                           i, ty);
        t->type[i] = (uint8_t)ty;
    }
    t->text_off[n] = (uint32_t)off;
    t->text[off] = '\0';
    for (size_t i = 0; i < n; i++) vocab_insert(t, (int32_t)i);
    return MZ_OK;
}

/* End-of-generation set, plus llama.cpp's rule that an end-of-turn-looking
 * token which is not typed control is treated as control. */
static void build_eog(mz_tokenizer *t)
{
    for (size_t k = 0; k < MZ_ARRAY_LEN(g_eog_texts); k++) {
        int32_t id = vocab_find(t, g_eog_texts[k], strlen(g_eog_texts[k]));
        if (id < 0) continue;
        t->flags[id] |= TOKF_EOG;
        if (t->type[id] != MZ_TOK_CONTROL) {
            mz_log(MZ_LOG_DEBUG, "tokenizer: token %d '%s' treated as control", id, g_eog_texts[k]);
            t->type[id] = MZ_TOK_CONTROL;
        }
        if (t->eot < 0 && strcmp(g_eog_texts[k], "<|eom_id|>") != 0 &&
            strcmp(g_eog_texts[k], "<|endoftext|>") != 0 && strcmp(g_eog_texts[k], "<|end_of_text|>") != 0)
            t->eot = id;
    }
    if (t->eot < 0) {
        /* "<|endoftext|>"-only vocabularies: it ends the turn too. */
        int32_t id = vocab_find(t, "<|endoftext|>", 13);
        if (id >= 0 && id != t->eos) t->eot = id;
    }
    if (t->eos >= 0) t->flags[t->eos] |= TOKF_EOG;
    if (t->eot >= 0) t->flags[t->eot] |= TOKF_EOG;
    if (t->eom >= 0) t->flags[t->eom] |= TOKF_EOG;
}

static void build_pieces(mz_tokenizer *t)
{
    size_t o = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        size_t len;
        const char *s = tok_text(t, i, &len);
        t->piece_off[i] = (uint32_t)o;
        switch (t->type[i]) {
        case MZ_TOK_CONTROL:
        case MZ_TOK_USER_DEFINED:
        case MZ_TOK_UNKNOWN:
            memcpy(t->piece + o, s, len);
            o += len;
            break;
        case MZ_TOK_NORMAL:
        case MZ_TOK_BYTE:
            o += t->spm ? decode_spelling_spm(s, len, t->type[i] == MZ_TOK_BYTE, t->piece + o)
                        : decode_spelling(s, len, t->piece + o);
            break;
        default: /* unused / undefined: nothing, as llama.cpp */
            break;
        }
        t->piece[o++] = '\0';
    }
    t->piece_off[t->n_vocab] = (uint32_t)o;
}

static mz_status build_specials(mz_tokenizer *t)
{
    size_t n = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        int ty = t->type[i];
        if ((ty == MZ_TOK_CONTROL || ty == MZ_TOK_USER_DEFINED || ty == MZ_TOK_UNKNOWN) &&
            t->text_off[i + 1] > t->text_off[i])
            n++;
    }
    t->n_specials = n;
    if (!n) return MZ_OK;
    special_key *keys = mz_malloc(n * sizeof *keys);
    t->specials = mz_malloc(n * sizeof *t->specials);
    if (!keys || !t->specials) {
        free(keys);
        return MZ_E_NOMEM;
    }
    n = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        int ty = t->type[i];
        uint32_t len = t->text_off[i + 1] - t->text_off[i];
        if ((ty == MZ_TOK_CONTROL || ty == MZ_TOK_USER_DEFINED || ty == MZ_TOK_UNKNOWN) && len)
            keys[n++] = (special_key){len, i};
    }
    qsort(keys, n, sizeof *keys, cmp_special);
    for (size_t i = 0; i < n; i++) t->specials[i] = keys[i].id;
    free(keys);
    return MZ_OK;
}

static mz_status build_merges(mz_tokenizer *t, const mz_gguf_str *merges, uint64_t n_merges)
{
    if (n_merges > INT32_MAX)
        return mz_fail(MZ_E_FORMAT, "tokenizer.ggml.merges: %llu merges is too many",
                       (unsigned long long)n_merges);
    t->mhash_mask = table_cap((size_t)n_merges) - 1;
    t->mhash = mz_malloc((t->mhash_mask + 1) * sizeof *t->mhash);
    if (!t->mhash) return MZ_E_NOMEM;
    for (size_t i = 0; i <= t->mhash_mask; i++) t->mhash[i].key = EMPTY_KEY;

    size_t n_skipped = 0;
    char stackbuf[512];
    for (uint64_t r = 0; r < n_merges; r++) {
        const char *s = merges[r].ptr;
        size_t len = (size_t)merges[r].len;
        /* "left right": split at the first space after the first byte. */
        const char *sp = len > 1 ? memchr(s + 1, ' ', len - 1) : NULL;
        if (!sp || sp + 1 == s + len)
            return mz_fail(MZ_E_FORMAT, "tokenizer.ggml.merges[%llu] = \"%.*s\" is not \"left right\"",
                           (unsigned long long)r, (int)MZ_MIN(len, 64), s);
        size_t ll = (size_t)(sp - s), rl = len - ll - 1;
        int32_t l = vocab_find(t, s, ll), rt = vocab_find(t, sp + 1, rl);
        int32_t res = -1;
        if (l >= 0 && rt >= 0) {
            char *cat = ll + rl <= sizeof stackbuf ? stackbuf : malloc(ll + rl);
            if (!cat) return mz_fail(MZ_E_NOMEM, "tokenizer: out of memory building merges");
            memcpy(cat, s, ll);
            memcpy(cat + ll, sp + 1, rl);
            res = vocab_find(t, cat, ll + rl);
            if (cat != stackbuf) free(cat);
        }
        if (l < 0 || rt < 0 || res < 0) {
            n_skipped++;
            continue;
        }
        if (merge_insert(t, l, rt, (int32_t)r, res)) t->n_merges++;
    }
    if (n_skipped)
        mz_log(MZ_LOG_WARN, "tokenizer: %zu of %llu merges name tokens not in the vocabulary; ignored",
               n_skipped, (unsigned long long)n_merges);
    return MZ_OK;
}

/* Byte-level BPE: byte b is spelled by the token of its code point in the
 * GPT-2 map. */
static void build_byte_tokens_bpe(mz_tokenizer *t)
{
    for (int b = 0; b < 256; b++) {
        char buf[4];
        size_t l = mz_utf8_put(mz_byte_to_cpt((uint8_t)b), buf);
        t->byte_tok[b] = vocab_find(t, buf, l);
        if (t->byte_tok[b] < 0)
            mz_log(MZ_LOG_DEBUG, "tokenizer: no token for byte 0x%02x; it will be dropped", b);
    }
}

/* SentencePiece byte fallback (llama.cpp's byte_to_token): the token
 * "<0xAB>" (upper-case hex), else the one-byte text itself, else the unknown
 * token (-1 when there is none: the byte is dropped). */
static void build_byte_tokens_spm(mz_tokenizer *t)
{
    static const char hex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; b++) {
        const char name[6] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
        const char one = (char)b;
        int32_t id = vocab_find(t, name, sizeof name);
        if (id < 0) id = vocab_find(t, &one, 1);
        if (id < 0) id = t->unk;
        t->byte_tok[b] = id;
    }
}

/* SentencePiece merge priorities; an absent array scores every token 0 (as
 * llama.cpp does), a NaN scores -inf so that the heap order stays total. */
static mz_status build_scores(mz_tokenizer *t, const void *data)
{
    t->scores = mz_calloc((size_t)t->n_vocab, sizeof *t->scores);
    if (!t->scores) return MZ_E_NOMEM;
    if (!data) return MZ_OK;
    memcpy(t->scores, data, (size_t)t->n_vocab * sizeof *t->scores); /* packed, maybe unaligned */
    for (int i = 0; i < t->n_vocab; i++)
        if (isnan(t->scores[i])) t->scores[i] = -INFINITY;
    return MZ_OK;
}

void mz_tokenizer_free(mz_tokenizer *t)
{
    if (!t) return;
    free(t->text);
    free(t->text_off);
    free(t->piece);
    free(t->piece_off);
    free(t->type);
    free(t->flags);
    free(t->vhash);
    free(t->mhash);
    free(t->specials);
    free(t->scores);
    mz_pretok_free(t->pre);
    mz_chat_tmpl_free(&t->chat);
    free(t);
}

mz_status mz_tokenizer_init(const mz_gguf *g, mz_tokenizer **out)
{
    mz_status st;
    *out = NULL;
    if (!g) return mz_fail(MZ_E_INVAL, "tokenizer: no GGUF");

    mz_gguf_str model;
    if ((st = get_opt_str(g, "tokenizer.ggml.model", &model)) != MZ_OK) goto out_prefix;
    if (!model.ptr) {
        st = mz_fail(MZ_E_FORMAT, "missing tokenizer.ggml.model");
        goto out_prefix;
    }
    bool spm = model.len == 5 && memcmp(model.ptr, "llama", 5) == 0;
    if (!spm && (model.len != 4 || memcmp(model.ptr, "gpt2", 4) != 0)) {
        st = mz_fail(MZ_E_UNSUPPORTED,
                     "tokenizer.ggml.model '%.*s' is not supported (supported: 'gpt2' byte-level "
                     "BPE, 'llama' SentencePiece)",
                     (int)MZ_MIN(model.len, 64), model.ptr);
        goto out_prefix;
    }

    const void *tok_data, *type_data, *merge_data, *score_data;
    uint64_t n_tok, n_type, n_merge, n_score;
    if ((st = get_array(g, "tokenizer.ggml.tokens", MZ_GGUF_STRING, true, &tok_data, &n_tok)) != MZ_OK ||
        (st = get_array(g, "tokenizer.ggml.token_type", MZ_GGUF_INT32, false, &type_data, &n_type)) != MZ_OK ||
        (st = get_array(g, "tokenizer.ggml.merges", MZ_GGUF_STRING, !spm, &merge_data, &n_merge)) != MZ_OK ||
        (st = get_array(g, "tokenizer.ggml.scores", MZ_GGUF_FLOAT32, false, &score_data, &n_score)) != MZ_OK)
        goto out_prefix;
    if (n_tok == 0 || n_tok > INT32_MAX / 2) {
        st = mz_fail(MZ_E_FORMAT, "tokenizer.ggml.tokens has %llu entries", (unsigned long long)n_tok);
        goto out_prefix;
    }
    if ((type_data && n_type != n_tok) || (score_data && n_score != n_tok)) {
        st = mz_fail(MZ_E_FORMAT, "tokenizer.ggml.%s has %llu entries but tokenizer.ggml.tokens has %llu",
                     type_data && n_type != n_tok ? "token_type" : "scores",
                     (unsigned long long)(type_data && n_type != n_tok ? n_type : n_score),
                     (unsigned long long)n_tok);
        goto out_prefix;
    }

    mz_tokenizer *t = mz_calloc(1, sizeof *t);
    if (!t) return MZ_E_NOMEM;
    t->n_vocab = (int)n_tok;
    t->spm = spm;
    t->bos = t->eos = t->eot = t->eom = t->unk = t->pad = -1;
    if (spm) { /* llama.cpp's defaults for a SentencePiece vocabulary */
        t->add_bos = t->add_space_prefix = true;
        if (t->n_vocab > 2) {
            t->unk = 0;
            t->bos = 1;
            t->eos = 2;
        }
    }

    mz_gguf_str pre, tmpl;
    if ((st = get_opt_id(g, "tokenizer.ggml.bos_token_id", t->n_vocab, &t->bos)) != MZ_OK ||
        (st = get_opt_id(g, "tokenizer.ggml.eos_token_id", t->n_vocab, &t->eos)) != MZ_OK ||
        (st = get_opt_id(g, "tokenizer.ggml.eot_token_id", t->n_vocab, &t->eot)) != MZ_OK ||
        (st = get_opt_id(g, "tokenizer.ggml.eom_token_id", t->n_vocab, &t->eom)) != MZ_OK ||
        (st = get_opt_id(g, "tokenizer.ggml.unknown_token_id", t->n_vocab, &t->unk)) != MZ_OK ||
        (st = get_opt_id(g, "tokenizer.ggml.padding_token_id", t->n_vocab, &t->pad)) != MZ_OK ||
        (st = get_opt_bool(g, "tokenizer.ggml.add_bos_token", &t->add_bos)) != MZ_OK ||
        (st = get_opt_bool(g, "tokenizer.ggml.add_eos_token", &t->add_eos)) != MZ_OK ||
        (st = get_opt_bool(g, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix)) != MZ_OK ||
        (st = get_opt_str(g, "tokenizer.ggml.pre", &pre)) != MZ_OK ||
        (st = get_opt_str(g, "tokenizer.chat_template", &tmpl)) != MZ_OK)
        goto out_free;
    if (t->add_bos && t->bos < 0) {
        st = mz_fail(MZ_E_FORMAT, "tokenizer.ggml.add_bos_token is set but there is no bos_token_id");
        goto out_free;
    }
    if (t->add_eos && t->eos < 0) {
        st = mz_fail(MZ_E_FORMAT, "tokenizer.ggml.add_eos_token is set but there is no eos_token_id");
        goto out_free;
    }

    if ((st = build_vocab(t, tok_data, type_data)) != MZ_OK) goto out_free;
    build_eog(t);
    build_pieces(t);
    if ((st = build_specials(t)) != MZ_OK) goto out_free;
    if (spm) {
        if ((st = build_scores(t, score_data)) != MZ_OK) goto out_free;
        build_byte_tokens_spm(t);
    } else {
        if ((st = build_merges(t, merge_data, n_merge)) != MZ_OK) goto out_free;
        build_byte_tokens_bpe(t);
        /* llama.cpp: a llama3 vocabulary adds BOS unless told otherwise. */
        char pre_name[64] = "";
        if (pre.ptr) snprintf(pre_name, sizeof pre_name, "%.*s", (int)MZ_MIN(pre.len, 63), pre.ptr);
        if ((st = mz_pretok_init(pre.ptr ? pre_name : NULL, &t->pre, &t->ignore_merges)) != MZ_OK)
            goto out_free;
        if (!mz_gguf_find(g, "tokenizer.ggml.add_bos_token") && t->ignore_merges && t->bos >= 0)
            t->add_bos = true;
    }
    mz_gguf_str arch;
    char arch_name[32] = "";
    if ((st = get_opt_str(g, "general.architecture", &arch)) != MZ_OK) goto out_free;
    if (arch.ptr) snprintf(arch_name, sizeof arch_name, "%.*s", (int)MZ_MIN(arch.len, 31), arch.ptr);
    if ((st = mz_chat_tmpl_init(tmpl.ptr, (size_t)tmpl.len, arch.ptr ? arch_name : NULL, &t->chat)) != MZ_OK)
        goto out_free;

    if (spm)
        mz_log(MZ_LOG_INFO, "tokenizer: SentencePiece, %d tokens, %zu special, space prefix %s",
               t->n_vocab, t->n_specials, t->add_space_prefix ? "on" : "off");
    else
        mz_log(MZ_LOG_INFO, "tokenizer: %d tokens, %zu merges, %zu special, pre-tokenizer %s",
               t->n_vocab, t->n_merges, t->n_specials, mz_pretok_name(t->pre));
    *out = t;
    return MZ_OK;

out_free:
    mz_tokenizer_free(t);
out_prefix:
    return mz_fail_prefix(st, "tokenizer");
}

/* ---- accessors ------------------------------------------------------------------ */

int mz_tokenizer_n_vocab(const mz_tokenizer *t) { return t->n_vocab; }
mz_token mz_tokenizer_bos(const mz_tokenizer *t) { return t->bos; }
mz_token mz_tokenizer_eos(const mz_tokenizer *t) { return t->eos; }
mz_token mz_tokenizer_eot(const mz_tokenizer *t) { return t->eot; }
const mz_chat_tmpl *mz_tokenizer_chat(const mz_tokenizer *t) { return &t->chat; }

int mz_tokenizer_type(const mz_tokenizer *t, mz_token tok)
{
    return (tok >= 0 && tok < t->n_vocab) ? t->type[tok] : -1;
}

const char *mz_tokenizer_piece(const mz_tokenizer *t, mz_token tok, size_t *len)
{
    if (tok < 0 || tok >= t->n_vocab) {
        if (len) *len = 0;
        return NULL;
    }
    if (len) *len = t->piece_off[tok + 1] - t->piece_off[tok] - 1;
    return t->piece + t->piece_off[tok];
}

bool mz_tokenizer_is_control(const mz_tokenizer *t, mz_token tok)
{
    return tok >= 0 && tok < t->n_vocab && t->type[tok] == MZ_TOK_CONTROL;
}

bool mz_tokenizer_is_eog(const mz_tokenizer *t, mz_token tok)
{
    return tok >= 0 && tok < t->n_vocab && (t->flags[tok] & TOKF_EOG);
}

mz_status mz_tokenizer_set_chat(mz_tokenizer *t, const char *name)
{
    mz_chat_kind k;
    mz_status st = mz_chat_kind_from_name(name, &k);
    if (st == MZ_OK) mz_chat_tmpl_set_kind(&t->chat, k);
    return st;
}

const char *mz_tokenizer_chat_name(const mz_tokenizer *t, bool *from_file)
{
    if (from_file) *from_file = t->chat.from_file;
    return mz_chat_kind_name(t->chat.kind);
}

mz_status mz_tokenizer_chat_format(const mz_tokenizer *t, const mz_chat_msg *msgs, size_t n_msgs,
                                   bool add_assistant, char *buf, size_t cap, size_t *n_out)
{
    return mz_chat_tmpl_format(&t->chat, msgs, n_msgs, add_assistant, buf, cap, n_out);
}

/* ---- encoding ---------------------------------------------------------------------- */

typedef struct tok_vec {
    mz_token *a;
    size_t n, cap;
} tok_vec;

static mz_status tv_push(tok_vec *v, mz_token x)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 256;
        mz_token *a = realloc(v->a, cap * sizeof *a);
        if (!a) return mz_fail(MZ_E_NOMEM, "tokenizer: out of memory");
        v->a = a;
        v->cap = cap;
    }
    v->a[v->n++] = x;
    return MZ_OK;
}

typedef struct frag {
    size_t start, len;
    mz_token tok;              /* >= 0: a special token; -1: raw text */
} frag;

typedef struct frag_vec {
    frag *a;
    size_t n, cap;
} frag_vec;

static mz_status fv_push(frag_vec *v, size_t start, size_t len, mz_token tok)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 16;
        frag *a = realloc(v->a, cap * sizeof *a);
        if (!a) return mz_fail(MZ_E_NOMEM, "tokenizer: out of memory");
        v->a = a;
        v->cap = cap;
    }
    v->a[v->n++] = (frag){start, len, tok};
    return MZ_OK;
}

/* True when [pos, pos + n) overlaps one of the spans (sorted, disjoint). */
static bool in_spans(const mz_text_span *spans, size_t n_spans, size_t pos, size_t n)
{
    for (size_t i = 0; i < n_spans; i++) {
        if (spans[i].start >= pos + n) return false;
        if (spans[i].start + spans[i].len > pos) return true;
    }
    return false;
}

/* Splits raw fragments at special tokens (llama.cpp's tokenizer_st_partition:
 * each special token in turn, longest first, every occurrence). Control and
 * unknown tokens are taken only with parse_special, and never where they
 * overlap one of text_spans (text that must stay text: message content).
 * On return *fv holds the partition. */
static mz_status partition_specials(const mz_tokenizer *t, const char *text, size_t len,
                                    bool parse_special, const mz_text_span *text_spans,
                                    size_t n_text_spans, frag_vec *fv)
{
    mz_status st;
    frag_vec tmp = {0};
    fv->n = 0;
    if ((st = fv_push(fv, 0, len, -1)) != MZ_OK) return st;
    for (size_t k = 0; k < t->n_specials; k++) {
        int32_t id = t->specials[k];
        int ty = t->type[id];
        if (!parse_special && (ty == MZ_TOK_CONTROL || ty == MZ_TOK_UNKNOWN)) continue;
        size_t sl;
        const char *s = tok_text(t, id, &sl);
        /* Cheap check first: most tokens occur nowhere. */
        bool any = false;
        for (size_t f = 0; f < fv->n && !any; f++)
            if (fv->a[f].tok < 0 && fv->a[f].len >= sl &&
                memmem(text + fv->a[f].start, fv->a[f].len, s, sl))
                any = true;
        if (!any) continue;
        tmp.n = 0;
        for (size_t f = 0; f < fv->n; f++) {
            frag fr = fv->a[f];
            if (fr.tok >= 0) {
                if ((st = fv_push(&tmp, fr.start, fr.len, fr.tok)) != MZ_OK) goto out_free;
                continue;
            }
            bool guarded = ty == MZ_TOK_CONTROL || ty == MZ_TOK_UNKNOWN;
            size_t pos = fr.start, end = fr.start + fr.len, from = pos;
            while (from < end) {
                const char *m = end - from >= sl ? memmem(text + from, end - from, s, sl) : NULL;
                if (!m) break;
                size_t mp = (size_t)(m - text);
                if (guarded && in_spans(text_spans, n_text_spans, mp, sl)) {
                    from = mp + 1;
                    continue;
                }
                if (mp > pos && (st = fv_push(&tmp, pos, mp - pos, -1)) != MZ_OK) goto out_free;
                if ((st = fv_push(&tmp, mp, sl, id)) != MZ_OK) goto out_free;
                pos = from = mp + sl;
            }
            if (pos < end && (st = fv_push(&tmp, pos, end - pos, -1)) != MZ_OK) goto out_free;
        }
        frag_vec sw = *fv;
        *fv = tmp;
        tmp = sw;
    }
    st = MZ_OK;
out_free:
    free(tmp.a);
    return st;
}

/* Scratch for merging one word. A symbol is a run of bytes of the word,
 * [off, off + len); its id is the token spelling that run, or -1 (BPE: a
 * byte with no token; SentencePiece: a character that is no token, which
 * falls back to byte tokens at the end). A symbol's text follows from its
 * index and id, so (index, id) identifies it for the stale check. */
typedef struct bpe_sym {
    int32_t id;
    uint32_t off, len;
    int32_t prev, next;        /* neighbours in the live list, -1 at the ends */
    bool dead;                 /* merged into its left neighbour */
} bpe_sym;

/* A candidate merge; lower prio first (BPE: the merge rank; SentencePiece:
 * minus the merged token's score), ties leftmost first. */
typedef struct bpe_pair {
    double prio;
    int32_t left, right;       /* symbol indices */
    int32_t lid, rid;          /* their ids when queued (stale check) */
    int32_t result;
} bpe_pair;

typedef struct bpe_work {
    bpe_sym *sym;
    size_t sym_cap;
    bpe_pair *heap;
    size_t heap_n, heap_cap;
    char *enc;                 /* byte-level spelling of a word (ignore_merges) */
    size_t enc_cap;
} bpe_work;

static inline bool pair_less(const bpe_pair *a, const bpe_pair *b)
{
    return a->prio < b->prio || (a->prio == b->prio && a->left < b->left);
}

static void heap_push(bpe_work *w, bpe_pair p)
{
    MZ_ASSERT(w->heap_n < w->heap_cap);
    size_t i = w->heap_n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!pair_less(&p, &w->heap[parent])) break;
        w->heap[i] = w->heap[parent];
        i = parent;
    }
    w->heap[i] = p;
}

static bpe_pair heap_pop(bpe_work *w)
{
    bpe_pair top = w->heap[0];
    bpe_pair last = w->heap[--w->heap_n];
    size_t n = w->heap_n, i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && pair_less(&w->heap[c + 1], &w->heap[c])) c++;
        if (!pair_less(&w->heap[c], &last)) break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (n) w->heap[i] = last;
    return top;
}

/* Queues the merge of adjacent symbols l, r of word s if there is one:
 * BPE asks the merge table for the two ids; SentencePiece (llama.cpp's
 * llm_tokenizer_spm try_add_bigram) asks whether their joined text is a
 * token, of whatever type, and ranks by its score. */
static void add_pair(const mz_tokenizer *t, bpe_work *w, const unsigned char *s, int32_t l, int32_t r)
{
    if (l < 0 || r < 0) return;
    const bpe_sym *L = &w->sym[l], *R = &w->sym[r];
    if (t->spm) {
        int32_t id = vocab_find(t, (const char *)s + L->off, L->len + R->len);
        if (id >= 0) heap_push(w, (bpe_pair){-(double)t->scores[id], l, r, L->id, R->id, id});
        return;
    }
    if (L->id < 0 || R->id < 0) return;
    const merge_ent *e = merge_find(t, L->id, R->id);
    if (!e) return;
    heap_push(w, (bpe_pair){(double)e->rank, l, r, L->id, R->id, e->result});
}

static mz_status bpe_reserve(bpe_work *w, size_t n)
{
    if (n > (size_t)INT32_MAX / 4)
        return mz_fail(MZ_E_RANGE, "tokenizer: a single word of %zu bytes is too long", n);
    if (n > w->sym_cap) {
        free(w->sym);
        free(w->heap);
        w->sym = malloc(n * sizeof *w->sym);
        w->heap = malloc(3 * n * sizeof *w->heap);
        if (!w->sym || !w->heap) {
            w->sym_cap = w->heap_cap = 0;
            return mz_fail(MZ_E_NOMEM, "tokenizer: out of memory");
        }
        w->sym_cap = n;
        w->heap_cap = 3 * n;
    }
    return MZ_OK;
}

/* Length of the character at s[0..n) as SentencePiece splits text: by the
 * lead byte alone (llama.cpp's unicode_len_utf8; a stray continuation byte
 * is one character), cut at the end of the text. */
static size_t spm_char_len(const unsigned char *s, size_t n)
{
    static const uint8_t by_high_nibble[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    size_t l = by_high_nibble[s[0] >> 4];
    return l < n ? l : n;
}

/* Merges the symbols of word s[0..n) (BPE: one per byte; SentencePiece: one
 * per character) until no candidate is left, then emits them. Every merge
 * queues at most two pairs, so the heap holds at most 3n. */
static mz_status merge_word(const mz_tokenizer *t, bpe_work *w, const unsigned char *s, size_t n,
                            tok_vec *out)
{
    mz_status st;
    if ((st = bpe_reserve(w, n)) != MZ_OK) return st;
    bpe_sym *sym = w->sym;
    int32_t n_sym = 0;
    for (size_t off = 0; off < n; n_sym++) {
        size_t len = t->spm ? spm_char_len(s + off, n - off) : 1;
        sym[n_sym] = (bpe_sym){.id = t->spm ? vocab_find(t, (const char *)s + off, len) : t->byte_tok[s[off]],
                               .off = (uint32_t)off, .len = (uint32_t)len, .prev = n_sym - 1,
                               .next = off + len < n ? n_sym + 1 : -1};
        off += len;
    }
    w->heap_n = 0;
    for (int32_t i = 1; i < n_sym; i++) add_pair(t, w, s, i - 1, i);
    while (w->heap_n) {
        bpe_pair p = heap_pop(w);
        bpe_sym *L = &sym[p.left], *R = &sym[p.right];
        if (L->dead || R->dead || L->next != p.right || L->id != p.lid || R->id != p.rid) continue;
        L->id = p.result;
        L->len += R->len;
        R->dead = true;
        L->next = R->next;
        if (R->next >= 0) sym[R->next].prev = p.left;
        add_pair(t, w, s, L->prev, p.left);
        add_pair(t, w, s, p.left, L->next);
    }
    for (int32_t i = n_sym ? 0 : -1; i >= 0; i = sym[i].next) {
        if (sym[i].id >= 0) {
            if ((st = tv_push(out, sym[i].id)) != MZ_OK) return st;
        } else if (t->spm) { /* byte fallback */
            for (uint32_t k = 0; k < sym[i].len; k++) {
                int32_t b = t->byte_tok[s[sym[i].off + k]];
                if (b >= 0 && (st = tv_push(out, b)) != MZ_OK) return st;
            }
        }
    }
    return MZ_OK;
}

static mz_status bpe_word(const mz_tokenizer *t, bpe_work *w, const unsigned char *s, size_t n,
                          tok_vec *out)
{
    if (n == 1) return t->byte_tok[s[0]] >= 0 ? tv_push(out, t->byte_tok[s[0]]) : MZ_OK;

    if (t->ignore_merges) { /* llama3: a word that is a token is taken whole */
        if (n * 2 > w->enc_cap) {
            free(w->enc);
            w->enc = malloc(n * 2);
            w->enc_cap = w->enc ? n * 2 : 0;
            if (!w->enc) return mz_fail(MZ_E_NOMEM, "tokenizer: out of memory");
        }
        size_t el = 0;
        for (size_t i = 0; i < n; i++) el += mz_utf8_put(mz_byte_to_cpt(s[i]), w->enc + el);
        int32_t id = vocab_find(t, w->enc, el);
        if (id >= 0) return tv_push(out, id);
    }
    return merge_word(t, w, s, n, out);
}

/* SentencePiece over one raw fragment (llama.cpp's SPM path): no
 * pre-tokenizer and no UTF-8 repair; a space first when asked, every ' '
 * written as U+2581, then the whole fragment is one word. */
static mz_status encode_spm(const mz_tokenizer *t, const char *raw, size_t len, bool space_first,
                            bpe_work *w, tok_vec *out)
{
    size_t n_sp = 0;
    for (size_t i = 0; i < len; i++) n_sp += raw[i] == ' ';
    if (len > SIZE_MAX / 4) return mz_fail(MZ_E_RANGE, "tokenizer: text too long");
    /* each ' ' becomes 3 bytes; the prefix adds 3 bytes of its own */
    size_t el = len + 2 * n_sp + (space_first ? 3 : 0);
    if (el > w->enc_cap) {
        free(w->enc);
        w->enc = malloc(el);
        w->enc_cap = w->enc ? el : 0;
        if (!w->enc) return mz_fail(MZ_E_NOMEM, "tokenizer: out of memory");
    }
    char *e = w->enc;
    size_t o = 0;
    if (space_first) {
        memcpy(e, "\xe2\x96\x81", 3);
        o = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (raw[i] == ' ') {
            memcpy(e + o, "\xe2\x96\x81", 3);
            o += 3;
        } else {
            e[o++] = raw[i];
        }
    }
    return merge_word(t, w, (const unsigned char *)e, o, out);
}

static mz_status encode_raw(const mz_tokenizer *t, const char *raw, size_t len, bpe_work *w,
                            mz_span_vec *words, tok_vec *out)
{
    char *text = NULL;
    size_t tlen = 0;
    mz_status st = mz_utf8_sanitize(raw, len, &text, &tlen);
    if (st != MZ_OK) return st;
    words->n = 0;
    if ((st = mz_pretok_split(t->pre, text, tlen, words)) != MZ_OK) goto out_free;
    for (size_t i = 0; i < words->n && st == MZ_OK; i++)
        st = bpe_word(t, w, (const unsigned char *)text + words->a[i].start, words->a[i].len, out);
out_free:
    free(text);
    return st;
}

static mz_status encode(const mz_tokenizer *t, const char *text, size_t len, bool add_special,
                        bool parse_special, const mz_text_span *text_spans, size_t n_text_spans,
                        mz_token *out, size_t cap, size_t *n_out)
{
    if (n_out) *n_out = 0;
    if (!t || (!text && len) || (!out && cap) || !n_out)
        return mz_fail(MZ_E_INVAL, "tokenize: bad arguments");
    mz_status st = MZ_OK;
    tok_vec tv = {0};
    frag_vec fv = {0};
    mz_span_vec words = {0};
    bpe_work w = {0};

    if (add_special && t->add_bos && (st = tv_push(&tv, t->bos)) != MZ_OK) goto out_free;
    if (len) {
        if ((st = partition_specials(t, text, len, parse_special, text_spans, n_text_spans, &fv)) != MZ_OK)
            goto out_free;
        bool after_special = true; /* SentencePiece's space prefix: at the start or after one */
        for (size_t f = 0; f < fv.n; f++) {
            if (fv.a[f].tok >= 0)
                st = tv_push(&tv, fv.a[f].tok);
            else if (t->spm)
                st = encode_spm(t, text + fv.a[f].start, fv.a[f].len,
                                t->add_space_prefix && after_special, &w, &tv);
            else
                st = encode_raw(t, text + fv.a[f].start, fv.a[f].len, &w, &words, &tv);
            if (st != MZ_OK) goto out_free;
            after_special = fv.a[f].tok >= 0;
        }
    }
    if (add_special && t->add_eos && (st = tv_push(&tv, t->eos)) != MZ_OK) goto out_free;

    *n_out = tv.n;
    if (tv.n && cap) memcpy(out, tv.a, MZ_MIN(tv.n, cap) * sizeof *out);
    if (tv.n > cap)
        st = mz_fail(MZ_E_RANGE, "tokenize: %zu tokens do not fit in a buffer of %zu", tv.n, cap);
out_free:
    free(tv.a);
    free(fv.a);
    free(words.a);
    free(w.sym);
    free(w.heap);
    free(w.enc);
    return st;
}

mz_status mz_tokenizer_encode(const mz_tokenizer *t, const char *text, size_t len,
                              bool add_special, bool parse_special, mz_token *out, size_t cap,
                              size_t *n_out)
{
    return encode(t, text, len, add_special, parse_special, NULL, 0, out, cap, n_out);
}

mz_status mz_tokenizer_encode_chat(const mz_tokenizer *t, const mz_chat_msg *msgs, size_t n_msgs,
                                   bool add_assistant, bool add_special, mz_token *out, size_t cap,
                                   size_t *n_out)
{
    if (n_out) *n_out = 0;
    if (!t || !n_out) return mz_fail(MZ_E_INVAL, "tokenize chat: bad arguments");
    size_t need = 0, n_spans = 0;
    mz_status st = mz_chat_tmpl_format(&t->chat, msgs, n_msgs, add_assistant, NULL, 0, &need);
    if (st != MZ_E_RANGE && st != MZ_OK) return st;
    if (n_msgs > SIZE_MAX / sizeof(mz_text_span) - 1) return mz_fail(MZ_E_RANGE, "tokenize chat: too many messages");
    char *text = malloc(need + 1);
    mz_text_span *spans = malloc((n_msgs + 1) * sizeof *spans);
    if (!text || !spans) {
        st = mz_fail(MZ_E_NOMEM, "tokenize chat: out of memory");
    } else {
        st = mz_chat_tmpl_format_spans(&t->chat, msgs, n_msgs, add_assistant, text, need + 1, &need, spans,
                                       &n_spans);
        if (st == MZ_OK) st = encode(t, text, need, add_special, true, spans, n_spans, out, cap, n_out);
    }
    free(text);
    free(spans);
    return st;
}
