/*
 * schema.c — reads a JSON Schema (a cJSON tree from an untrusted request)
 * into the nodes jgram.c walks. The supported subset is listed at
 * mz_jschema_read in grammar.h; any other keyword is refused by name rather
 * than ignored, because ignoring one would let the answer fail validation.
 *
 * Limits (each refusal says which): nesting MZ_JGRAM_MAX_DEPTH,
 * MZ_JSCHEMA_MAX_NODES nodes, MZ_JSCHEMA_MAX_LITERAL bytes of literals.
 */
#include "grammar/grammar_impl.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct rd {
    mz_jschema *s;
    char *err;
    size_t errlen;
    bool failed;
} rd;

static void *s_alloc(mz_jschema *s, size_t n)
{
    if (s->n_allocs == s->cap_allocs) {
        size_t cap = s->cap_allocs ? s->cap_allocs * 2 : 32;
        void **a = realloc(s->allocs, cap * sizeof *a);
        if (!a) return NULL;
        s->allocs = a;
        s->cap_allocs = cap;
    }
    void *p = calloc(1, n ? n : 1);
    if (p) s->allocs[s->n_allocs++] = p;
    return p;
}

void mz_jschema_free(mz_jschema *s)
{
    if (!s) return;
    for (size_t i = 0; i < s->n_allocs; i++) free(s->allocs[i]);
    free(s->allocs);
    free(s);
}

