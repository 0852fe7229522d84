/*
 * jschema_check.h — an independent JSON Schema validator for the subset
 * src/grammar/ supports, written from the JSON Schema rules rather than from
 * the grammar, so tests and the fuzzer can check that what the grammar
 * accepts really validates. Header-only (static functions) for
 * tests/unit/test_grammar.c and tests/fuzz/fuzz_grammar.c.
 */
#ifndef MZ_JSCHEMA_CHECK_H
#define MZ_JSCHEMA_CHECK_H

#include <cjson/cJSON.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

static bool jc_type_is(const cJSON *v, const char *t)
{
    if (!strcmp(t, "string")) return cJSON_IsString(v);
    if (!strcmp(t, "number")) return cJSON_IsNumber(v);
    if (!strcmp(t, "integer")) return cJSON_IsNumber(v) && floor(v->valuedouble) == v->valuedouble;
    if (!strcmp(t, "boolean")) return cJSON_IsBool(v);
    if (!strcmp(t, "null")) return cJSON_IsNull(v);
    if (!strcmp(t, "object")) return cJSON_IsObject(v);
    if (!strcmp(t, "array")) return cJSON_IsArray(v);
    return false;
}

/* v validates against schema s (true schema / {} accept anything). */
static bool jc_valid(const cJSON *v, const cJSON *s)
{
    if (cJSON_IsTrue(s)) return true;
    if (!cJSON_IsObject(s)) return false;
    const cJSON *k;
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "type"))) {
        bool ok = false;
        if (cJSON_IsString(k)) ok = jc_type_is(v, k->valuestring);
        const cJSON *t;
        if (cJSON_IsArray(k)) cJSON_ArrayForEach(t, k) ok |= cJSON_IsString(t) && jc_type_is(v, t->valuestring);
        if (!ok) return false;
    }
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "enum"))) {
        bool ok = false;
        const cJSON *e;
        cJSON_ArrayForEach(e, k) ok |= cJSON_Compare(v, e, true);
        if (!ok) return false;
    }
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "const")) && !cJSON_Compare(v, k, true)) return false;
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "anyOf"))) {
        bool ok = false;
        const cJSON *e;
        cJSON_ArrayForEach(e, k) ok |= jc_valid(v, e);
        if (!ok) return false;
    }
    if (cJSON_IsObject(v)) {
        const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
        const cJSON *addl = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
        const cJSON *m;
        cJSON_ArrayForEach(m, v) {
            const cJSON *ps = props ? cJSON_GetObjectItemCaseSensitive(props, m->string) : NULL;
            if (ps && !jc_valid(m, ps)) return false;
            if (!ps && cJSON_IsFalse(addl)) return false;
        }
        if ((k = cJSON_GetObjectItemCaseSensitive(s, "required"))) {
            const cJSON *q;
            cJSON_ArrayForEach(q, k) if (!cJSON_GetObjectItemCaseSensitive(v, q->valuestring)) return false;
        }
    }
    if (cJSON_IsArray(v)) {
        const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
        int n = cJSON_GetArraySize(v);
        const cJSON *m;
        if (items) cJSON_ArrayForEach(m, v) if (!jc_valid(m, items)) return false;
        if ((k = cJSON_GetObjectItemCaseSensitive(s, "minItems")) && n < k->valuedouble) return false;
        if ((k = cJSON_GetObjectItemCaseSensitive(s, "maxItems")) && n > k->valuedouble) return false;
    }
    return true;
}

#endif /* MZ_JSCHEMA_CHECK_H */
