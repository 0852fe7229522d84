/*
 * mzcache.h — the one public header of the mzcache inference engine.
 *
 * Objects:
 *   mz_model_t      weights, tokenizer and chat template of one GGUF file
 *   mz_engine_t     one model's memory system and compute: weight units, device
 *                   profile, eviction policy, compute thread pool; its sessions
 *   mz_ctx_t        one session (conversation) of an engine: its tokens, chunked
 *                   KV cache and scratch space
 *   mz_sampler_t    token sampling state (RNG, penalty history)
 *   mz_detok_t      streaming token → UTF-8 decoder (holds partial sequences)
 *
 * Conventions:
 *   - Functions that can fail return mz_status: 0 on success, < 0 on error,
 *     > 0 for "try again / degraded" results.
 *   - On error a message is available from mz_last_error() (thread-local) or,
 *     for calls on a context, from mz_ctx_errmsg(). Messages are borrowed until
 *     the next failing call on the same thread / context.
 *   - Whoever calls *_init / *_load calls the matching *_free; free functions
 *     accept NULL. Free contexts before their model.
 *   - A model may be shared by contexts on different threads; a context, a
 *     sampler and a detokenizer belong to one thread at a time.
 */
#ifndef MZCACHE_H
#define MZCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define MZ_API __attribute__((visibility("default")))
#define MZ_NODISCARD __attribute__((warn_unused_result))
#else
#define MZ_API
#define MZ_NODISCARD
#endif

#define MZ_VERSION_STRING "0.1.0"

/* Tokens per KV chunk: the unit the memory manager moves (paper §4.3). */
#define MZ_KV_CHUNK_TOKENS 256

typedef enum mz_status {
    MZ_OK = 0,
    MZ_AGAIN = 1,              /* nothing done; retry later */
    MZ_E_INVAL = -1,           /* bad argument */
    MZ_E_NOMEM = -2,           /* allocation failed */
    MZ_E_IO = -3,              /* read/write failed (errno in the message) */
    MZ_E_FORMAT = -4,          /* malformed input file or data */
    MZ_E_UNSUPPORTED = -5,     /* valid but not supported (arch, tensor type…) */
    MZ_E_CORRUPT = -6,         /* checksum mismatch: data refused */
    MZ_E_CONTEXT_FULL = -7,    /* the context has no room for more tokens */
    MZ_E_CANCELLED = -8,       /* a callback asked to stop */
    MZ_E_RANGE = -9,           /* value outside the allowed range */
} mz_status;

typedef int32_t mz_token;

typedef struct mz_model mz_model_t;
typedef struct mz_ctx mz_ctx_t;
typedef struct mz_engine mz_engine_t;
typedef struct mz_sampler mz_sampler_t;
typedef struct mz_detok mz_detok_t;

MZ_API const char *mz_status_str(mz_status s);
/* Message of the last failure on this thread ("" if none). */
MZ_API const char *mz_last_error(void);

/* ---- model ---------------------------------------------------------------- */

typedef struct mz_model_params {
    int n_threads;             /* threads that read and repack the weight blocks while the
                                  tokenizer is built; 0 = all cores; at most 8 are used.
                                  The result does not depend on it. */
    bool verbose;              /* print loading details to stderr */
    const char *chat_template; /* NULL: the family recognised in the file's template (or the
                                  architecture's when it has none); else one of "chatml",
                                  "gemma", "llama3", "mistral" (others: MZ_E_INVAL) */
} mz_model_params;

MZ_API mz_model_params mz_model_params_default(void);

/* Loads a GGUF file. On error *out is NULL and mz_last_error() says why. */
MZ_API MZ_NODISCARD mz_status mz_model_load(const char *path, const mz_model_params *p,
                                            mz_model_t **out);
MZ_API void mz_model_free(mz_model_t *m);

typedef struct mz_model_info {
    char arch[32];             /* "llama", "qwen2", "qwen3" or "gemma3" */
    char name[128];            /* general.name, "" if absent */
    char weight_type[16];      /* the matrices' type ("Q4_1"), or the file's mix ("Q4_K_M") */
    int n_layer;
    int n_embd;
    int n_head;
    int n_head_kv;
    int head_dim;
    int n_ff;
    int n_vocab;
    int n_ctx_train;
    float rope_freq_base;
    float norm_eps;
    bool tied_output;          /* output head shares token_embd */
    size_t n_params;
    size_t weight_bytes;       /* all weights as loaded */
    size_t block_bytes;        /* one transformer block's weight unit (max over blocks) */
    size_t kv_bytes_per_token; /* K+V over all layers, F16 */
    mz_token bos, eos, eot;    /* -1 when absent */
} mz_model_info;

MZ_API void mz_model_get_info(const mz_model_t *m, mz_model_info *out);

/* ---- tokenizer -------------------------------------------------------------- */

/* Tokenizes UTF-8 text. add_bos follows the model's tokenizer.ggml.add_bos_token
 * when add_special is true. parse_special: text like "<|im_start|>" becomes the
 * special token. Writes at most cap tokens; *n_out is the full count, so a
 * too-small buffer returns MZ_E_RANGE with *n_out telling the size needed. */
MZ_API MZ_NODISCARD mz_status mz_tokenize(const mz_model_t *m, const char *text, size_t len,
                                          bool add_special, bool parse_special,
                                          mz_token *out, size_t cap, size_t *n_out);

/* Raw bytes of one token (may be a partial UTF-8 sequence); NULL if out of range.
 * Borrowed for the model's lifetime. Control tokens give their text form. */
MZ_API const char *mz_token_piece(const mz_model_t *m, mz_token t, size_t *len);
MZ_API int mz_model_n_vocab(const mz_model_t *m);
MZ_API bool mz_token_is_eog(const mz_model_t *m, mz_token t); /* end of generation */

/* Streaming detokenizer: push tokens, get complete UTF-8 out; bytes of an
 * unfinished character are held until the next push. */
MZ_API MZ_NODISCARD mz_status mz_detok_init(const mz_model_t *m, mz_detok_t **out);
MZ_API void mz_detok_free(mz_detok_t *d);
/* Appends the text of token t to buf (complete characters only). Returns the
 * number of bytes written (<= cap). Special/control tokens are rendered only if
 * render_special. */
MZ_API size_t mz_detok_push(mz_detok_t *d, mz_token t, bool render_special, char *buf, size_t cap);
/* Flushes held bytes (invalid sequences become U+FFFD). */
MZ_API size_t mz_detok_flush(mz_detok_t *d, char *buf, size_t cap);

/* ---- chat templates ---------------------------------------------------------- */

typedef struct mz_chat_msg {
    const char *role;          /* "system", "user", "assistant" */
    const char *content;
} mz_chat_msg;

/* Formats messages with the model's chat template family (ChatML, Llama 3,
 * Gemma or Mistral, recognised in tokenizer.chat_template, or
 * mz_model_params.chat_template). add_assistant: end with the assistant header.
 * Returns the needed length in *n_out (without NUL); MZ_E_RANGE if cap is small;
 * MZ_E_UNSUPPORTED when the file's template is of no known family. */
MZ_API MZ_NODISCARD mz_status mz_chat_format(const mz_model_t *m, const mz_chat_msg *msgs,
                                             size_t n_msgs, bool add_assistant, char *buf,
                                             size_t cap, size_t *n_out);
/* The model's chat template family: "chatml", "llama3", "gemma", "mistral" or
 * "unknown" (mz_chat_format refuses); *from_file (may be NULL) says whether it
 * was recognised in the file's own template. */
MZ_API const char *mz_model_chat_template(const mz_model_t *m, bool *from_file);

