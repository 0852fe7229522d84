/*
 * Structured output (src/grammar/): the schema reader's refusals, the byte
 * grammar on hand-written documents (valid and invalid JSON, with and
 * without schemas), and generation with the real model under the grammar for
 * greedy and sampled settings: every answer must parse (cJSON) and validate
 * (tests/unit/jschema_check.h, written from the JSON Schema rules), and with
 * a token budget be complete when the budget ends. The shortest completion
 * (mz_jgram_close_len) is checked at every prefix of the hand-written
 * documents by its definition, not its formula.
 */
#include "grammar/grammar.h"
#include "jclose_check.h"
#include "jschema_check.h"
#include "testutil.h"

static mz_jschema *schema_of(const char *json, char *err, size_t errlen)
{
    cJSON *j = cJSON_Parse(json);
    if (!j) {
        snprintf(err, errlen, "test: bad schema JSON");
        return NULL;
    }
    mz_jschema *s = mz_jschema_read(j, err, errlen);
    cJSON_Delete(j);
    return s;
}

/* 1: the whole document is accepted and complete; 0: refused somewhere or incomplete. */
static int doc_ok(const mz_jschema *s, const char *doc)
{
    mz_jgram *g = mz_jgram_init(s);
    if (!g) return -1;
    int ok = mz_jgram_feed(g, doc, strlen(doc)) && mz_jgram_complete(g);
    mz_jgram_free(g);
    return ok;
}

/* Byte by byte, as single-byte tokens would come. */
static int doc_ok_bytewise(const mz_jschema *s, const char *doc)
{
    mz_jgram *g = mz_jgram_init(s);
    int ok = 1;
    for (const char *p = doc; *p && ok; p++) ok = mz_jgram_feed(g, p, 1);
    ok = ok && mz_jgram_complete(g);
    mz_jgram_free(g);
    return ok;
}

/* The shortest completion at every prefix of doc, by its definition
 * (jclose_check.h); the document it completes must parse and validate (sj;
 * NULL: json_object). */
static void check_close_len(const mz_jschema *s, const cJSON *sj, const char *doc)
{
    size_t n = strlen(doc);
    for (size_t i = 0; i <= n; i++) {
        mz_jgram *g = mz_jgram_init(s);
        if (!g || !mz_jgram_feed(g, doc, i)) {
            CHECK_MSG(0, "prefix %zu of %s refused", i, doc);
            mz_jgram_free(g);
            return;
        }
        char out[4096];
        memcpy(out, doc, i);
        size_t len = i;
        const char *why = jclose_walk(g, out, &len, sizeof out);
        out[len] = '\0';
        CHECK_MSG(!why, "closing prefix %zu of %s: %s (at %s)", i, doc, why, out);
        if (!why) {
            cJSON *d = cJSON_Parse(out);
            CHECK_MSG(d && (sj ? jc_valid(d, sj) : cJSON_IsObject(d)), "closed prefix %zu of %s: %s is not valid", i,
                      doc, out);
            cJSON_Delete(d);
        }
        mz_jgram_free(g);
    }
}

static void expect_docs(const char *schema, const char *const *good, const char *const *bad)
{
    char err[256];
    mz_jschema *s = schema ? schema_of(schema, err, sizeof err) : mz_jschema_any_object();
    CHECK_MSG(s != NULL, "schema %s: %s", schema ? schema : "json_object", err);
    if (!s) return;
    cJSON *sj = schema ? cJSON_Parse(schema) : NULL;
    for (; good && *good; good++) {
        CHECK_MSG(doc_ok(s, *good) == 1, "should accept %s under %s", *good, schema ? schema : "json_object");
        CHECK_MSG(doc_ok_bytewise(s, *good) == 1, "bytewise: should accept %s", *good);
        cJSON *d = cJSON_Parse(*good);
        CHECK_MSG(d != NULL, "test data: %s is not JSON", *good);
        if (d && sj) CHECK_MSG(jc_valid(d, sj), "test data: %s does not validate", *good);
        cJSON_Delete(d);
        check_close_len(s, sj, *good);
    }
    for (; bad && *bad; bad++) CHECK_MSG(doc_ok(s, *bad) == 0, "should refuse %s under %s", *bad, schema ? schema : "json_object");
    cJSON_Delete(sj);
    mz_jschema_free(s);
}

static void expect_refused(const char *schema, const char *word)
{
    char err[256] = "";
    mz_jschema *s = schema_of(schema, err, sizeof err);
    CHECK_MSG(s == NULL, "should refuse schema %s", schema);
    CHECK_MSG(strstr(err, word) != NULL, "message for %s should name %s: %s", schema, word, err);
    mz_jschema_free(s);
}

