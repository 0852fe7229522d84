/*
 * grammar.h — structured output: a JSON-Schema reader and a byte-level JSON
 * grammar that constrains sampling token by token (OpenAI response_format
 * json_object / json_schema).
 *
 *   mz_jschema   a compiled schema (immutable once read; any thread)
 *   mz_jgram     the grammar state of one document being generated
 *   mz_jvocab    the bytes of every token of a model, read once per request
 *
 * The grammar is a pushdown automaton over bytes: a token is allowed when
 * all its bytes continue a document that can still become valid, so tokens
 * spanning several JSON characters ("\":", "},{") work with any tokenizer.
 * The language it accepts is a subset of the documents the schema validates:
 *   - object properties come in the schema's order, each at most once,
 *     required ones never skipped; no properties beyond those listed
 *     (an object schema without "properties" takes any keys, values any JSON);
 *   - at most MZ_JGRAM_MAX_WS whitespace bytes between two tokens of JSON,
 *     none after the document (the model must then end: end-of-generation);
 *   - integers: at most 18 digits; numbers: at most 18 integer, 18 fraction
 *     and 2 exponent digits (so they parse to finite doubles);
 *   - strings: valid UTF-8 (the same rules as the detokenizer), JSON escapes,
 *     surrogate escapes only as high-low pairs;
 *   - nesting of free-form values (json_object, {} schemas) at most
 *     MZ_JGRAM_MAX_DEPTH levels.
 * Every state has a way to finish (a closing quote, bracket, digit or
 * literal byte is always allowed), so masking never leaves the model without
 * a token as long as the vocabulary holds single-byte ASCII tokens.
 *
 * Internal to src/ (the server library: the reader uses cJSON).
 * Thread contract: a schema may be shared; a grammar and a vocab belong to one
 * thread at a time (the vocab is read-only after init and may be shared).
 */
#ifndef MZ_GRAMMAR_H
#define MZ_GRAMMAR_H

#include "mzcache.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#define MZ_JGRAM_MAX_WS 20        /* whitespace bytes in one gap */
#define MZ_JGRAM_MAX_DEPTH 32     /* nesting of free-form values; schema nesting too */
#define MZ_JSCHEMA_MAX_NODES 4096
#define MZ_JSCHEMA_MAX_LITERAL 65536 /* bytes of enum/const/key literals in all */

typedef struct mz_jschema mz_jschema;
typedef struct mz_jgram mz_jgram;
typedef struct mz_jvocab mz_jvocab;

/* Compiles a JSON Schema (the "schema" object of a json_schema
 * response_format). Supported: type (one or an array), properties,
 * required, additionalProperties (false, or absent), items, minItems,
 * maxItems, enum, const, anyOf (branches must start with different
 * characters, e.g. a string and null), and the annotations title,
 * description, $schema, $comment, default, examples. Anything else is refused.
 * NULL on refusal with a message naming the keyword in err[0, errlen). */
mz_jschema *mz_jschema_read(const cJSON *schema, char *err, size_t errlen);
/* {"type": "json_object"}: any JSON object. */
mz_jschema *mz_jschema_any_object(void);
void mz_jschema_free(mz_jschema *s);

/* A grammar at the start of a document; NULL when out of memory. */
mz_jgram *mz_jgram_init(const mz_jschema *s);
void mz_jgram_free(mz_jgram *g);
/* Feeds bytes: true and advanced if all of them continue a valid document;
 * false and unchanged otherwise. */
bool mz_jgram_feed(mz_jgram *g, const char *bytes, size_t n);
/* Whether mz_jgram_feed would accept them (the state is not changed). */
bool mz_jgram_check(const mz_jgram *g, const char *bytes, size_t n);
/* Whether the document fed so far is complete (end of generation allowed). */
bool mz_jgram_complete(const mz_jgram *g);
/* The fewest bytes that complete the document from here (0: complete), for
 * closing it within a token budget: some byte always lowers it by one (a
 * closing quote or bracket, a digit, the next byte of a required key), and
 * none lowers it by more. */
size_t mz_jgram_close_len(const mz_jgram *g);
/* mz_jgram_check, and when the bytes are allowed, the close length after them. */
bool mz_jgram_check_close(const mz_jgram *g, const char *bytes, size_t n, size_t *close_len);

/* The bytes of every token of m, and which tokens end generation. Control
 * tokens other than those (their text never reaches the answer) and empty
 * tokens are never allowed. NULL when out of memory. */
mz_jvocab *mz_jvocab_init(const mz_model_t *m);
void mz_jvocab_free(mz_jvocab *v);

/* A grammar over a vocabulary, as an mz_sampler filter.
 *
 * Budget: with a budget (mz_jfilter_set_budget: the text tokens the answer
 * may still take, from max_tokens and the context's room), a token is
 * allowed only if the document can still be completed in the tokens left
 * after it (its close length at most budget - 1; once a document cannot
 * be, only tokens that shorten its close length). Every token is at least
 * a byte, so an answer that starts within its budget ends as a complete
 * document, and one cut by max_tokens is still valid JSON. `budget_bound`
 * records that the budget refused a token the grammar allowed: the answer's
 * shape was decided by its length limit. A zeroed filter (or one from
 * mz_jfilter_make) has no budget. */
typedef struct mz_jfilter {
    mz_jgram *g;
    const mz_jvocab *v;
    unsigned char first_ok[256];  /* per first byte: 0 unknown, 1 allowed, 2 refused */
    bool budgeted;                /* false: no limit, budget unused */
    size_t budget;                /* text tokens left, this one included */
    size_t close_now;             /* close length of g (valid while close_known) */
    bool close_known;
    bool budget_bound;
} mz_jfilter;

/* A filter at the start of g's document with no budget. */
mz_jfilter mz_jfilter_make(mz_jgram *g, const mz_jvocab *v);
/* From now on at most n_tokens more text tokens (this one included). */
void mz_jfilter_set_budget(mz_jfilter *f, size_t n_tokens);
/* Forgets what the filter learnt about the grammar's current position (the
 * first-byte verdicts and the close length), as after every accepted token. */
void mz_jfilter_forget_position(mz_jfilter *f);
/* mz_token_filter_fn: token t may come next (user is an mz_jfilter). */
bool mz_jfilter_token_ok(void *user, mz_token t);
/* Advances the grammar over token t (sampled through the filter); false if
 * t was not allowed (the grammar is then unchanged). A text token takes one
 * from the budget. */
bool mz_jfilter_accept(mz_jfilter *f, mz_token t);

#endif /* MZ_GRAMMAR_H */