/* The chat template applied to msgs, tokenized (BOS as mz_tokenize's
 * add_special): control tokens such as <|im_end|> come only from the
 * template; message content is text, whatever it spells, so a message cannot
 * close its own turn or open another. Writes at most cap tokens; *n_out is
 * the full count (MZ_E_RANGE when cap is short, as mz_tokenize). */
MZ_API MZ_NODISCARD mz_status mz_chat_tokenize(const mz_model_t *m, const mz_chat_msg *msgs,
                                               size_t n_msgs, bool add_assistant, mz_token *out,
                                               size_t cap, size_t *n_out);

/* ---- context ------------------------------------------------------------------ */

/* Progress of a long prefill: return false to cancel (MZ_E_CANCELLED). */
typedef bool (*mz_progress_fn)(void *user, size_t n_done, size_t n_total);

/* Where evicted KV chunks go (see mz_evict). */
typedef enum mz_kv_placement {
    MZ_KV_PLACE_AUTO = 0,               /* the hybrid swap policy decides, chunk by chunk */
    MZ_KV_PLACE_COMPRESSED = 1,         /* encoded into the in-memory compressed stack */
    MZ_KV_PLACE_STORAGE = 2,            /* raw bytes to the swap file */
    MZ_KV_PLACE_STORAGE_COMPRESSED = 3, /* encoded, to the swap file */
    MZ_KV_PLACE_MIXED = 4,              /* alternating compressed / storage, chunk by chunk */
} mz_kv_placement;

/* The stages of the hybrid swap (paper §4.3, Algorithm 1), in the order
 * eviction goes through them. */
typedef enum mz_evict_stage {
    MZ_EVICT_STAGE_NONE = 0,            /* unknown (zeroed stats) */
    MZ_EVICT_STAGE_KV_ONLY = 1,         /* KV chunks to both restore paths, kept balanced */
    MZ_EVICT_STAGE_KV_AND_W = 2,        /* weight blocks dropped, KV chunks compressed beside them */
    MZ_EVICT_STAGE_W_ONLY = 3,          /* only weight blocks left to drop */
    MZ_EVICT_STAGE_COMP_KV = 4,         /* compressed chunks move from memory to storage */
    MZ_EVICT_STAGE_DONE = 5,            /* nothing evictable left */
} mz_evict_stage;

/* How a context gives memory back and gets it back (paper §6.1). The modes
 * other than MZ_MODE_MZCACHE are the baselines, built in so that comparisons
 * run in one process; every mode is lossless: answers after mz_evict + a
 * restore are identical to never-evicted ones. The existing calls keep their
 * contracts in every mode (mz_evict frees memory the mode's way; mz_restore,
 * mz_prefill, mz_prefill_restore and mz_restore_generate bring back what is
 * needed; mz_get_mem_stats reports resident bytes truthfully).
 *   os-paging        what llama.cpp-style engines get from the OS: the blocks'
 *                    weights are read where a read-only mapping of the GGUF
 *                    file has them; mz_evict drops them with MADV_PAGEOUT /
 *                    MADV_DONTNEED + POSIX_FADV_DONTNEED and swaps KV chunks out
 *                    with MADV_PAGEOUT (to swap where there is any, e.g. zram;
 *                    with no swap, KV chunks move to a file-backed shared
 *                    mapping in swap_dir, written back and dropped). Restore is
 *                    by page faults on demand; resident bytes are measured with
 *                    mincore. Weights of a model are file-mapped while it has
 *                    os-paging contexts, so it cannot have contexts of another
 *                    mode at the same time.
 *   partial-offload  layer-granular eviction, last layer first: a layer's raw
 *                    weights are dropped (reloaded from the model file) and its
 *                    KV chunks written raw to the swap file; restore reads
 *                    everything back sequentially on one thread, then prefills.
 *   recompute        cold start: mz_evict drops every weight block and all KV
 *                    (the token list is kept); restore reloads the weights from
 *                    the model file and prefills the whole context again. */
typedef enum mz_engine_mode {
    MZ_MODE_MZCACHE = 0,
    MZ_MODE_OS_PAGING = 1,
    MZ_MODE_PARTIAL_OFFLOAD = 2,
    MZ_MODE_RECOMPUTE = 3
} mz_engine_mode;

typedef struct mz_ctx_params {
    int n_ctx;                 /* max tokens; 0 = model's training context */
    int n_threads;             /* compute threads; 0 = all cores */
    int n_batch;               /* tokens per forward step during prefill (default 64) */
    mz_progress_fn progress;   /* optional */
    void *progress_user;
    /* Elastic memory (mz_evict / mz_restore). */
    const char *kv_codec;      /* codec of compressed KV chunks: "auto" (NULL, the default:
                                  "q8", or "q8-q4r" where the device profile plans a
                                  restore of half the session's memory more than 10 %
                                  sooner with it; mz_mem_stats.codec names the one
                                  chosen), "q8" (group-wise 8-bit, 64 values a group),
                                  "q8-g32", "q8-g128", "q4" (the same at 4 bits),
                                  "q4-g32", "q4-g128", "q4r" (q4 of Hadamard-rotated head
                                  vectors), "q8-q4r" (K through q8, V through q4r),
                                  "raw" or a cachegen variant (docs/CODECS.md). Copied
                                  at init. */
    const char *swap_dir;      /* directory of the engine's swap file (created 0700, the
                                  file is removed with the engine); NULL or "" = the
                                  engine's: mz_engine_params.swap_dir, or, for the context
                                  that creates an implicit engine (mz_ctx_init), this one;
                                  default $XDG_CACHE_HOME/mzcache, else ~/.cache/mzcache.
                                  An engine has one swap file, shared by its sessions: a
                                  directory other than the engine's is MZ_E_INVAL. The file
                                  is created at the first eviction to storage. Copied. */
    mz_kv_placement kv_placement; /* default MZ_KV_PLACE_AUTO: the hybrid swap policy; the
                                     others fix one destination for every KV chunk */
    /* Eviction policy (paper §4.3–4.4). */
    const char *profile_path;  /* device profile written by `mzcache profile`; NULL or "" =
                                  $XDG_CACHE_HOME/mzcache/profile.json, else
                                  ~/.cache/mzcache/profile.json. Missing or unreadable: a
                                  built-in estimate and a warning, never an error. Read at
                                  init only. */
    mz_engine_mode mode;       /* default MZ_MODE_MZCACHE; the others are the baselines of
                                  paper §6.1 (see mz_engine_mode) */
    /* Paper ablations (eviction order): NULL = the engine's behaviour. Not a
     * stable API: see mzcache_experimental.h. Read at init only. */
    const struct mz_ctx_experimental *experimental;
} mz_ctx_params;

MZ_API mz_ctx_params mz_ctx_params_default(void);
MZ_API MZ_NODISCARD mz_status mz_ctx_init(mz_model_t *m, const mz_ctx_params *p, mz_ctx_t **out);
MZ_API void mz_ctx_free(mz_ctx_t *c);
MZ_API const char *mz_ctx_errmsg(const mz_ctx_t *c);

/* Appends tokens to the context and runs the forward pass over them. On
 * success the logits of the last token are available from mz_ctx_logits().
 * On error the context is truncated back to its length before the call. */
MZ_API MZ_NODISCARD mz_status mz_prefill(mz_ctx_t *c, const mz_token *tokens, size_t n_tokens);
/* Logits of the last processed token, n_vocab floats; borrowed until the next
 * call on c. NULL before the first prefill. */