/* ---- generation with the real model ---------------------------------------------------------- */

/* budget: the filter closes the document within max_tokens (0: no budget,
 * the answer may be cut). *closed: the grammar's document is complete. */
static int generate(mz_model_t *m, const mz_jvocab *v, const char *schema_json, const char *prompt,
                    mz_sampler_params sp, int max_tokens, bool budget, char *out, size_t cap, bool *complete,
                    bool *closed)
{
    char err[256];
    mz_jschema *s = schema_json ? schema_of(schema_json, err, sizeof err) : mz_jschema_any_object();
    if (!s) return -1;
    mz_ctx_params cp = mz_ctx_params_default();
    cp.n_ctx = 1024;
    mz_ctx_t *c = NULL;
    mz_sampler_t *smp = NULL;
    mz_detok_t *dt = NULL;
    mz_jfilter f = mz_jfilter_make(mz_jgram_init(s), v);
    if (budget) mz_jfilter_set_budget(&f, (size_t)max_tokens);
    int rc = -1;
    size_t len = 0;
    if (!f.g || mz_ctx_init(m, &cp, &c) || mz_sampler_init(&sp, &smp) || mz_detok_init(m, &dt)) goto out;
    mz_sampler_set_filter(smp, mz_jfilter_token_ok, &f);
    mz_chat_msg msg = {"user", prompt};
    char text[2048];
    size_t need = 0;
    if (mz_chat_format(m, &msg, 1, true, text, sizeof text, &need)) goto out;
    mz_token toks[1024];
    size_t nt = 0;
    if (mz_tokenize(m, text, strlen(text), true, true, toks, 1024, &nt) || mz_prefill(c, toks, nt)) goto out;
    *complete = false;
    for (int i = 0; i < max_tokens; i++) {
        mz_token t = mz_sampler_sample(smp, mz_ctx_logits(c), mz_model_n_vocab(m));
        if (t < 0 || !mz_jfilter_accept(&f, t)) goto out;
        mz_sampler_accept(smp, t);
        if (mz_token_is_eog(m, t)) {
            *complete = true;
            break;
        }
        len += mz_detok_push(dt, t, false, out + len, cap - 1 - len);
        if (mz_prefill(c, &t, 1)) goto out;
    }
    len += mz_detok_flush(dt, out + len, cap - 1 - len);
    out[len] = '\0';
    if (*complete) CHECK_MSG(mz_jgram_complete(f.g), "end of generation allowed before the document was complete");
    *closed = mz_jgram_complete(f.g);
    rc = 0;
out:
    mz_detok_free(dt);
    mz_sampler_free(smp);
    mz_ctx_free(c);
    mz_jgram_free(f.g);
    mz_jschema_free(s);
    return rc;
}