static void fail(rd *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(rd *r, const char *fmt, ...)
{
    if (r->failed) return;
    r->failed = true;
    if (!r->err || !r->errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err, r->errlen, fmt, ap);
    va_end(ap);
}

static jnode *new_node(rd *r, jkind kind)
{
    if (r->s->n_nodes >= MZ_JSCHEMA_MAX_NODES) {
        fail(r, "schema: more than %d nodes", MZ_JSCHEMA_MAX_NODES);
        return NULL;
    }
    jnode *n = s_alloc(r->s, sizeof *n);
    if (!n) {
        fail(r, "schema: out of memory");
        return NULL;
    }
    r->s->n_nodes++;
    n->kind = kind;
    n->max_items = UINT32_MAX;
    /* Shortest values: "", 0, {} and [] (objects with required properties,
     * arrays with minItems, literals and alternatives set theirs when built). */
    n->min_len = kind == J_NUMBER || kind == J_INTEGER || kind == J_ANY ? 1 : 2;
    switch (kind) {
    case J_OBJECT: jfirst_add(n->first, '{'); break;
    case J_ARRAY: jfirst_add(n->first, '['); break;
    case J_STRING: jfirst_add(n->first, '"'); break;
    case J_NUMBER:
    case J_INTEGER:
        jfirst_add(n->first, '-');
        for (int c = '0'; c <= '9'; c++) jfirst_add(n->first, (unsigned char)c);
        break;
    case J_ANY: {
        const char *f = "{[\"-0123456789tfn";
        for (const char *p = f; *p; p++) jfirst_add(n->first, (unsigned char)*p);
        break;
    }
    default: break;
    }
    return n;
}

static int cmp_lit(const char *a, size_t la, const char *b, size_t lb)
{
    int c = memcmp(a, b, la < lb ? la : lb);
    return c ? c : (la > lb) - (la < lb);
}

/* A literal node from serialized values (taken over: freed with the schema). */
static jnode *lit_node(rd *r, char **vals, size_t *lens, int n)
{
    jnode *node = new_node(r, J_LITERALS);
    if (!node) return NULL;
    node->lits = s_alloc(r->s, (size_t)n * sizeof *node->lits);
    node->lit_len = s_alloc(r->s, (size_t)n * sizeof *node->lit_len);
    if (!node->lits || !node->lit_len) {
        fail(r, "schema: out of memory");
        return NULL;
    }
    /* Insertion sort (n is small), dropping duplicates. */
    int m = 0;
    for (int i = 0; i < n; i++) {
        int j = m;
        while (j > 0 && cmp_lit(vals[i], lens[i], node->lits[j - 1], node->lit_len[j - 1]) < 0) j--;
        if (j > 0 && !cmp_lit(vals[i], lens[i], node->lits[j - 1], node->lit_len[j - 1])) continue;
        memmove(node->lits + j + 1, node->lits + j, (size_t)(m - j) * sizeof *node->lits);
        memmove(node->lit_len + j + 1, node->lit_len + j, (size_t)(m - j) * sizeof *node->lit_len);
        node->lits[j] = vals[i];
        node->lit_len[j] = lens[i];
        m++;
    }
    node->n_lits = m;
    node->min_len = MZ_JGRAM_LEN_MAX;
    for (int i = 0; i < m; i++) {
        jfirst_add(node->first, (unsigned char)node->lits[i][0]);
        if (node->lit_len[i] < node->min_len) node->min_len = node->lit_len[i];
    }
    return node;
}

/* Well-formed UTF-8 (as the grammar's strings and the detokenizer demand). */
static bool utf8_ok(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned char c = p[i];
        size_t need = c < 0x80 ? 1 : (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3 : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
        if (!need || i + need > n) return false;
        for (size_t k = 1; k < need; k++) {
            unsigned lo = 0x80, hi = 0xBF;
            if (k == 1 && c == 0xE0) lo = 0xA0;
            if (k == 1 && c == 0xED) hi = 0x9F;
            if (k == 1 && c == 0xF0) lo = 0x90;
            if (k == 1 && c == 0xF4) hi = 0x8F;
            if (p[i + k] < lo || p[i + k] > hi) return false;
        }
        i += need;
    }
    return true;
}

/* Serializes v into the schema's memory; NULL on failure (reported). */
static char *serialize(rd *r, const cJSON *v, size_t *len)
{
    char *txt = cJSON_PrintUnformatted(v);
    if (!txt) {
        fail(r, "schema: out of memory");
        return NULL;
    }
    size_t n = strlen(txt);
    if (!utf8_ok((const unsigned char *)txt, n)) {
        cJSON_free(txt);
        fail(r, "schema: enum, const and property names must be valid UTF-8");
        return NULL;
    }
    if (n == 0 || r->s->lit_bytes + n > MZ_JSCHEMA_MAX_LITERAL) {
        cJSON_free(txt);
        fail(r, "schema: literals (enum, const, property names) longer than %d bytes in all", MZ_JSCHEMA_MAX_LITERAL);
        return NULL;
    }
    char *copy = s_alloc(r->s, n + 1);
    if (!copy) {
        cJSON_free(txt);
        fail(r, "schema: out of memory");
        return NULL;
    }
    memcpy(copy, txt, n + 1);
    cJSON_free(txt);
    r->s->lit_bytes += n;
    *len = n;
    return copy;
}

mz_jschema *mz_jschema_new(void)
{
    mz_jschema *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    rd r = {s, NULL, 0, false};
    jnode *any = new_node(&r, J_ANY);
    jnode *obj = new_node(&r, J_OBJECT);
    jnode *arr = new_node(&r, J_ARRAY);
    static const char *const words[] = {"false", "null", "true"};
    char *vals[3];
    size_t lens[3];
    for (int i = 0; i < 3; i++) {
        lens[i] = strlen(words[i]);
        vals[i] = s_alloc(s, lens[i] + 1);
        if (vals[i]) memcpy(vals[i], words[i], lens[i] + 1);
        else r.failed = true;
    }
    jnode *tfn = r.failed ? NULL : lit_node(&r, vals, lens, 3);
    if (!any || !obj || !arr || !tfn) {
        mz_jschema_free(s);
        return NULL;
    }
    obj->any_keys = true;
    arr->items = any;
    s->any = any;
    s->any_obj = obj;
    s->any_arr = arr;
    s->tfn = tfn;
    s->n_nodes = 0; /* the building blocks do not count against the limit */
    return s;
}

mz_jschema *mz_jschema_any_object(void)
{
    mz_jschema *s = mz_jschema_new();
    if (s) s->root = s->any_obj;
    return s;
}

/* ---- the reader ------------------------------------------------------------------ */

static const char *const k_annotations[] = {"title", "description", "$schema", "$comment", "default", "examples", NULL};
static const char *const k_known[] = {"type", "properties", "required", "additionalProperties", "items",
                                      "minItems", "maxItems", "enum", "const", "anyOf", NULL};

static bool in_list(const char *const *l, const char *k)
{
    for (; *l; l++)
        if (!strcmp(*l, k)) return true;
    return false;
}

static const jnode *read_node(rd *r, const cJSON *j, int depth);

static bool json_type_matches(const cJSON *v, const char *type)
{
    if (!strcmp(type, "string")) return cJSON_IsString(v);
    if (!strcmp(type, "number")) return cJSON_IsNumber(v);
    if (!strcmp(type, "integer")) return cJSON_IsNumber(v) && floor(v->valuedouble) == v->valuedouble;
    if (!strcmp(type, "boolean")) return cJSON_IsBool(v);
    if (!strcmp(type, "null")) return cJSON_IsNull(v);
    if (!strcmp(type, "object")) return cJSON_IsObject(v);
    if (!strcmp(type, "array")) return cJSON_IsArray(v);
    return false;
}

static bool valid_type_name(const char *t)
{
    static const char *const names[] = {"string", "number", "integer", "boolean", "null", "object", "array", NULL};
    return in_list(names, t);
}

static const jnode *read_literals(rd *r, const cJSON *j, const cJSON *types)
{
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "enum");
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(j, "const");
    if (e && c) {
        fail(r, "schema: give \"enum\" or \"const\", not both");
        return NULL;
    }
    int n = 1;
    if (e) {
        if (!cJSON_IsArray(e) || (n = cJSON_GetArraySize(e)) < 1) {
            fail(r, "schema: \"enum\" must be a non-empty array");
            return NULL;
        }
        if (n > 1024) {
            fail(r, "schema: \"enum\" has more than 1024 values");
            return NULL;
        }
    }
    char **vals = s_alloc(r->s, (size_t)n * sizeof *vals);
    size_t *lens = s_alloc(r->s, (size_t)n * sizeof *lens);
    if (!vals || !lens) {
        fail(r, "schema: out of memory");
        return NULL;
    }
    int i = 0;
    const cJSON *v = c;
    if (e) v = e->child;
    for (; v && i < n; v = e ? v->next : NULL, i++) {
        if (types) {
            bool ok = false;
            const cJSON *t;
            if (cJSON_IsString(types)) ok = json_type_matches(v, types->valuestring);
            else cJSON_ArrayForEach(t, types) ok |= cJSON_IsString(t) && json_type_matches(v, t->valuestring);
            if (!ok) {
                fail(r, "schema: an \"%s\" value does not match \"type\"", e ? "enum" : "const");
                return NULL;
            }
        }
        if (cJSON_IsNumber(v) && !isfinite(v->valuedouble)) {
            fail(r, "schema: \"%s\" holds a number JSON cannot write", e ? "enum" : "const");
            return NULL;
        }
        if (!(vals[i] = serialize(r, v, &lens[i]))) return NULL;
    }
    return lit_node(r, vals, lens, i);
}

