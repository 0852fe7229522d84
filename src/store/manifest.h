/*
 * manifest.h — the session manifest of the session store (src/store): what a
 * new process needs to resume a conversation, and nothing it could be
 * fooled by.
 *
 * One file per session, <store>/<id>.mzs, replaced atomically (written to
 * <id>.mzs.tmp, fsync per policy, rename, fsync of the directory), so after a
 * kill at any instant the store holds the previous or the next manifest.
 *
 * Format (little endian, version 1):
 *   0   magic "MZSESS\0\1" (8)          8   header bytes u32 (= 168)
 *   12  flags u32 (bit 0: a tail)       16  model id u64 (XXH64 of the GGUF file)
 *   24  tokenizer id u64                32  codec char[16] (NUL padded, "raw" or "q8")
 *   48  n_layer u32                     52  chunk tokens u32 (= 256)
 *   56  chunk bytes u64 (one layer's chunk, raw)
 *   64  created ns u64 (CLOCK_REALTIME)  72 updated ns u64
 *   80  n_tokens u64                    88  n_chunks u64 (full chunks stored)
 *   96  name char[64] (NUL padded; the session id)
 *   160 tail positions u64 (0 without a tail)
 *   168 tokens: n_tokens x i32
 *   then n_chunks x n_layer records (chunk-major) of 56 bytes:
 *       off, ext, len, seq, hash u64; split u32; reserved u32 (0)
 *       (the tag is implied: layer << 32 | chunk)
 *   with a tail, n_layer more records for chunk n_chunks: the partly filled
 *   last chunk as mz_session_sync found it, valid for its first `tail
 *   positions` positions (1..255), which end before the last token
 *   (n_chunks * 256 + tail <= n_tokens - 1, and n_chunks = (n_tokens-1)/256),
 *   so a resume recomputes n_tokens - n_chunks*256 - tail tokens, at least
 *   one (its logits), instead of the whole partial chunk.
 *   Record lengths: raw chunk_bytes; q8 (the memory codec's format, its own
 *   header included) 1..chunk_bytes. Tail records are always raw.
 *   last 8: XXH64 of everything before it (seed 0x6d7a73657373)
 * The reader is strict: any size, range, padding, ordering or checksum
 * defect is refused with a named reason; it never guesses.
 */
#ifndef MZ_MANIFEST_H
#define MZ_MANIFEST_H

#include "../core/core.h"
#include "../io/swapfile.h"

#include <stddef.h>
#include <stdint.h>

#define MZ_MANIFEST_HDR_BYTES 168u
#define MZ_MANIFEST_REC_BYTES 56u
#define MZ_MANIFEST_MAX_TOKENS (1u << 22)   /* 4M tokens: far beyond any context */
#define MZ_MANIFEST_MAX_LAYERS 512u

typedef struct mz_manifest {
    uint64_t model_id, tok_id;
    char codec[16];
    uint32_t n_layer;
    uint64_t chunk_bytes;
    uint64_t created_ns, updated_ns;
    char name[MZ_SESSION_ID_MAX + 1];
    size_t n_tokens;
    int32_t *tokens;           /* [n_tokens] */
    size_t n_chunks;
    size_t tail_pos;           /* positions of chunk n_chunks in its tail records; 0: none */
    mz_swap_slot_info *recs;   /* [(n_chunks + (tail_pos > 0)) * n_layer], chunk-major; tag filled in */
} mz_manifest;


/* Bytes of the encoding of m. */
MZ_INTERNAL size_t mz_manifest_size(const mz_manifest *m);
/* Encodes m into buf (cap >= mz_manifest_size). */
MZ_INTERNAL MZ_NODISCARD mz_status mz_manifest_encode(const mz_manifest *m, void *buf, size_t cap);
/* Parses and checks buf; on success m owns tokens/recs (mz_manifest_clear).
 * MZ_E_CORRUPT (bad checksum, truncated) or MZ_E_FORMAT (well-formed bytes
 * that break a rule) with the reason in the error message. */
MZ_INTERNAL MZ_NODISCARD mz_status mz_manifest_decode(const void *buf, size_t n, mz_manifest *m);
MZ_INTERNAL void mz_manifest_clear(mz_manifest *m);

#endif /* MZ_MANIFEST_H */