static void real_model_tests(void)
{
    const char *path = t_real_model_path();
    if (!path) {
        t_skip_part("generation", "models/SmolLM2-135M-Instruct.Q4_1.gguf absent (make model)");
        return;
    }
    mz_model_t *m = NULL;
    if (mz_model_load(path, NULL, &m)) {
        CHECK_MSG(0, "cannot load %s: %s", path, mz_last_error());
        return;
    }
    mz_jvocab *v = mz_jvocab_init(m);
    CHECK(v != NULL);
    static const char *const schemas[] = {
        NULL, /* json_object */
        "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\"},"
        "\"pets\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":3}},"
        "\"required\":[\"name\",\"age\",\"pets\"],\"additionalProperties\":false}",
        "{\"type\":\"object\",\"properties\":{\"color\":{\"enum\":[\"red\",\"green\",\"blue\"]},"
        "\"ok\":{\"type\":\"boolean\"},\"score\":{\"type\":\"number\"},\"note\":{\"type\":[\"string\",\"null\"]},"
        "\"pos\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"number\"},\"y\":{\"type\":\"number\"}},"
        "\"required\":[\"x\",\"y\"]}},\"required\":[\"color\",\"ok\",\"score\",\"note\",\"pos\"]}",
    };
    static const char *const prompts[] = {
        "Describe a cat as a JSON object.",
        "Invent a person with some pets. Answer in JSON.",
        "Pick a color and a position. Answer in JSON.",
    };
    size_t min_close[3];
    for (int si = 0; si < 3; si++) {
        char err[256];
        mz_jschema *s = schemas[si] ? schema_of(schemas[si], err, sizeof err) : mz_jschema_any_object();
        mz_jgram *g = s ? mz_jgram_init(s) : NULL;
        CHECK(g != NULL);
        min_close[si] = g ? mz_jgram_close_len(g) : 0;
        mz_jgram_free(g);
        mz_jschema_free(s);
    }
    /* {}, {"name":"","age":0,"pets":[]}, {"color":"red","ok":true,"score":0,"note":"","pos":{"x":0,"y":0}} */
    CHECK(min_close[0] == 2 && min_close[1] == 29 && min_close[2] == 65);
    for (int si = 0; si < 3; si++)
        for (int mode = 0; mode < 3; mode++) {
            mz_sampler_params sp = mz_sampler_params_default();
            if (mode == 0) sp.temperature = 0.0f;
            if (mode == 1) { sp.temperature = 1.0f; sp.top_k = 0; sp.top_p = 1.0f; sp.min_p = 0.0f; sp.seed = 7; }
            if (mode == 2) { sp.temperature = 0.7f; sp.top_k = 20; sp.top_p = 0.9f; sp.seed = 11; }
            /* 200 tokens without a budget (an answer cut there may be
             * incomplete, as documented), then budgets that force the
             * document closed: its shortest completion plus 2, and 12. */
            for (int bi = 0; bi < 3; bi++) {
            char out[8192];
            bool complete = false, closed = false;
            int max_tokens = bi == 0 ? 200 : bi == 2 ? 12 : (int)min_close[si] + 2;
            if (bi == 2 && (size_t)max_tokens < min_close[si]) continue; /* cannot be closed in 12 */
            int rc = generate(m, v, schemas[si], prompts[si], sp, max_tokens, bi > 0, out, sizeof out, &complete,
                              &closed);
            CHECK_MSG(rc == 0, "schema %d mode %d: generation failed: %s", si, mode, mz_last_error());
            if (rc) continue;
            fprintf(stderr, "schema %d mode %d budget %d (%s): %s\n", si, mode, bi ? max_tokens : 0,
                    complete ? "complete" : "max tokens", out);
            if (bi > 0) CHECK_MSG(closed, "schema %d mode %d: not closed within a budget of %d tokens: %s", si,
                                  mode, max_tokens, out);
            if (!closed) continue;
            cJSON *d = cJSON_Parse(out);
            CHECK_MSG(d != NULL, "schema %d mode %d: not JSON: %s", si, mode, out);
            if (d && schemas[si]) {
                cJSON *sj = cJSON_Parse(schemas[si]);
                CHECK_MSG(jc_valid(d, sj), "schema %d mode %d: does not validate: %s", si, mode, out);
                cJSON_Delete(sj);
            }
            if (d && !schemas[si]) CHECK(cJSON_IsObject(d));
            cJSON_Delete(d);
            }
        }
    mz_jvocab_free(v);
    mz_model_free(m);
}