MZ_API const float *mz_ctx_logits(const mz_ctx_t *c);
MZ_API size_t mz_ctx_n_tokens(const mz_ctx_t *c);
MZ_API size_t mz_ctx_n_ctx(const mz_ctx_t *c);
/* Tokens currently in the context (borrowed until the next call on c). */
MZ_API const mz_token *mz_ctx_tokens(const mz_ctx_t *c);
/* Drops everything after the first n_keep tokens (their KV stays). */
MZ_API MZ_NODISCARD mz_status mz_ctx_truncate(mz_ctx_t *c, size_t n_keep);
/* Length of the longest common prefix of c's tokens and tokens[0, n). */
MZ_API size_t mz_ctx_common_prefix(const mz_ctx_t *c, const mz_token *tokens, size_t n);
/* The same for two token arrays a[0, na) and b[0, nb) (a stored history, a
 * request): the one definition of "common prefix" mz_ctx_common_prefix uses. */
MZ_API size_t mz_tokens_common_prefix(const mz_token *a, size_t na, const mz_token *b, size_t nb);
/* The first half of a prefix sync (mz_ctx_sync): truncates c to the longest
 * common prefix of its tokens and tokens[0, n), at most n - 1 of them, so
 * that the caller's prefill of tokens[*n_kept, n) runs the last token again
 * and its logits are fresh. n >= 1 (MZ_E_INVAL otherwise). */
MZ_API MZ_NODISCARD mz_status mz_ctx_keep_prefix(mz_ctx_t *c, const mz_token *tokens, size_t n,
                                                 size_t *n_kept);

typedef struct mz_ctx_timings {
    double prefill_ms;         /* total time in mz_prefill for >1 token calls */
    size_t n_prefill_tokens;
    double decode_ms;          /* total time in single-token mz_prefill calls */
    size_t n_decode_tokens;
} mz_ctx_timings;
MZ_API void mz_ctx_get_timings(const mz_ctx_t *c, mz_ctx_timings *out);
MZ_API void mz_ctx_reset_timings(mz_ctx_t *c);

/* ---- elastic memory (paper §4–5) ------------------------------------------------
 *
 * A context's evictable memory is made of units: one per transformer block's
 * weights and one per (layer, 256-token KV chunk). Token embeddings, the
 * output norm and the output head are pinned. Evicting a unit really returns
 * its pages to the OS; where its bytes go depends on the policy:
 *   KV chunk      -> the in-memory compressed stack (encoded with kv_codec),
 *                    or the swap file (raw, or encoded);
 *   weight block  -> dropped (reloaded from the model file with O_DIRECT);
 *   and, once everything is evicted, compressed chunks move from memory to
 *   the swap file, the ones needed last first (CompKV).
 * Units come back on demand: mz_prefill restores each unit (blocking, in
 * forward order) just before the forward pass reads it, and never computes
 * on a unit that is not resident. mz_restore brings everything back at once.
 * Sliding-window layers (gemma3): a KV chunk the next token cannot attend to
 * goes first, raw to the swap file, and no restore reads it back until a
 * truncation (mz_ctx_truncate, mz_ctx_keep_prefix, mz_ctx_sync) makes it
 * visible again; mz_mem_stats.kv_out_of_window counts such chunks.
 *
 * Which unit goes where (kv_placement auto, the default) is the hybrid swap
 * of paper §4.3: the last layers go first (backward-out, §4.4), and KV
 * chunks are split between the compressed stack and the swap file, and weight blocks
 * dropped beside compressed chunks, so that the two restore paths (decoding
 * in memory, reading from storage) stay equally loaded wherever eviction
 * stops. The per-unit times come from the device profile (`mzcache profile`,
 * profile_path); mz_get_mem_stats reports the stage and each path's planned
 * restore time.
 *
 * Weight blocks belong to the engine (see "engine and sessions"): mz_evict
 * on a session moves that session's units, and the weight blocks only while
 * it is its engine's one session; other sessions' units stay untouched.
 * mz_engine_evict plans over every session and the weights. A session is used by one thread at a time,
 * eviction included; mz_engine_evict may come from any thread. */

typedef struct mz_evict_report {
    size_t bytes_requested;
    size_t bytes_freed;          /* net: resident bytes released minus encoded bytes added
                                    to the compressed stack */
    size_t n_kv_compressed;      /* KV chunks encoded into the compressed stack */
    size_t n_kv_stored_raw;      /* KV chunks written raw to the swap file */
    size_t n_kv_stored_compressed; /* KV chunks encoded and written to the swap file */
    size_t n_kv_compkv;          /* compressed chunks moved from memory to the swap file */
    size_t n_kv_raw_fallback;    /* of the encoded ones: chunks the codec refused (inf/NaN),
                                    kept as raw blobs instead */
    size_t n_weights_dropped;    /* weight blocks released */
    bool complete;               /* bytes_freed >= bytes_requested */
    double time_ms;
    mz_evict_stage stage;        /* stage of the last step carried out (NONE: no step) */
    /* mz_engine_evict only (zero from mz_evict): */
    size_t n_sessions;           /* sessions whose units moved */
    size_t bytes_deferred;       /* asked of sessions that were computing: they give it up
                                    between two forward steps (not counted in bytes_freed) */
} mz_evict_report;

/* Evicts units until at least nbytes of LLM memory (resident + compressed
 * bytes) are freed, or nothing evictable is left. Returns MZ_OK in both
 * cases: report->complete / bytes_freed say how much was achieved (report
 * may be NULL). On error (MZ_E_IO: the swap file could not be written, e.g.
 * ENOSPC; MZ_E_NOMEM) the unit being moved stays resident, units moved
 * before the failure stay safely evicted, and the context stays usable.
 * nbytes = 0 does nothing. Use SIZE_MAX to evict everything. */
MZ_API MZ_NODISCARD mz_status mz_evict(mz_ctx_t *c, size_t nbytes, mz_evict_report *report);

typedef struct mz_restore_report {
    size_t bytes_restored;       /* resident bytes brought back */
    size_t n_kv_decoded;         /* from the compressed stack */
    size_t n_kv_read_raw;        /* raw chunks read from the swap file */
    size_t n_kv_read_compressed; /* encoded chunks read from the swap file and decoded */
    size_t n_weights_loaded;     /* weight blocks read from the model file */
    double time_ms;
} mz_restore_report;

/* Brings every evicted unit back (blocking), in forward order (not the KV
 * chunks out of a sliding window, above). On error
 * (MZ_E_IO, MZ_E_CORRUPT: a checksum mismatch, MZ_E_NOMEM) the message names
 * the unit; units restored before it stay resident, the failing one and
 * those after it stay evicted with their data intact where it was (a retry
 * may succeed), and the context stays usable. report may be NULL. */
MZ_API MZ_NODISCARD mz_status mz_restore(mz_ctx_t *c, mz_restore_report *report);

typedef struct mz_mem_category {
    size_t total_bytes;          /* all units resident */
    size_t resident_bytes;
    size_t compressed_bytes;     /* encoded bytes in the in-memory compressed stack */
    size_t stored_bytes;         /* bytes in the swap file (raw or encoded payload) */
    size_t dropped_bytes;        /* weights released; their source is the model file */
    size_t n_units, n_resident;
} mz_mem_category;