static bool read_count(rd *r, const cJSON *j, const char *key, uint32_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!v) return true;
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble <= 1e6) || floor(v->valuedouble) != v->valuedouble) {
        fail(r, "schema: \"%s\" must be an integer in [0, 1000000]", key);
        return false;
    }
    *out = (uint32_t)v->valuedouble;
    return true;
}

static const jnode *read_object(rd *r, const cJSON *j, int depth)
{
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(j, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(j, "required");
    const cJSON *addl = cJSON_GetObjectItemCaseSensitive(j, "additionalProperties");
    if (addl && !cJSON_IsBool(addl)) {
        fail(r, "schema: \"additionalProperties\" as a schema is not supported (use false)");
        return NULL;
    }
    if (props && !cJSON_IsObject(props)) {
        fail(r, "schema: \"properties\" must be an object");
        return NULL;
    }
    if (req && !cJSON_IsArray(req)) {
        fail(r, "schema: \"required\" must be an array of property names");
        return NULL;
    }
    bool closed = addl && cJSON_IsFalse(addl);
    if (!props && !closed) {
        if (req && cJSON_GetArraySize(req) > 0) {
            fail(r, "schema: \"required\" names properties that \"properties\" does not list");
            return NULL;
        }
        return r->s->any_obj;
    }
    jnode *n = new_node(r, J_OBJECT);
    if (!n) return NULL;
    int np = props ? cJSON_GetArraySize(props) : 0;
    n->n_props = np;
    n->props = s_alloc(r->s, (size_t)np * sizeof *n->props);
    n->next_req = s_alloc(r->s, (size_t)(np + 1) * sizeof *n->next_req);
    if (!n->props || !n->next_req) {
        fail(r, "schema: out of memory");
        return NULL;
    }
    int i = 0;
    const cJSON *p;
    if (props) cJSON_ArrayForEach(p, props) {
        cJSON *name = cJSON_CreateString(p->string ? p->string : "");
        if (!name) {
            fail(r, "schema: out of memory");
            return NULL;
        }
        n->props[i].lit = serialize(r, name, &n->props[i].len);
        cJSON_Delete(name);
        if (!n->props[i].lit) return NULL;
        for (int k = 0; k < i; k++)
            if (n->props[k].len == n->props[i].len && !memcmp(n->props[k].lit, n->props[i].lit, n->props[i].len)) {
                fail(r, "schema: property \"%s\" is listed twice", p->string);
                return NULL;
            }
        if (!(n->props[i].val = read_node(r, p, depth + 1))) return NULL;
        i++;
    }
    if (req) {
        const cJSON *q;
        cJSON_ArrayForEach(q, req) {
            if (!cJSON_IsString(q)) {
                fail(r, "schema: \"required\" must be an array of property names");
                return NULL;
            }
            int k = 0;
            while (k < np && (!props || strcmp(cJSON_GetArrayItem(props, k)->string, q->valuestring))) k++;
            if (k == np) {
                fail(r, "schema: \"required\" names \"%.64s\", which \"properties\" does not list", q->valuestring);
                return NULL;
            }
            n->props[k].required = true;
        }
    }
    n->next_req[np] = np;
    for (int k = np - 1; k >= 0; k--) n->next_req[k] = n->props[k].required ? k : n->next_req[k + 1];
    /* {"a":v,"b":w}: the required properties, the first one's comma taken
     * by the opening brace; {} without any. */
    size_t props_len = jnode_required_tail(n, 0);
    n->min_len = jlen_add(props_len, props_len ? 1 : 2);
    return n;
}

static const jnode *read_typed(rd *r, const cJSON *j, const char *type, int depth)
{
    if (!strcmp(type, "object")) return read_object(r, j, depth);
    if (!strcmp(type, "array")) {
        jnode *n = new_node(r, J_ARRAY);
        if (!n) return NULL;
        const cJSON *items = cJSON_GetObjectItemCaseSensitive(j, "items");
        n->items = items ? read_node(r, items, depth + 1) : r->s->any;
        if (!n->items) return NULL;
        if (!read_count(r, j, "minItems", &n->min_items) || !read_count(r, j, "maxItems", &n->max_items)) return NULL;
        if (n->min_items > n->max_items) {
            fail(r, "schema: \"minItems\" is above \"maxItems\"");
            return NULL;
        }
        /* [v,v]: the brackets and min_items shortest items, commas between. */
        n->min_len = n->min_items ? jlen_add(jlen_items(n->min_items, n->items->min_len), 1) : 2;
        return n;
    }
    if (!strcmp(type, "string")) return new_node(r, J_STRING);
    if (!strcmp(type, "number")) return new_node(r, J_NUMBER);
    if (!strcmp(type, "integer")) return new_node(r, J_INTEGER);
    char *vals[2];
    size_t lens[2];
    if (!strcmp(type, "boolean")) {
        vals[0] = "false", lens[0] = 5;
        vals[1] = "true", lens[1] = 4;
        return lit_node(r, vals, lens, 2);
    }
    if (!strcmp(type, "null")) {
        vals[0] = "null", lens[0] = 4;
        return lit_node(r, vals, lens, 1);
    }
    fail(r, "schema: unknown \"type\" \"%.32s\"", type);
    return NULL;
}

/* An alternative of nodes told apart by their first byte. */
static const jnode *alt_node(rd *r, const jnode **alts, int n)
{
    if (n == 1) return alts[0];
    jnode *a = new_node(r, J_ALT);
    if (!a) return NULL;
    /* Flatten nested alternatives so the first byte picks a leaf at once. */
    int total = 0;
    for (int i = 0; i < n; i++) total += alts[i]->kind == J_ALT ? alts[i]->n_alts : 1;
    a->alts = s_alloc(r->s, (size_t)total * sizeof *a->alts);
    if (!a->alts) {
        fail(r, "schema: out of memory");
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        int m = alts[i]->kind == J_ALT ? alts[i]->n_alts : 1;
        for (int k = 0; k < m; k++) {
            const jnode *x = alts[i]->kind == J_ALT ? alts[i]->alts[k] : alts[i];
            for (int b = 0; b < 32; b++)
                if (a->first[b] & x->first[b]) {
                    fail(r, "schema: \"anyOf\"/\"type\" alternatives must start with different characters "
                            "(e.g. a string and null; not two objects, or a number and an integer)");
                    return NULL;
                }
            for (int b = 0; b < 32; b++) a->first[b] |= x->first[b];
            a->alts[a->n_alts++] = x;
            if (a->n_alts == 1 || x->min_len < a->min_len) a->min_len = x->min_len;
        }
    }
    return a;
}

static const jnode *read_node(rd *r, const cJSON *j, int depth)
{
    if (depth > MZ_JGRAM_MAX_DEPTH) {
        fail(r, "schema: nested deeper than %d levels", MZ_JGRAM_MAX_DEPTH);
        return NULL;
    }
    if (cJSON_IsTrue(j)) return r->s->any;
    if (!cJSON_IsObject(j)) {
        fail(r, "schema: a schema must be an object");
        return NULL;
    }
    const cJSON *k;
    cJSON_ArrayForEach(k, j) {
        if (!k->string) continue;
        if (!in_list(k_known, k->string) && !in_list(k_annotations, k->string)) {
            fail(r, "schema: keyword \"%.64s\" is not supported", k->string);
            return NULL;
        }
    }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(j, "type");
    const cJSON *any_of = cJSON_GetObjectItemCaseSensitive(j, "anyOf");
    bool has_lit = cJSON_GetObjectItemCaseSensitive(j, "enum") || cJSON_GetObjectItemCaseSensitive(j, "const");
    if (type) {
        bool ok = cJSON_IsString(type) && valid_type_name(type->valuestring);
        if (cJSON_IsArray(type)) {
            const cJSON *t;
            ok = cJSON_GetArraySize(type) > 0;
            cJSON_ArrayForEach(t, type) ok &= cJSON_IsString(t) && valid_type_name(t->valuestring);
        }
        if (!ok) {
            fail(r, "schema: \"type\" must be one of string, number, integer, boolean, null, object, array (or an array of them)");
            return NULL;
        }
    }
    if (any_of) {
        if (type || has_lit || cJSON_GetObjectItemCaseSensitive(j, "properties") || cJSON_GetObjectItemCaseSensitive(j, "items")) {
            fail(r, "schema: \"anyOf\" cannot be combined with type, enum, const, properties or items here");
            return NULL;
        }
        int n = cJSON_GetArraySize(any_of);
        if (!cJSON_IsArray(any_of) || n < 1 || n > 16) {
            fail(r, "schema: \"anyOf\" must be an array of 1 to 16 schemas");
            return NULL;
        }
        const jnode *alts[16];
        int i = 0;
        const cJSON *a;
        cJSON_ArrayForEach(a, any_of) if (!(alts[i++] = read_node(r, a, depth + 1))) return NULL;
        return alt_node(r, alts, n);
    }
    if (has_lit) {
        /* The literals are generated as they are: other constraints would
         * have to hold for them too, and are not checked here. */
        static const char *const structural[] = {"properties", "required", "additionalProperties", "items",
                                                 "minItems", "maxItems", NULL};
        for (const char *const *k2 = structural; *k2; k2++)
            if (cJSON_GetObjectItemCaseSensitive(j, *k2)) {
                fail(r, "schema: \"enum\"/\"const\" cannot be combined with \"%s\"", *k2);
                return NULL;
            }
        return read_literals(r, j, type);
    }
    if (!type) {
        /* Without a type, a keyword of objects or arrays still binds the values
         * of that kind, so the schema is read as that kind (a subset of what
         * it allows); "any" would let an object lack a required property or
         * an array fall short of minItems. */
        if (cJSON_GetObjectItemCaseSensitive(j, "properties") || cJSON_GetObjectItemCaseSensitive(j, "additionalProperties") ||
            cJSON_GetObjectItemCaseSensitive(j, "required"))
            return read_typed(r, j, "object", depth);
        if (cJSON_GetObjectItemCaseSensitive(j, "items") || cJSON_GetObjectItemCaseSensitive(j, "minItems") ||
            cJSON_GetObjectItemCaseSensitive(j, "maxItems"))
            return read_typed(r, j, "array", depth);
        return r->s->any;
    }
    if (cJSON_IsString(type)) return read_typed(r, j, type->valuestring, depth);
    /* A type array: one node per type; "integer" is dropped beside "number". */
    bool has_number = false;
    const cJSON *t;
    cJSON_ArrayForEach(t, type) has_number |= !strcmp(t->valuestring, "number");
    const jnode *alts[8];
    int n = 0;
    cJSON_ArrayForEach(t, type) {
        if (has_number && !strcmp(t->valuestring, "integer")) continue;
        bool dup = false;
        for (const cJSON *u = type->child; u != t; u = u->next) dup |= !strcmp(u->valuestring, t->valuestring);
        if (dup) continue;
        if (n == 8) break;
        if (!(alts[n++] = read_typed(r, j, t->valuestring, depth))) return NULL;
    }
    return alt_node(r, alts, n);
}

mz_jschema *mz_jschema_read(const cJSON *schema, char *err, size_t errlen)
{
    if (err && errlen) err[0] = '\0';
    mz_jschema *s = mz_jschema_new();
    if (!s) {
        if (err && errlen) snprintf(err, errlen, "schema: out of memory");
        return NULL;
    }
    rd r = {s, err, errlen, false};
    s->root = schema ? read_node(&r, schema, 0) : NULL;
    if (!s->root) {
        if (!r.failed) fail(&r, "schema: missing");
        mz_jschema_free(s);
        return NULL;
    }
    return s;
}