int main(void)
{
    /* json_object: any object, bounded whitespace, nothing after it */
    {
        static const char *const good[] = {
            "{}", "{\"a\":1}", "{ \"a\" : [1, 2.5e-3, -0, true, false, null, \"x\\n\\u00e9\"] }",
            "{\"k\":{\"n\":{\"m\":[]}},\"k\":\"dup keys are JSON\"}", "{\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\":0}",
            "{\n  \"a\": 1,\n  \"b\": \"two\"\n}", NULL};
        static const char *const bad[] = {
            "[]", "1", "\"s\"", "{", "{\"a\":}", "{\"a\" 1}", "{\"a\":1,}", "{,}", "{\"a\":01}",
            "{\"a\":1.}", "{\"a\":.5}", "{\"a\":1e}", "{\"a\":tru}", "{\"a\":nul}", "{\"a\":True}",
            "{\"a\":\"\\x\"}", "{\"a\":\"\\u12g4\"}", "{\"a\":\"\x01\"}", "{\"a\":\"\xc0\xaf\"}",
            "{\"a\":\"\xed\xa0\x80\"}", "{\"a\":\"\xf4\x90\x80\x80\"}", "{\"a\":\"\x80\"}", "{} ", "{}{}",
            "{\"a\":[1,]}", "{\"a\":[,1]}", "{\"a\":\"unterminated}",
            "{                     }", /* 21 spaces: over the whitespace bound */
            "{\"a\":12345678901234567890}", /* 20 digits */
            "{\"a\":1e100}", NULL};
        expect_docs(NULL, good, bad);
        /* a leading space is a gap of its own: allowed up to the bound */
        mz_jschema *s = mz_jschema_any_object();
        mz_jgram *g = mz_jgram_init(s);
        CHECK(!mz_jgram_complete(g));
        CHECK(mz_jgram_check(g, "  {", 3));
        CHECK(mz_jgram_feed(g, "{\"a\"", 4));
        CHECK(!mz_jgram_feed(g, "}", 1)); /* refused bytes leave the state as it was */
        CHECK(mz_jgram_feed(g, ":[", 2));
        CHECK(!mz_jgram_complete(g));
        CHECK(mz_jgram_feed(g, "]}", 2));
        CHECK(mz_jgram_complete(g));
        CHECK(!mz_jgram_check(g, "\n", 1));
        mz_jgram_free(g);
        /* free-form nesting is bounded, so the depth cannot run away */
        char deep[200] = "{\"a\":";
        for (int i = 0; i < 40; i++) strcat(deep, "[");
        g = mz_jgram_init(s);
        CHECK(!mz_jgram_feed(g, deep, strlen(deep)));
        mz_jgram_free(g);
        mz_jschema_free(s);
    }

    /* objects: properties in order, required ones present, none beyond */
    {
        const char *sch = "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},"
                          "\"age\":{\"type\":\"integer\"},\"nick\":{\"type\":\"string\"},\"tags\":{\"type\":\"array\","
                          "\"items\":{\"type\":\"string\"},\"minItems\":1,\"maxItems\":2}},"
                          "\"required\":[\"name\",\"tags\"],\"additionalProperties\":false}";
        static const char *const good[] = {
            "{\"name\":\"Al\",\"tags\":[\"x\"]}", "{\"name\":\"Al\",\"age\":3,\"nick\":\"a\",\"tags\":[\"x\",\"y\"]}",
            "{ \"name\" : \"\" , \"age\" : -12 , \"tags\" : [ \"\" ] }", "{\"name\":\"Al\",\"nick\":\"n\",\"tags\":[\"t\"]}",
            NULL};
        static const char *const bad[] = {
            "{}", "{\"name\":\"Al\"}", "{\"tags\":[\"x\"],\"name\":\"Al\"}", "{\"name\":\"Al\",\"tags\":[]}",
            "{\"name\":\"Al\",\"tags\":[\"a\",\"b\",\"c\"]}", "{\"name\":1,\"tags\":[\"x\"]}",
            "{\"name\":\"Al\",\"age\":1.5,\"tags\":[\"x\"]}", "{\"name\":\"Al\",\"age\":1e3,\"tags\":[\"x\"]}",
            "{\"name\":\"Al\",\"tags\":[\"x\"],\"extra\":1}", "{\"name\":\"Al\",\"name\":\"B\",\"tags\":[\"x\"]}",
            "{\"nam\":\"Al\",\"tags\":[\"x\"]}", "{\"names\":\"Al\",\"tags\":[\"x\"]}", "{\"name\":\"Al\",\"tags\":[1]}",
            "{\"name\":\"Al\",\"tags\":[\"x\"]", "{\"name\":\"Al\",\"tags\":[\"x\"],}", NULL};
        expect_docs(sch, good, bad);
    }

    /* no type, but keywords of arrays: read as an array schema (fuzz_grammar
     * closed "[]" under {"minItems":2}, which does not validate) */
    {
        static const char *const good[] = {"[1,2]", "[\"a\",{},null]", NULL};
        static const char *const bad[] = {"[]", "[1]", "{}", "1", NULL};
        expect_docs("{\"minItems\":2}", good, bad);
        static const char *const good2[] = {"[]", "[true]", NULL};
        static const char *const bad2[] = {"[1,2]", "{}", NULL};
        expect_docs("{\"maxItems\":1}", good2, bad2);
    }

    /* keys sharing prefixes; enums with prefixes of each other; const; nesting */
    {
        const char *sch = "{\"properties\":{\"a\":{\"enum\":[1,12,\"x\",null,true,[1,2],{\"k\":\"v\"}]},"
                          "\"ab\":{\"const\":\"fixed\"},\"abc\":{\"type\":\"object\",\"properties\":{\"d\":{"
                          "\"type\":\"array\",\"items\":{\"type\":[\"number\",\"null\"]}}},\"required\":[\"d\"]}},"
                          "\"required\":[\"abc\"]}";
        static const char *const good[] = {
            "{\"abc\":{\"d\":[]}}", "{\"a\":1,\"abc\":{\"d\":[1.5,null,-2e-5]}}", "{\"a\":12,\"ab\":\"fixed\",\"abc\":{\"d\":[0]}}",
            "{\"a\":\"x\",\"abc\":{\"d\":[]}}", "{\"a\":null,\"abc\":{\"d\":[]}}", "{\"a\":[1,2],\"abc\":{\"d\":[]}}",
            "{\"a\":{\"k\":\"v\"},\"abc\":{\"d\":[]}}", "{\"a\":true,\"abc\":{\"d\":[]}}", NULL};
        static const char *const bad[] = {
            "{\"a\":2,\"abc\":{\"d\":[]}}", "{\"a\":123,\"abc\":{\"d\":[]}}", "{\"a\":\"y\",\"abc\":{\"d\":[]}}",
            "{\"a\":[1, 2],\"abc\":{\"d\":[]}}", "{\"ab\":\"fixe\",\"abc\":{\"d\":[]}}", "{\"abc\":{}}",
            "{\"abc\":{\"d\":[\"s\"]}}", "{\"a\":false,\"abc\":{\"d\":[]}}", NULL};
        expect_docs(sch, good, bad);
    }

    /* scalar roots, numbers and integers at the end of the document */
    {
        static const char *const gi[] = {"0", "-7", "123456789012345678", NULL};
        static const char *const bi[] = {"-", "1.0", "01", "1e2", "1234567890123456789", "", NULL};
        expect_docs("{\"type\":\"integer\"}", gi, bi);
        static const char *const gn[] = {"0.5", "-1e-7", "3E+12", "42", NULL};
        static const char *const bn[] = {"1.", "-", "1e", "1e+", "+1", "1e123", "NaN", NULL};
        expect_docs("{\"type\":\"number\"}", gn, bn);
        static const char *const gb[] = {"true", "false", NULL};
        static const char *const bb[] = {"null", "tru", "truee", "1", NULL};
        expect_docs("{\"type\":\"boolean\"}", gb, bb);
        static const char *const gs[] = {"\"\"", "\"a\\\"b\"", "\"\\ud83d\\ude00\"", NULL};
        static const char *const bs[] = {"\"", "\"a\"b", "a", "\"\\ud83d\"", "\"\\ude00\"", "\"\\ud83dx\"",
                                         "\"\\ud83d\\u0041\"", NULL};
        expect_docs("{\"type\":\"string\"}", gs, bs);
        static const char *const ga[] = {"{\"x\":\"s\"}", "null", "[1,\"a\"]", NULL};
        static const char *const ba[] = {"{\"x\":1}", "\"s\"", NULL};
        expect_docs("{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"string\"}},\"required\":[\"x\"]},"
                    "{\"type\":\"null\"},{\"type\":\"array\"}]}", ga, ba);
        static const char *const gany[] = {"1", "[{}]", "\"s\"", "null", NULL};
        expect_docs("{}", gany, NULL);
    }

    /* the reader refuses what it does not enforce, naming it */
    expect_refused("{\"type\":\"string\",\"pattern\":\"^a\"}", "pattern");
    expect_refused("{\"type\":\"string\",\"format\":\"date\"}", "format");
    expect_refused("{\"type\":\"integer\",\"minimum\":3}", "minimum");
    expect_refused("{\"$ref\":\"#/$defs/x\"}", "$ref");
    /* no type, but "required": an object schema, and here one whose required
     * property is not listed (fuzz_grammar closed {"na":0} under it) */
    expect_refused("{\"required\":[\"name\"]}", "required");
    expect_refused("{\"type\":\"object\",\"additionalProperties\":{\"type\":\"string\"}}", "additionalProperties");
    expect_refused("{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[\"b\"]}", "required");
    expect_refused("{\"oneOf\":[{\"type\":\"string\"}]}", "oneOf");
    expect_refused("{\"anyOf\":[{\"type\":\"string\"},{\"enum\":[\"a\"]}]}", "anyOf");
    expect_refused("{\"type\":[\"object\",\"object\",\"array\"],\"properties\":{\"a\":{\"pattern\":\"x\"}}}", "pattern");
    expect_refused("{\"type\":\"strin\"}", "type");
    expect_refused("{\"type\":\"string\",\"enum\":[1]}", "enum");
    expect_refused("{\"enum\":[]}", "enum");
    expect_refused("{\"enum\":[{\"a\":1}],\"properties\":{\"a\":{\"type\":\"string\"}}}", "properties");
    expect_refused("{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", "minItems");
    expect_refused("[1]", "object");
    {
        char deep[4096] = "";
        for (int i = 0; i < 40; i++) strcat(deep, "{\"type\":\"array\",\"items\":");
        strcat(deep, "{}");
        for (int i = 0; i < 40; i++) strcat(deep, "}");
        expect_refused(deep, "deeper");
    }

    real_model_tests();
    return t_done("test_grammar");
}