typedef struct mz_mem_stats {
    mz_mem_category weights;     /* transformer blocks */
    mz_mem_category kv;          /* KV chunks that exist (mapped or evicted) */
    mz_mem_category kv_out_of_window; /* of them, chunks of sliding-window layers that the
                                    next token cannot attend to (gemma3): evicted first, raw
                                    to storage, and read back only when the conversation is
                                    cut back under them; all zero for other models */
    size_t pinned_bytes;         /* embeddings and output head: never evicted, not counted below */
    double remaining_pct;        /* paper §6.2: (resident + compressed bytes of evictable units)
                                    / their all-resident total, in percent (100 when empty) */
    size_t compstack_mapped_bytes; /* memory the compressed stack really maps (segments) */
    size_t swap_file_bytes;      /* size of the swap file (0 before the first store) */
    bool swap_direct;            /* the swap file uses O_DIRECT (false: buffered fallback) */
    char codec[16];              /* KV codec name (kv_codec "auto": the one chosen) */
    char placement[24];          /* KV placement name */
    /* Policy (paper §4.3–4.4). Planned restore times come from the device
     * profile's per-unit times and the units' current states; the two paths
     * run in parallel, so a restore takes about the larger of them. */
    mz_evict_stage stage;        /* where eviction stands: the stage of its next step */
    double planned_mem_ms;       /* memory path: decode every chunk in the compressed stack */
    double planned_storage_ms;   /* storage path: read every stored chunk and dropped block */
    double planned_alloc_ms;     /* fresh pages for every evicted unit */
    double unit_t_d_ms;          /* t_d: decode one KV chunk, spread over the decoding threads */
    double unit_t_rkv_ms;        /* t_rKV: read one raw KV chunk */
    double unit_t_rw_ms;         /* t_rW: read one weight block */
    double unit_t_alloc_ms;      /* fresh pages for one KV chunk */
    size_t threshold_T;          /* N_W_total * floor(t_rW / t_d) (paper §4.3) */
    bool profile_measured;       /* false: built-in estimate (no profile file) */
    char policy[16];             /* "hybrid" (kv_placement auto) or "fixed" */
    char evict_order[12];        /* "backward" (or an ablation's order: mzcache_experimental.h) */
} mz_mem_stats;

MZ_API void mz_get_mem_stats(const mz_ctx_t *c, mz_mem_stats *out);
/* "auto", "compressed", "storage", "storage-compressed", "mixed"; NULL if unknown. */
MZ_API const char *mz_kv_placement_name(mz_kv_placement p);
/* Parses those names; MZ_E_INVAL for anything else. */
MZ_API MZ_NODISCARD mz_status mz_kv_placement_parse(const char *name, mz_kv_placement *out);
/* "kv-only", "kv-and-w", "w-only", "comp-kv", "done" ("-" for NONE); NULL if unknown. */
MZ_API const char *mz_evict_stage_name(mz_evict_stage s);
/* "mzcache", "os-paging", "partial-offload", "recompute"; NULL if unknown. */
MZ_API const char *mz_engine_mode_name(mz_engine_mode m);
/* Parses those names; MZ_E_INVAL for anything else. */
MZ_API MZ_NODISCARD mz_status mz_engine_mode_parse(const char *name, mz_engine_mode *out);

/* ---- engine and sessions (paper §7, multi-context) ------------------------------
 *
 * An engine owns one model's memory system: the weight units (one per
 * transformer block, shared by every session and counted once), the device
 * profile and eviction policy, and one compute thread pool. A session is an
 * mz_ctx_t made by mz_session_create: it owns its tokens, its KV units (with
 * their compressed stack and their slots in the engine's one swap file) and
 * its scratch. Every mz_ctx_*
 * / mz_prefill* / mz_evict / mz_restore call works on a session as on any
 * context. mz_ctx_init(m, p, out) is a session of the model's engine: the
 * one made by mz_engine_create, else an implicit engine created with the
 * first such context and freed with the last.
 *
 * Weight blocks carry pin counts: a session's forward pass pins each block
 * it computes on until its step ends, and a pinned block is never evicted.
 * Sessions may exist in any number while weights are evicted and restored.
 *
 * Threads. A session is used by one thread at a time; sessions of an engine
 * may be used from different threads. Forward passes (and the restores that
 * feed them: mz_prefill, mz_prefill_restore, mz_restore_generate, mz_restore)
 * take turns on the engine's compute lock, so one session computes at a time
 * on the shared pool. mz_engine_evict, mz_engine_get_mem_stats and
 * mz_engine_sessions may be called from any thread at any time and never
 * wait for a running generation: idle sessions' units are moved at once; a
 * session that is computing is asked to give its share up between two of
 * its forward steps (report->bytes_deferred). A session is freed
 * (mz_ctx_free: its swap slots and compressed-stack items go at once) by its
 * user thread; free every session before its engine. */

typedef struct mz_engine_params {
    int n_threads;             /* compute threads of the shared pool; 0 = all cores */
    const char *swap_dir;      /* directory of the engine's one swap file, which every
                                  session stores into (a session naming another directory
                                  is MZ_E_INVAL); NULL = the default; copied */
    const char *profile_path;  /* device profile, read once (see mz_ctx_params) */
    size_t mem_budget_bytes;   /* what mz_engine_keep_budget keeps mz_engine_footprint
                                  under; 0 = no budget */
} mz_engine_params;

MZ_API mz_engine_params mz_engine_params_default(void);
/* One engine per model: MZ_E_INVAL if m already has one (explicit, or the
 * implicit engine of live mz_ctx_init contexts). */
MZ_API MZ_NODISCARD mz_status mz_engine_create(mz_model_t *m, const mz_engine_params *p,
                                               mz_engine_t **out);
/* Restores dropped weights into the model; sessions still alive are freed
 * first. NULL is fine. */
MZ_API void mz_engine_free(mz_engine_t *e);
/* A new, empty session. p->n_threads is ignored (the engine's pool computes);
 * p->mode, codec, placement and the experimental knobs apply to the session;
 * p->swap_dir must be NULL, "" or the engine's (MZ_E_INVAL otherwise). */
MZ_API MZ_NODISCARD mz_status mz_session_create(mz_engine_t *e, const mz_ctx_params *p,
                                                mz_ctx_t **out);
MZ_API mz_engine_t *mz_ctx_engine(const mz_ctx_t *c);
/* Unique within the process, never reused (1, 2, ...). */
MZ_API uint64_t mz_ctx_id(const mz_ctx_t *c);
/* The engine's last-use clock of a session (mz_session_info.last_use_ns:
 * CLOCK_MONOTONIC at the end of its last compute or restore call, its
 * creation before any): the order mz_engine_evict and mz_engine_restore
 * follow. 0 for NULL. */
MZ_API uint64_t mz_ctx_last_use_ns(const mz_ctx_t *c);

/* Evicts at least nbytes over all sessions and the shared weights, one plan
 * for all (src/mem/policy_engine.c): idle sessions' KV first, least recently
 * used first (cheaper restore first on a tie), the session used last (or one
 * that is computing) last; within a session Algorithm 1 and backward-out as
 * mz_evict; weight blocks only in the last session's Algorithm 1, where
 * dropping them balances against its own KV. Contract of mz_evict otherwise
 * (MZ_OK when nothing is left; report may be NULL). */
MZ_API MZ_NODISCARD mz_status mz_engine_evict(mz_engine_t *e, size_t nbytes,
                                              mz_evict_report *report);
/* The way back of mz_engine_evict: every session's evicted units (and the
 * weight blocks they need) come back, least recently used session first.
 * pipelined: each session through the pipelined restore (mz_prefill_restore
 * of no tokens: storage, memory and allocation paths in parallel workers);
 * report->bytes_restored is then the resident bytes gained and units counts
 * the units by path. A session that fails stays usable with its evicted
 * units intact (contract of mz_restore); the others are still restored, and
 * the status is the last failure's, the message naming the first failed
 * session (mz_ctx_id). The caller frees no session of e meanwhile; a
 * session another thread computes on is restored after its call returns.
 * report and units may be NULL. */
typedef struct mz_engine_restore_params {
    bool pipelined;
} mz_engine_restore_params;
typedef struct mz_engine_restore_units {
    size_t n_storage, n_memory; /* pipelined: units read from storage, from memory */
    size_t n_failed;            /* sessions whose restore failed */
} mz_engine_restore_units;
MZ_API MZ_NODISCARD mz_status mz_engine_restore(mz_engine_t *e, const mz_engine_restore_params *p,
                                                mz_restore_report *report,
                                                mz_engine_restore_units *units);
