/*
 * logprobs.c — log-probabilities of generated tokens (OpenAI's "logprobs"
 * and "top_logprobs"): recorded per token with the text offset where the
 * token starts (the model's log-softmax of the raw logits: before
 * penalties, bias, temperature and the grammar), and written into a
 * response only up to a limit, so tokens cut off by a stop string, or still
 * held back in a stream, are not sent early.
 */
#include "server/completion.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

bool srv_lp_record(gen_state *g, const float *logits, mz_token t, size_t offset)
{
    if (g->n_lp == g->cap_lp) {
        size_t cap = g->cap_lp ? g->cap_lp * 2 : 64;
        struct lp_entry *b = realloc(g->lp, cap * sizeof *b);
        if (!b) return false;
        g->lp = b;
        g->cap_lp = cap;
    }
    struct lp_entry *e = &g->lp[g->n_lp];
    e->t = t;
    e->offset = offset;
    e->n_top = g->n_top;
    if (mz_logprobs(logits, g->n_vocab, t, &e->lp, e->top, g->n_top)) return false;
    g->n_lp++;
    return true;
}

/* The token's bytes as valid UTF-8 (ill-formed bytes become U+FFFD; the
 * exact bytes go in "bytes"). */
static char *utf8_lossy(const char *p, size_t n)
{
    char *o = malloc(3 * n + 1), *w = o;
    if (!o) return NULL;
    const unsigned char *u = (const unsigned char *)p;
    for (size_t i = 0; i < n;) {
        unsigned char c = u[i];
        size_t need = c < 0x80 ? 1 : (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3 : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
        bool ok = need > 0 && i + need <= n;
        for (size_t k = 1; ok && k < need; k++) {
            unsigned lo = 0x80, hi = 0xBF;
            if (k == 1 && c == 0xE0) lo = 0xA0;
            if (k == 1 && c == 0xED) hi = 0x9F;
            if (k == 1 && c == 0xF0) lo = 0x90;
            if (k == 1 && c == 0xF4) hi = 0x8F;
            ok = u[i + k] >= lo && u[i + k] <= hi;
        }
        if (ok && c != 0) {
            memcpy(w, u + i, need);
            w += need;
            i += need;
        } else {
            memcpy(w, "\xEF\xBF\xBD", 3);
            w += 3;
            i++;
        }
    }
    *w = '\0';
    return o;
}

static double lp_value(float lp) { return isfinite(lp) ? (double)lp : -9999.0; }

/* {"token", "logprob", "bytes"} of token t (chat format). */
static cJSON *lp_token_json(const gen_state *g, mz_token t, float lp)
{
    size_t n = 0;
    const char *piece = mz_token_piece(g->srv->model, t, &n);
    if (!piece) n = 0;
    cJSON *o = cJSON_CreateObject();
    char *txt = utf8_lossy(piece ? piece : "", n);
    cJSON_AddStringToObject(o, "token", txt ? txt : "");
    free(txt);
    cJSON_AddNumberToObject(o, "logprob", lp_value(lp));
    cJSON *b = cJSON_AddArrayToObject(o, "bytes");
    for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(b, cJSON_CreateNumber((unsigned char)piece[i]));
    return o;
}

void srv_add_logprobs(cJSON *choice, gen_state *g, size_t limit)
{
    if (!g->want_lp) {
        cJSON_AddNullToObject(choice, "logprobs");
        return;
    }
    cJSON *o = cJSON_AddObjectToObject(choice, "logprobs");
    cJSON *content = NULL, *tokens = NULL, *lps = NULL, *tops = NULL, *offs = NULL;
    if (g->chat) {
        content = cJSON_AddArrayToObject(o, "content");
        cJSON_AddNullToObject(o, "refusal");
    } else {
        tokens = cJSON_AddArrayToObject(o, "tokens");
        lps = cJSON_AddArrayToObject(o, "token_logprobs");
        tops = cJSON_AddArrayToObject(o, "top_logprobs");
        offs = cJSON_AddArrayToObject(o, "text_offset");
    }
    for (; g->lp_sent < g->n_lp && g->lp[g->lp_sent].offset < limit; g->lp_sent++) {
        const struct lp_entry *e = &g->lp[g->lp_sent];
        if (g->chat) {
            cJSON *item = lp_token_json(g, e->t, e->lp);
            cJSON *alts = cJSON_AddArrayToObject(item, "top_logprobs");
            for (int k = 0; k < e->n_top; k++)
                if (e->top[k].token >= 0) cJSON_AddItemToArray(alts, lp_token_json(g, e->top[k].token, e->top[k].logprob));
            cJSON_AddItemToArray(content, item);
            continue;
        }
        cJSON *tj = lp_token_json(g, e->t, e->lp);
        cJSON_AddItemToArray(tokens, cJSON_CreateString(cJSON_GetObjectItem(tj, "token")->valuestring));
        cJSON_Delete(tj);
        cJSON_AddItemToArray(lps, cJSON_CreateNumber(lp_value(e->lp)));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)e->offset));
        cJSON *alts = cJSON_CreateObject();
        for (int k = 0; k < e->n_top; k++) {
            if (e->top[k].token < 0) continue;
            cJSON *aj = lp_token_json(g, e->top[k].token, e->top[k].logprob);
            const char *key = cJSON_GetObjectItem(aj, "token")->valuestring;
            if (!cJSON_GetObjectItemCaseSensitive(alts, key)) cJSON_AddNumberToObject(alts, key, lp_value(e->top[k].logprob));
            cJSON_Delete(aj);
        }
        cJSON_AddItemToArray(tops, alts);
    }
}
