/*
 * completion.h — a completion's generation state, shared by completion.c
 * (the endpoints, generation, streaming) and logprobs.c (log-probabilities
 * recorded per token and written into responses). Not for use outside
 * src/server/.
 */
#ifndef MZ_SERVER_COMPLETION_H
#define MZ_SERVER_COMPLETION_H

#include "server/server_impl.h"
#include "server/request.h"

#include "grammar/grammar.h"

typedef struct gen_state {
    mz_server_t *srv;
    struct MHD_Connection *conn;
    bool chat, stream;
    char id[48];
    long created;
    mz_sampler_t *smp;
    mz_generator_t *gen;           /* the library's generation loop, one step per gen_step */
    mz_detok_t *dt;
    int n_vocab;
    int max_tokens;
    char *stops[SRV_MAX_STOPS];
    int n_stops;
    size_t max_stop;
    /* generated text; [0, emitted) already sent */
    char *text;
    size_t len, cap, emitted;
    bool done, failed;
    bool client_gone;              /* the generation stopped: its client closed the connection */
    const char *finish;
    /* SSE output waiting to be copied into MHD's buffer */
    char *out;
    size_t out_len, out_off, out_cap;
    bool role_sent, final_sent, done_sent;
    bool holds_gate;
    srv_timings tm;
    double t0, t_gen0;
    /* OpenAI extras (set up by gen_setup_openai) */
    bool want_lp;                  /* logprobs of each token added to the text */
    int n_top;                     /* alternatives per token */
    struct lp_entry *lp;           /* [0, lp_sent) already sent */
    size_t n_lp, cap_lp, lp_sent;
    bool include_usage;            /* a usage-only chunk before [DONE] */
    mz_jschema *schema;            /* structured output: grammar over the vocabulary */
    mz_jvocab *vocab;
    mz_jfilter jf;
} gen_state;

/* One generated token's log-probabilities (the model's log-softmax of the raw
 * logits: before penalties, bias, temperature and the grammar). */
struct lp_entry {
    mz_token t;
    float lp;
    size_t offset;                 /* where its text starts in gen_state.text */
    int n_top;
    mz_token_logprob top[SRV_MAX_TOP_LOGPROBS];
};

/* Logprobs of token t (just sampled from logits), its text starting at
 * offset; false when out of memory. */
bool srv_lp_record(gen_state *g, const float *logits, mz_token t, size_t offset);
/* Adds "logprobs" to a choice: the entries not sent yet whose text starts
 * before limit (tokens after a stop string are left out), or null when the
 * request did not ask. Chat: {"content": [...]}; completions: OpenAI's legacy
 * {"tokens", "token_logprobs", "top_logprobs", "text_offset"}. */
void srv_add_logprobs(cJSON *choice, gen_state *g, size_t limit);

#endif /* MZ_SERVER_COMPLETION_H */