/* What a memory budget limits: the pinned bytes, the weights (resident and
 * compressed) once, and every session's KV (resident plus compressed, or its
 * compressed stack's mapped bytes where larger). Waits for a session another
 * thread computes on; the caller frees no session of e meanwhile. */
MZ_API size_t mz_engine_footprint(mz_engine_t *e);
typedef struct mz_budget_report {
    size_t budget_bytes;       /* mz_engine_params.mem_budget_bytes (0: none, nothing done) */
    size_t before_bytes, after_bytes; /* mz_engine_footprint before and after */
    size_t freed_bytes;        /* what the evictions reported freed */
    bool evicted;              /* it was over the budget: evictions ran */
    bool over;                 /* still over after evicting all it could */
    double time_ms;
} mz_budget_report;
/* Evicts (mz_engine_evict, a few rounds: units are whole and a compressed
 * stack may keep a segment mapped) until mz_engine_footprint is within the
 * engine's budget or nothing more moves. A failed eviction ends the rounds
 * with its status; report (may be NULL) says where it got to either way.
 * The caller frees no session of e meanwhile. */
MZ_API MZ_NODISCARD mz_status mz_engine_keep_budget(mz_engine_t *e, mz_budget_report *report);
/* The engine's memory: weights counted once, KV summed over the sessions
 * (policy fields: those of the session used last). */
MZ_API void mz_engine_get_mem_stats(mz_engine_t *e, mz_mem_stats *out);

/* Session ids, one rule for the engine's session names, the store,
 * `mzcache chat --session` and the daemon: 1..MZ_SESSION_ID_MAX bytes of
 * A-Z a-z 0-9 _ . - : @ +, not starting with '.' or '-' (an id is a file
 * name in the store, never a path). Ids starting with
 * MZ_SESSION_ANON_PREFIX belong to the daemon's anonymous conversations: no
 * client and no `chat --session` may choose one. */
#define MZ_SESSION_ID_MAX 63
#define MZ_SESSION_ANON_PREFIX "anon-"
MZ_API bool mz_session_id_valid(const char *id);
/* NULL when id may be chosen (valid, and not anonymous unless allow_anon),
 * else why not, in words for the user (a static string). */
MZ_API const char *mz_session_id_check(const char *id, bool allow_anon);

/* A session's name: its session id (the store's and the daemon's), "" until
 * one is set. Names are unique among an engine's sessions: naming a session
 * with another one's name is MZ_E_INVAL (nothing changes), as is a name
 * mz_session_id_valid refuses; NULL or "" takes the name away. Renaming a
 * session to its own name is MZ_OK. Called by the session's user thread;
 * mz_session_name's string stays valid until the next rename or the free. */
MZ_API MZ_NODISCARD mz_status mz_session_set_name(mz_ctx_t *c, const char *name);
MZ_API const char *mz_session_name(const mz_ctx_t *c);
/* The session of e named name, NULL if none (or name is NULL or ""). The
 * pointer is borrowed: the caller keeps the session alive while it uses it
 * (as for mz_session_info.ctx). */
MZ_API mz_ctx_t *mz_engine_find_session(mz_engine_t *e, const char *name);
/* Calls fn(c, user) for each of e's sessions in creation order, in one walk
 * under the engine's lock; fn returns true to go on, false to end the walk
 * there. Returns MZ_E_INVAL for a NULL e or fn (fn is never called), else
 * MZ_OK, whether fn ended the walk or not.
 *
 * Locking rule: fn runs with the engine's lock held, so session creation,
 * free and rename, find, listing and mz_engine_evict on other threads wait
 * until the walk ends. fn may read the session it is given: mz_session_name,
 * mz_session_user_data, mz_ctx_id, mz_ctx_last_use_ns, mz_ctx_n_tokens,
 * mz_ctx_tokens, mz_ctx_common_prefix. It must not call anything that takes
 * the engine's lock (it would deadlock): mz_session_create, mz_ctx_free,
 * mz_session_set_name, mz_engine_find_session, mz_engine_sessions,
 * mz_engine_n_sessions, mz_engine_for_each_session, mz_engine_get_mem_stats,
 * mz_engine_evict, mz_engine_restore, mz_engine_keep_budget; nor anything
 * that waits for a session (mz_get_mem_stats, the compute calls), whose
 * user thread may itself be waiting for the lock. To do more, collect the
 * sessions in fn and act on them after the walk (the caller keeps them
 * alive meanwhile, as for mz_session_info.ctx). */
typedef bool (*mz_session_visit_fn)(mz_ctx_t *c, void *user);
MZ_API mz_status mz_engine_for_each_session(mz_engine_t *e, mz_session_visit_fn fn, void *user);
/* A caller's data hung on a session (SQLite's client data): data is
 * returned by mz_session_user_data until replaced; free_data (may be NULL)
 * is called once on it when another pointer replaces it, and when the
 * session is freed (mz_ctx_free, or mz_engine_free freeing it) after the
 * session left the engine's list (mz_engine_find_session and
 * mz_engine_for_each_session do not see it) and before its parts go.
 * Called by the session's user thread; the engine never reads data. */
MZ_API void mz_session_set_user_data(mz_ctx_t *c, void *data, void (*free_data)(void *));
MZ_API void *mz_session_user_data(const mz_ctx_t *c);

typedef struct mz_session_info {
    mz_ctx_t *ctx;             /* borrowed: valid while the session lives */
    uint64_t id;               /* mz_ctx_id */
    char name[MZ_SESSION_ID_MAX + 1]; /* mz_session_name ("" none) */
    size_t n_tokens;
    uint64_t last_use_ns;      /* CLOCK_MONOTONIC at the end of its last compute or
                                  restore call (its creation before any) */
    bool busy;                 /* a thread is computing on it now */
    size_t kv_resident_bytes, kv_compressed_bytes, kv_stored_bytes;
    double last_ttft_ms;       /* of its last mz_prefill_restore / mz_restore_generate */
    size_t deferred_freed_bytes; /* freed between its forward steps for mz_engine_evict
                                    requests that came while it computed (total) */
} mz_session_info;
/* Writes up to cap sessions (creation order) and returns how many exist. */
MZ_API size_t mz_engine_sessions(mz_engine_t *e, mz_session_info *out, size_t cap);
MZ_API size_t mz_engine_n_sessions(mz_engine_t *e);

/* ---- sampling ----------------------------------------------------------------- */

/* The chain, applied to a copy of the logits (they are never modified):
 *   1. repeat_penalty on tokens in the last repeat_last_n accepted ones
 *      (prompt and generated; llama.cpp's multiplicative form);
 *   2. OpenAI penalties on generated tokens only (mz_sampler_accept, not
 *      _accept_prompt): logit -= count * frequency_penalty
 *      + (count > 0) * presence_penalty;
 *   3. logit_bias added (a bias <= -100 bans the token);
 *   4. the filter (mz_sampler_set_filter), if any: tokens it refuses are banned;
 *   5. greedy (temperature <= 0: highest value, ties -> lowest id), or top-k ->
 *      softmax with temperature -> top-p -> min-p -> a draw with the seeded RNG.
 * Step 4 runs lazily: the token picked without it is offered to the filter
 * and, only if refused, every token is checked and the pick made again among
 * the allowed ones (as llama.cpp's grammar sampler does), so a filter that
 * rarely refuses costs one call per token. */
