/*
 * detok.c — streaming detokenizer (mz_detok_*): token pieces in, complete and
 * valid UTF-8 out.
 *
 * A token may end inside a character (byte-level BPE splits emoji and CJK
 * across tokens), so the bytes of an unfinished sequence are held until the
 * bytes that finish it arrive. Bytes that cannot be part of a well-formed
 * sequence become U+FFFD at once, one per maximal ill-formed subpart (the
 * Unicode "best practice"), so the output is always valid UTF-8 (no
 * overlongs, surrogates or values past U+10FFFF). Output that does not fit the
 * caller's buffer is kept and delivered, whole characters only, by the next
 * push or flush: callers drain with flush until it returns 0, and a buffer of
 * at least 4 bytes always makes progress (a smaller one may hold a character
 * back forever).
 */
#include "tokenizer_impl.h"

#include <string.h>

struct mz_detok {
    const mz_tokenizer *tok;
    unsigned char hold[4];     /* bytes of an unfinished sequence */
    size_t n_hold, need;       /* held so far / length of that sequence */
    char *pend;                /* finished UTF-8 not yet delivered */
    size_t pend_off, pend_n, pend_cap;
    bool oom;                  /* output was dropped for lack of memory */
};

static void pend_put(mz_detok_t *d, const void *p, size_t n)
{
    if (d->pend_off && d->pend_off == d->pend_n) d->pend_off = d->pend_n = 0;
    if (d->pend_n + n > d->pend_cap) {
        size_t cap = d->pend_cap ? d->pend_cap : 64;
        while (cap < d->pend_n + n) cap *= 2;
        char *np = realloc(d->pend, cap);
        if (!np) {
            if (!d->oom) mz_log(MZ_LOG_ERROR, "detok: out of memory; output dropped");
            d->oom = true;
            return;
        }
        d->pend = np;
        d->pend_cap = cap;
    }
    memcpy(d->pend + d->pend_n, p, n);
    d->pend_n += n;
}

static void put_fffd(mz_detok_t *d) { pend_put(d, "\xEF\xBF\xBD", 3); }

static void feed_byte(mz_detok_t *d, unsigned char b)
{
    if (d->n_hold) {
        unsigned lo = 0x80, hi = 0xBF;
        if (d->n_hold == 1) {
            unsigned l = d->hold[0];
            if (l == 0xE0) lo = 0xA0;
            else if (l == 0xED) hi = 0x9F;
            else if (l == 0xF0) lo = 0x90;
            else if (l == 0xF4) hi = 0x8F;
        }
        if (b >= lo && b <= hi) {
            d->hold[d->n_hold++] = b;
            if (d->n_hold == d->need) {
                pend_put(d, d->hold, d->n_hold);
                d->n_hold = 0;
            }
            return;
        }
        /* The held prefix can never complete: replace it, then start over. */
        put_fffd(d);
        d->n_hold = 0;
    }
    if (b < 0x80) {
        pend_put(d, &b, 1);
        return;
    }
    size_t need = (b >= 0xC2 && b <= 0xDF) ? 2 : (b >= 0xE0 && b <= 0xEF) ? 3 : (b >= 0xF0 && b <= 0xF4) ? 4 : 0;
    if (!need) {
        put_fffd(d);
        return;
    }
    d->hold[0] = b;
    d->n_hold = 1;
    d->need = need;
}

/* Copies pending output into buf, whole characters only. */
static size_t deliver(mz_detok_t *d, char *buf, size_t cap)
{
    size_t avail = d->pend_n - d->pend_off;
    size_t n = MZ_MIN(avail, cap);
    if (n < avail) /* do not cut a character: back up to a lead byte */
        while (n > 0 && ((unsigned char)d->pend[d->pend_off + n] & 0xC0) == 0x80) n--;
    if (n) memcpy(buf, d->pend + d->pend_off, n);
    d->pend_off += n;
    if (d->pend_off == d->pend_n) d->pend_off = d->pend_n = 0;
    return n;
}

mz_status mz_detok_init_tok(const mz_tokenizer *t, mz_detok_t **out)
{
    if (!out) return mz_fail(MZ_E_INVAL, "detok: out is NULL");
    *out = NULL;
    if (!t) return mz_fail(MZ_E_INVAL, "detok: no tokenizer");
    mz_detok_t *d = mz_calloc(1, sizeof *d);
    if (!d) return MZ_E_NOMEM;
    d->tok = t;
    *out = d;
    return MZ_OK;
}

void mz_detok_free(mz_detok_t *d)
{
    if (!d) return;
    free(d->pend);
    free(d);
}

size_t mz_detok_push(mz_detok_t *d, mz_token t, bool render_special, char *buf, size_t cap)
{
    if (!d || (!buf && cap)) return 0;
    size_t len = 0;
    const char *p = mz_tokenizer_piece(d->tok, t, &len);
    int ty = mz_tokenizer_type(d->tok, t);
    if (p && (render_special || (ty != MZ_TOK_CONTROL && ty != MZ_TOK_UNKNOWN)))
        for (size_t i = 0; i < len; i++) feed_byte(d, (unsigned char)p[i]);
    return deliver(d, buf, cap);
}

size_t mz_detok_flush(mz_detok_t *d, char *buf, size_t cap)
{
    if (!d || (!buf && cap)) return 0;
    if (d->n_hold) {
        put_fffd(d);
        d->n_hold = 0;
    }
    return deliver(d, buf, cap);
}
