/*
 * grammar_impl.h — the compiled schema shared by schema.c (which builds it)
 * and jgram.c (which walks it). Internal to src/grammar/.
 */
#ifndef MZ_GRAMMAR_IMPL_H
#define MZ_GRAMMAR_IMPL_H

#include "grammar/grammar.h"

#include <stdint.h>

typedef enum jkind {
    J_ANY,        /* any JSON value (free-form) */
    J_OBJECT,     /* props, or any keys when any_keys */
    J_ARRAY,      /* items */
    J_STRING,
    J_NUMBER,
    J_INTEGER,
    J_LITERALS,   /* one of lits (enum, const, true/false, null) */
    J_ALT         /* alts, told apart by their first byte */
} jkind;

typedef struct jnode jnode;

typedef struct jprop {
    char *lit;           /* the key as a JSON string literal, quotes included */
    size_t len;
    const jnode *val;
    bool required;
} jprop;

struct jnode {
    jkind kind;
    /* J_OBJECT */
    bool any_keys;       /* keys are any strings, values any JSON */
    int n_props;
    jprop *props;
    int *next_req;       /* [i]: first required index >= i, n_props if none (n_props + 1 entries) */
    /* J_ARRAY */
    const jnode *items;
    uint32_t min_items, max_items;
    /* J_LITERALS: sorted by bytes, no duplicates */
    int n_lits;
    char **lits;
    size_t *lit_len;
    /* J_ALT */
    int n_alts;
    const jnode **alts;
    uint8_t first[32];   /* bytes a value of this node can start with */
    size_t min_len;      /* bytes of its shortest value (saturates at MZ_JGRAM_LEN_MAX) */
};

/* Lengths of shortest completions saturate here: no budget of tokens is
 * this large, and the sums of nested minimums cannot overflow. */
#define MZ_JGRAM_LEN_MAX ((size_t)1 << 40)

static inline size_t jlen_add(size_t a, size_t b)
{
    return a + b < MZ_JGRAM_LEN_MAX ? a + b : MZ_JGRAM_LEN_MAX;
}

/* Object node n's required properties from index `from` on, each written
 * with a comma before it, its key, a colon and its shortest value. */
static inline size_t jnode_required_tail(const jnode *n, int from)
{
    size_t len = 0;
    for (int k = from; k < n->n_props; k++)
        if (n->props[k].required) len = jlen_add(len, jlen_add(n->props[k].len + 2, n->props[k].val->min_len));
    return len;
}

/* k values of v bytes each, a comma before each: k * (v + 1), saturated. */
static inline size_t jlen_items(size_t k, size_t v)
{
    size_t each = jlen_add(v, 1);
    return k && each > MZ_JGRAM_LEN_MAX / k ? MZ_JGRAM_LEN_MAX : k * each;
}

/* Every allocation of a schema hangs off it and goes with mz_jschema_free. */
struct mz_jschema {
    const jnode *root;
    const jnode *any, *any_obj, *any_arr, *tfn; /* free-form building blocks */
    void **allocs;
    size_t n_allocs, cap_allocs;
    size_t n_nodes, lit_bytes;
};

static inline bool jfirst_has(const uint8_t *set, unsigned char b) { return set[b >> 3] >> (b & 7) & 1; }
static inline void jfirst_add(uint8_t *set, unsigned char b) { set[b >> 3] |= (uint8_t)(1u << (b & 7)); }

/* schema.c: an empty schema with the free-form nodes (root unset). */
mz_jschema *mz_jschema_new(void);

#endif /* MZ_GRAMMAR_IMPL_H */