typedef struct mz_sampler_params {
    float temperature;         /* <= 0: greedy (default 0.8) */
    int top_k;                 /* <= 0: off (default 40) */
    float top_p;               /* >= 1: off (default 0.95) */
    float min_p;               /* <= 0: off (default 0.05) */
    float repeat_penalty;      /* 1: off (default 1.0) */
    int repeat_last_n;         /* tokens considered by the penalty (default 64) */
    uint64_t seed;             /* default: fixed 0x5eed; same seed + params + logits
                                  -> same tokens */
    float frequency_penalty;   /* OpenAI's, in [-2, 2]; 0: off (default) */
    float presence_penalty;    /* OpenAI's, in [-2, 2]; 0: off (default) */
} mz_sampler_params;

/* Bias for one token (OpenAI logit_bias): added to the logit, in [-100, 100]. */
typedef struct mz_logit_bias {
    mz_token token;
    float bias;
} mz_logit_bias;

/* Says whether token t may come next (e.g. a grammar); called on the
 * sampler's thread during mz_sampler_sample. */
typedef bool (*mz_token_filter_fn)(void *user, mz_token t);

/* Log-probability of one token. */
typedef struct mz_token_logprob {
    mz_token token;
    float logprob;
} mz_token_logprob;

MZ_API mz_sampler_params mz_sampler_params_default(void);
/* MZ_E_INVAL (message names the parameter) for values out of range. */
MZ_API MZ_NODISCARD mz_status mz_sampler_init(const mz_sampler_params *p, mz_sampler_t **out);
MZ_API void mz_sampler_free(mz_sampler_t *s);
/* Replaces the logit biases (copied; n <= 1 << 20; a token may appear once).
 * Tokens outside the vocabulary passed to mz_sampler_sample are ignored there.
 * MZ_E_INVAL for a bias outside [-100, 100] or a negative token. */
MZ_API MZ_NODISCARD mz_status mz_sampler_set_logit_bias(mz_sampler_t *s, const mz_logit_bias *b, size_t n);
/* Sets (fn NULL: removes) the token filter, step 4 of the chain. */
MZ_API void mz_sampler_set_filter(mz_sampler_t *s, mz_token_filter_fn fn, void *user);
/* Picks the next token from logits[n_vocab]; does not modify logits. Returns
 * -1 with mz_last_error() set when there is nothing to sample from: NULL
 * sampler or logits (e.g. nothing was prefilled), n_vocab <= 0, or every token
 * banned (logit_bias, filter). */
MZ_API mz_token mz_sampler_sample(mz_sampler_t *s, const float *logits, int n_vocab);
/* Records a generated token: penalty history and OpenAI penalty counts. */
MZ_API void mz_sampler_accept(mz_sampler_t *s, mz_token t);
/* Records a prompt token: repeat_penalty history only (OpenAI's penalties
 * count sampled tokens only). */
MZ_API void mz_sampler_accept_prompt(mz_sampler_t *s, mz_token t);

/* The model's log-probabilities: log-softmax of the raw logits[n_vocab]
 * (computed in double; no temperature, penalty, bias or filter applied).
 * *lp (optional) gets token t's; top[0..n_top) (optional, n_top in 0..256) the
 * n_top most likely tokens, most likely first (ties -> lowest id).
 * MZ_E_INVAL for NULL logits, n_vocab <= 0, t outside [0, n_vocab) when lp is
 * given, or n_top out of range. */
MZ_API MZ_NODISCARD mz_status mz_logprobs(const float *logits, int n_vocab, mz_token t, float *lp,
                                          mz_token_logprob *top, int n_top);

/* ---- the generation loop -----------------------------------------------------------
 *
 * The one decode loop of the library and its programs (`mzcache run` and
 * `chat`, the server's completions, mz_restore_generate): from the context's
 * current logits, sample a token (s, or greedy when s is NULL: highest logit,
 * ties -> lowest id), feed it back, repeat until a stop condition (mz_finish).
 * Each step, in order:
 *   1. stop before sampling: cancelled() (CANCELLED), max_tokens generated
 *      (LENGTH), no context position left for another token (CTX_FULL);
 *   2. sample; on_sample(t) for every sampled token (a grammar advances here,
 *      and may refuse: ERROR); mz_sampler_accept(s, t);
 *   3. an end-of-generation token (mz_token_is_eog: EOS and the chat
 *      template's end-of-turn tokens) joins the context and ends it (EOG),
 *      neither counted nor passed to on_token: the context then ends as the
 *      chat template ends the answer, so the next turn's prompt matches it;
 *   4. otherwise the token is counted and passed to on_token (print, stream,
 *      logprobs, stop strings), then joins the context (a forward pass), also
 *      when on_token said STOP; a forward pass cancelled by the context's
 *      progress callback ends it (CANCELLED, the token not in the context);
 *   5. LENGTH as soon as max_tokens tokens are generated.
 * Step 1 guarantees room for the token sampled in step 2, EOG included. */
typedef enum mz_finish {
    MZ_FINISH_NONE = 0,        /* not finished */
    MZ_FINISH_EOG = 1,         /* an end-of-generation token was sampled */
    MZ_FINISH_LENGTH = 2,      /* max_tokens were generated */
    MZ_FINISH_CTX_FULL = 3,    /* no context position left for another token */
    MZ_FINISH_STOP = 4,        /* on_token said MZ_GEN_STOP (e.g. a stop string) */
    MZ_FINISH_CANCELLED = 5,   /* cancelled(), or the progress callback stopped a pass */
    MZ_FINISH_ERROR = 6        /* sampling, on_sample, on_token or a forward pass failed */
} mz_finish;

/* What on_token wants next. */
typedef enum mz_gen_action {
    MZ_GEN_CONTINUE = 0,
    MZ_GEN_STOP = 1,           /* this token is the last (it still joins the context) */
    MZ_GEN_FAIL = -1           /* finish with MZ_FINISH_ERROR: the step returns MZ_E_INVAL */
} mz_gen_action;

typedef struct mz_generate_params {
    size_t max_tokens;         /* tokens to generate at most; SIZE_MAX: until the context is full */
    /* Every sampled token, end of generation included; false: ERROR (the
     * step returns MZ_E_INVAL). */
    bool (*on_sample)(void *user, mz_token t);
    /* Each generated token with the raw logits it was sampled from (n_vocab of
     * them; valid during the call). */
    mz_gen_action (*on_token)(void *user, mz_token t, const float *logits, int n_vocab);
    /* Polled before each token: true stops (Ctrl-C, a server's shutdown). */
    bool (*cancelled)(void *user);
    void *user;                /* passed to the three hooks (each may be NULL) */
} mz_generate_params;

/* What a generation did. */
typedef struct mz_generate_result {
    size_t n_tokens;           /* generated (passed to on_token); EOG not counted */
    mz_finish finish;
} mz_generate_result;

/* max_tokens SIZE_MAX, no hooks. */
MZ_API mz_generate_params mz_generate_params_default(void);
/* "eog", "length", "ctx_full", "stop", "cancelled", "error" ("-" for NONE);
 * NULL if unknown. */
MZ_API const char *mz_finish_name(mz_finish f);

/* A generation stepped by its caller (a server streaming one token per
 * write). The context and sampler are borrowed; p is copied. */
typedef struct mz_generator mz_generator_t;
MZ_API MZ_NODISCARD mz_status mz_generator_init(mz_ctx_t *c, mz_sampler_t *s,
                                                const mz_generate_params *p, mz_generator_t **out);
MZ_API void mz_generator_free(mz_generator_t *g);
/* One step (at most one token). MZ_OK unless it finished with ERROR, whose
 * status it returns (mz_last_error says why); a finished generator stays
 * finished and returns MZ_OK. */
MZ_API MZ_NODISCARD mz_status mz_generator_step(mz_generator_t *g);
/* MZ_FINISH_NONE while it goes on. */
MZ_API mz_finish mz_generator_finish(const mz_generator_t *g);
MZ_API size_t mz_generator_n_tokens(const mz_generator_t *g);

/* The whole loop: steps until finished. Returns MZ_OK for every finish but
 * ERROR; res (optional) gets the count and the finish. */
MZ_API MZ_NODISCARD mz_status mz_generate(mz_ctx_t *c, mz_sampler_t *s, const mz_generate_params *p,
                                          mz_generate_result *res);

/* ---- model generation ----------------------------------------------------------- */

typedef struct mz_gen_params {
    const char *preset;        /* "smollm2-135m", "qwen3-0.6b", "llama3.2-1b", "exaone4-1.2b",
                                  "tiny-llama", "tiny-qwen3"; NULL: use fields */
    const char *arch;          /* "llama" or "qwen3" (overrides preset when set) */
    int n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_ctx_train; /* 0 = preset's */
    const char *weight_type;   /* a type ("F16", "Q8_0", "Q4_K", ...: every matrix that
                                  type) or a llama.cpp mix ("Q4_K_M", ...: its per-tensor rules) */
    const char *vocab_from;    /* GGUF file whose tokenizer is copied (required) */
    int n_swa;                 /* gemma3: sliding window in tokens (0 = preset's, else 512) */
    uint64_t seed;
    bool tied_output;          /* default from preset; true ties an untied preset */
    mz_progress_fn progress;   /* optional: n_done / n_total bytes of tensor data;
                                  return false to cancel (MZ_E_CANCELLED) */
    void *progress_user;
} mz_gen_params;

MZ_API mz_gen_params mz_gen_params_default(void);
/* Writes a deterministic random-weight GGUF v3 file. */
MZ_API MZ_NODISCARD mz_status mz_gen_model(const char *out_path, const mz_gen_params *p);


/* ---- restore_generate: pipelined restore (paper §4.2, §6.3) ---------------------
 *
 * mz_prefill restores each evicted unit on the calling thread just before the
 * forward pass reads it. mz_prefill_restore / mz_restore_generate instead
 * start three restore activities (on n_restore_threads threads) as the
 * request arrives — allocation (re-enable
 * and pre-fault unit ranges ahead of the loaders, forward order), storage
 * (weight blocks from the model file with O_DIRECT, stored KV chunks from the
 * swap file) and memory (decode the compressed stack from its top) — and the
 * forward pass begins at once on what is resident, waiting per unit (a
 * layer's weights before the layer, each KV chunk before its attention),
 * never for the whole model; where the compute and restore threads fit the
 * CPUs, the first forward step reads the chunks the memory path has not yet
 * decoded from their compressed copies instead of waiting for them. Answers
 * are identical to mz_restore followed by mz_prefill. On error (the message names the unit) the failed unit stays
 * evicted with its copy intact, the context is truncated back as mz_prefill
 * does, and a later call retries. Do not call mz_evict from another thread
 * while a request runs (eviction is an owner-thread call). */
#define MZ_RESTORE_THREADS_MAX 64

typedef struct mz_restore_params {
    int n_restore_threads;     /* threads the three restore activities run on, beside the
                                  context's compute threads: every one pre-faults; 1 = all
                                  take turns on one; 2 = decoding shares the first, the
                                  storage path has the second; 3 = one each (with 2 or 3,
                                  when one path has nothing to restore, the other gets
                                  both of those threads as two lanes); more = the
                                  first only allocates, the others each run one lane of
                                  the storage path or of decoding (split by the bytes of
                                  each). 0 = the device profile's split for this many
                                  compute threads and CPUs (docs/BENCHMARKS.md); values
                                  outside 0..MZ_RESTORE_THREADS_MAX are MZ_E_INVAL */
    /* Paper ablations (restore overlap) and test delays: NULL = the engine's
     * behaviour. Not a stable API: see mzcache_experimental.h. */
    const struct mz_restore_experimental *experimental;
} mz_restore_params;
MZ_API mz_restore_params mz_restore_params_default(void);

/* Per-request breakdown. Worker times are busy time of each activity (they
 * overlap each other and the prefill). */
typedef struct mz_restore_timings {
    double alloc_ms;           /* allocation worker: map + pre-fault */
    double storage_ms;         /* storage path: reads (+ decode of stored compressed chunks) */
    double mem_ms;             /* memory path: decoding from the compressed stack */
    double restore_ms;         /* request start -> every unit ready (wall) */
    double stall_ms;           /* the forward pass waiting for units */
    double prefill_ms;         /* the prompt's forward pass, stalls included */
    double ttft_ms;            /* request start -> first token's logits (restore_generate:
                                  the first token sampled) */
    size_t n_units, n_storage_units, n_mem_units, n_ready;
    int n_restore_threads;     /* restore threads the request used (0: nothing to restore) */
    size_t n_lent;             /* KV chunks the request's first forward step read from their
                                  compressed copies instead of waiting for them
                                  (mzcache_experimental.h, lend_kv) */
} mz_restore_timings;

/* mz_prefill with the restore pipelined (contract of mz_prefill otherwise).
 * p NULL = defaults; out (optional) receives the breakdown, which is also
 * kept for mz_get_last_restore_timings. It returns once the logits are
 * ready: chunks that only need decoding from the compressed stack may still
 * be coming back on the restore threads then (out->restore_ms is 0), and
 * the next call on the session waits for them as it needs them (a forward
 * step per unit, any other call for all of them); mz_get_last_restore_timings
 * then has the complete breakdown. */
MZ_API MZ_NODISCARD mz_status mz_prefill_restore(mz_ctx_t *c, const mz_token *tokens, size_t n,
                                                 const mz_restore_params *p,
                                                 mz_restore_timings *out);

/* Brings c to exactly tokens[0, n) with the last token's logits fresh,
 * reusing the cache: mz_ctx_keep_prefix, then mz_prefill_restore (p, out as
 * there) of tokens[*n_kept, n), so evicted units come back through the
 * restore workers. *n_kept (optional) is set once the truncation is done,
 * also when the prefill then fails. n >= 1. */
MZ_API MZ_NODISCARD mz_status mz_ctx_sync(mz_ctx_t *c, const mz_token *tokens, size_t n,
                                          const mz_restore_params *p, mz_restore_timings *out,
                                          size_t *n_kept);

/* The paper's restore_generate: mz_prefill_restore of the prompt, then the
 * generation loop (mz_generate, with sampler s and gp; NULL = defaults). The
 * session stays busy (mz_session_info.busy) from the restore to the last
 * token. res (optional) gets what mz_generate gives; out's ttft_ms is the
 * time to the first token sampled. */
MZ_API MZ_NODISCARD mz_status mz_restore_generate(mz_ctx_t *c, const mz_token *tokens, size_t n,
                                                  const mz_restore_params *p, mz_sampler_t *s,
                                                  const mz_generate_params *gp,
                                                  mz_generate_result *res, mz_restore_timings *out);

/* Breakdown of the context's last pipelined restore (zeros before the first). */
MZ_API void mz_get_last_restore_timings(const mz_ctx_t *c, mz_restore_timings *out);

/* ---- session store: durable sessions ---------------------------------------------
 *
 * A store is a per-user directory (default $XDG_STATE_HOME/mzcache, else
 * ~/.local/state/mzcache; created 0700, refused when another user owns it or
 * others can enter it) in which sessions outlive the process. A stored
 * session has a manifest <id>.mzs (model identity: XXH64 of the GGUF file's
 * bytes, metadata and tensor data; tokenizer identity; codec; token ids; the
 * record of every full 256-token KV chunk) and a data file <id>.kv (0600),
 * which is also the session's swap file. Ids: mz_session_id_valid ("engine
 * and sessions"); no path ever comes from an id.
 *
 * Write-behind: a background thread (lowest CPU and I/O priority) writes each
 * full chunk raw, checksummed, to the data file once, and keeps the manifest
 * current (replaced atomically). It writes only while the engine computes
 * nothing (a few ms after the last forward pass), so a long generation's
 * chunks are written when it ends, or by mz_session_sync. A chunk with a current copy is clean:
 * evicting it writes nothing and only releases its pages.
 *
 * Resume reads the manifest, checks model and tokenizer identity, takes the
 * stored chunks back as stored units and restores them through the
 * pipelined restore while recomputing the last, partial chunk (1..256 tokens)
 * from the stored token ids; when that is a few tokens (a stored tail: one)
 * the restore runs on as many threads as the session computes with, since
 * its forward pass only waits for it. Every chunk is verified (record header and
 * XXH64) as it is read; a chunk that fails truncates the session to the
 * chunks before it (they are recomputed instead), never answered from. */

typedef struct mz_store mz_store_t;

typedef enum mz_fsync_policy {
    MZ_FSYNC_BATCH = 0,   /* default: fsync the data file and the new manifest before each
                             rename, and the directory after it (a manifest only ever names
                             durable chunks; one fsync pair per manifest update) */
    MZ_FSYNC_NONE = 1,    /* never: survives kill -9 (the page cache keeps the writes), not a
                             power loss */
    MZ_FSYNC_ALWAYS = 2,  /* batch, plus an fsync after every chunk written */
} mz_fsync_policy;
/* "batch", "none", "always". */
MZ_API const char *mz_fsync_policy_name(mz_fsync_policy p);
MZ_API MZ_NODISCARD mz_status mz_fsync_policy_parse(const char *name, mz_fsync_policy *out);

typedef struct mz_store_params {
    const char *dir;           /* NULL/"": the default (above) */
    mz_fsync_policy fsync;
    uint64_t limit_bytes;      /* 0: no limit; else mz_store_enforce_limit keeps the store
                                  under it, oldest sessions first */
    unsigned manifest_interval_ms; /* a manifest that only adds tokens is rewritten at
                                  most this often (default 100; chunks: at once) */
    const char *codec;         /* full chunks' records: "raw" (NULL/"": the default; exact) or
                                  "q8" (about half the bytes; a chunk restored from the store
                                  holds its q8 round trip). A session stored with another
                                  codec is refused at resume (MZ_E_UNSUPPORTED). */
} mz_store_params;
MZ_API mz_store_params mz_store_params_default(void);

/* Opens (creates) the store for engine e's model; computes the model identity
 * (cached in the store by file identity: device, inode, size, mtime). */
MZ_API MZ_NODISCARD mz_status mz_store_open(mz_engine_t *e, const mz_store_params *p,
                                            mz_store_t **out);
/* Starts reading stored session `id`'s files (p's store; p NULL: the default)
 * into the page cache in the background and returns at once, so that a
 * restart can call it before mz_model_load and the resume that follows finds
 * the records there: the disk reads them while the model is read and
 * prepared. It only warms the page cache — the resume still verifies every
 * record it uses. MZ_E_INVAL for a bad id, MZ_E_IO when the store or the
 * session's files are missing (nothing started). */
MZ_API MZ_NODISCARD mz_status mz_store_prefetch(const mz_store_params *p, const char *id);
/* Detach (mz_ctx_free) every session of the store first. NULL is fine. */
MZ_API void mz_store_close(mz_store_t *st);
MZ_API const char *mz_store_dir(const mz_store_t *st);

/* Makes c (empty, or with tokens; mode mzcache) the stored session `id`,
 * replacing a stored session of that id (its manifest and data file; a chat
 * history kept beside them stays: mz_store_delete removes it). From now on
 * its full chunks are written behind and its manifest kept current until
 * mz_ctx_free, which writes the last manifest. */
MZ_API MZ_NODISCARD mz_status mz_session_store(mz_ctx_t *c, mz_store_t *st, const char *id);
/* Writes every full chunk and the manifest now (on the caller's thread). */
MZ_API MZ_NODISCARD mz_status mz_session_sync(mz_ctx_t *c);

typedef enum mz_resume_outcome {
    MZ_RESUME_FULL = 0,        /* every stored chunk restored */
    MZ_RESUME_TRUNCATED = 1,   /* a chunk failed verification: kept the chunks before it,
                                  recomputed the rest of the stored tokens */
    MZ_RESUME_LOST = 2,        /* nothing usable (manifest missing, corrupt, other model):
                                  no session made */
} mz_resume_outcome;

typedef struct mz_resume_info {
    mz_resume_outcome outcome;
    size_t n_tokens;           /* tokens of the resumed session */
    size_t n_chunks_stored;    /* full chunks the manifest named */
    size_t n_chunks_restored;  /* of those, restored from the store */
    size_t n_tokens_recomputed;
    char reason[512];          /* why truncated / lost ("" when full) */
    mz_restore_timings timings; /* the pipelined restore of the resume */
} mz_resume_info;

/* Resumes stored session `id` as a new session of the store's engine, stored
 * again under the same id. LOST: returns the error (MZ_E_CORRUPT,
 * MZ_E_FORMAT, MZ_E_UNSUPPORTED for another model or tokenizer, MZ_E_IO,
 * MZ_E_INVAL for a bad id) and *out is NULL; the stored files stay for
 * inspection until deleted. info may be NULL. */
MZ_API MZ_NODISCARD mz_status mz_session_resume(mz_store_t *st, const char *id,
                                                const mz_ctx_params *p, mz_ctx_t **out,
                                                mz_resume_info *info);
/* mz_session_resume, then tokens[0, n) prefilled in the same pipelined pass
 * (a restart's first request: its forward pass runs layer by layer as the
 * stored chunks arrive, instead of after the last one). On success the
 * session holds the stored tokens followed by tokens, with the last one's
 * logits ready for sampling, as mz_session_resume + mz_prefill would leave it
 * (info->n_tokens counts the new tokens; a truncated resume recomputes the
 * lost stored tokens, then the new ones). A new token outside the vocabulary
 * is refused (MZ_E_INVAL) before anything is read; the stored tokens and the
 * new ones must fit the context (MZ_E_CONTEXT_FULL). Errors as
 * mz_session_resume. */
MZ_API MZ_NODISCARD mz_status mz_session_resume_prefill(mz_store_t *st, const char *id,
                                                        const mz_ctx_params *p,
                                                        const mz_token *tokens, size_t n,
                                                        mz_ctx_t **out, mz_resume_info *info);

typedef struct mz_stored_session {
    char id[64];
    size_t n_tokens;           /* 0 when unreadable */
    uint64_t bytes;            /* manifest + data file, allocated */
    uint64_t updated_ns;       /* CLOCK_REALTIME of its last manifest (file mtime if unreadable) */
    bool same_model;           /* made with this store's model and tokenizer */
    bool readable;             /* the manifest passed the strict reader */
} mz_stored_session;
/* Writes up to cap stored sessions (oldest first) and returns how many exist. */
MZ_API size_t mz_store_list(mz_store_t *st, mz_stored_session *out, size_t cap);
/* Removes the session's files (manifest, data file, chat history). MZ_E_IO
 * "in use" while a process has it open; MZ_E_INVAL when none exists. */
MZ_API MZ_NODISCARD mz_status mz_store_delete(mz_store_t *st, const char *id);
/* The same without a model: in p's store directory (NULL: the default), as
 * `mzcache sessions --delete` does when no daemon runs. */
MZ_API MZ_NODISCARD mz_status mz_store_delete_id(const mz_store_params *p, const char *id);
/* Deletes the oldest sessions not in use until the store is within its
 * limit; *n_deleted may be NULL. */
MZ_API MZ_NODISCARD mz_status mz_store_enforce_limit(mz_store_t *st, size_t *n_deleted);

#ifdef __cplusplus
}
#endif
#endif /* MZCACHE_H */
