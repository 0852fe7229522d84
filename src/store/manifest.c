/*
 * manifest.c — encoder and strict reader of session manifests (format in
 * manifest.h). The reader is fuzzed by tests/fuzz/fuzz_manifest.c.
 */
#define _GNU_SOURCE
#include "manifest.h"

#include "../io/io.h"

#include <stdlib.h>
#include <string.h>

static const unsigned char MAGIC[8] = {'M', 'Z', 'S', 'E', 'S', 'S', 0, 1};
#define MANIFEST_SEED 0x6d7a73657373ULL
#define BLOCK 4096u

size_t mz_manifest_size(const mz_manifest *m)
{
    return MZ_MANIFEST_HDR_BYTES + m->n_tokens * 4 +
           (m->n_chunks + (m->tail_pos > 0)) * m->n_layer * MZ_MANIFEST_REC_BYTES + 8;
}

mz_status mz_manifest_encode(const mz_manifest *m, void *buf, size_t cap)
{
    size_t need = mz_manifest_size(m);
    if (cap < need) return mz_fail(MZ_E_RANGE, "manifest buffer too small");
    if (strlen(m->codec) >= sizeof m->codec || !mz_session_id_valid(m->name))
        return mz_fail(MZ_E_INVAL, "manifest: bad codec or session id");
    unsigned char *p = buf;
    memset(p, 0, MZ_MANIFEST_HDR_BYTES);
    memcpy(p, MAGIC, 8);
    mz_put_le32(p + 8, MZ_MANIFEST_HDR_BYTES);
    mz_put_le32(p + 12, m->tail_pos ? 1u : 0u);
    mz_put_le64(p + 16, m->model_id);
    mz_put_le64(p + 24, m->tok_id);
    memcpy(p + 32, m->codec, strlen(m->codec));
    mz_put_le32(p + 48, m->n_layer);
    mz_put_le32(p + 52, 256);
    mz_put_le64(p + 56, m->chunk_bytes);
    mz_put_le64(p + 64, m->created_ns);
    mz_put_le64(p + 72, m->updated_ns);
    mz_put_le64(p + 80, m->n_tokens);
    mz_put_le64(p + 88, m->n_chunks);
    memcpy(p + 96, m->name, strlen(m->name));
    mz_put_le64(p + 160, m->tail_pos);
    unsigned char *q = p + MZ_MANIFEST_HDR_BYTES;
    for (size_t i = 0; i < m->n_tokens; i++, q += 4) mz_put_le32(q, (uint32_t)m->tokens[i]);
    for (size_t i = 0; i < (m->n_chunks + (m->tail_pos > 0)) * m->n_layer; i++, q += MZ_MANIFEST_REC_BYTES) {
        const mz_swap_slot_info *r = &m->recs[i];
        mz_put_le64(q, r->off);
        mz_put_le64(q + 8, r->ext);
        mz_put_le64(q + 16, r->len);
        mz_put_le64(q + 24, r->seq);
        mz_put_le64(q + 32, r->hash);
        mz_put_le32(q + 40, r->split);
        mz_put_le32(q + 44, 0);
        mz_put_le64(q + 48, 0);
    }
    mz_put_le64(q, mz_hash64(p, (size_t)(q - p), MANIFEST_SEED));
    return MZ_OK;
}

void mz_manifest_clear(mz_manifest *m)
{
    free(m->tokens);
    free(m->recs);
    memset(m, 0, sizeof *m);
}

static int cmp_off(const void *a, const void *b)
{
    const mz_swap_slot_info *x = *(const mz_swap_slot_info *const *)a;
    const mz_swap_slot_info *y = *(const mz_swap_slot_info *const *)b;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* A char[n] field: a NUL-terminated string padded with NULs. */
static bool padded_str(const unsigned char *f, size_t n, char *out)
{
    size_t len = strnlen((const char *)f, n);
    if (len == n) return false;
    for (size_t i = len; i < n; i++)
        if (f[i]) return false;
    memcpy(out, f, len);
    out[len] = '\0';
    return true;
}

mz_status mz_manifest_decode(const void *buf, size_t n, mz_manifest *m)
{
    memset(m, 0, sizeof *m);
    const unsigned char *p = buf;
    if (n < MZ_MANIFEST_HDR_BYTES + 8) return mz_fail(MZ_E_CORRUPT, "manifest truncated (%zu bytes)", n);
    if (memcmp(p, MAGIC, 8) != 0) return mz_fail(MZ_E_CORRUPT, "not a session manifest (bad magic)");
    if (mz_get_le64(p + n - 8) != mz_hash64(p, n - 8, MANIFEST_SEED))
        return mz_fail(MZ_E_CORRUPT, "manifest checksum mismatch");
    uint32_t flags = mz_get_le32(p + 12);
    if (mz_get_le32(p + 8) != MZ_MANIFEST_HDR_BYTES || flags > 1)
        return mz_fail(MZ_E_FORMAT, "manifest: unknown header size or flags");
    m->model_id = mz_get_le64(p + 16);
    m->tok_id = mz_get_le64(p + 24);
    if (!padded_str(p + 32, 16, m->codec) || (strcmp(m->codec, "raw") != 0 && strcmp(m->codec, "q8") != 0))
        return mz_fail(MZ_E_FORMAT, "manifest: unknown codec");
    bool raw = strcmp(m->codec, "raw") == 0;
    m->n_layer = mz_get_le32(p + 48);
    if (m->n_layer == 0 || m->n_layer > MZ_MANIFEST_MAX_LAYERS)
        return mz_fail(MZ_E_FORMAT, "manifest: layer count %u out of range", m->n_layer);
    if (mz_get_le32(p + 52) != 256) return mz_fail(MZ_E_FORMAT, "manifest: chunk size is not 256 tokens");
    m->chunk_bytes = mz_get_le64(p + 56);
    if (m->chunk_bytes == 0 || m->chunk_bytes > ((uint64_t)1 << 32))
        return mz_fail(MZ_E_FORMAT, "manifest: chunk bytes out of range");
    m->created_ns = mz_get_le64(p + 64);
    m->updated_ns = mz_get_le64(p + 72);
    uint64_t nt = mz_get_le64(p + 80), nc = mz_get_le64(p + 88);
    if (nt > MZ_MANIFEST_MAX_TOKENS) return mz_fail(MZ_E_FORMAT, "manifest: too many tokens");
    /* At least one token is left to recompute, so resume always has logits. */
    if (nc > 0 && nc * 256 >= nt) return mz_fail(MZ_E_FORMAT, "manifest: more chunks than tokens");
    if (!padded_str(p + 96, 65 - 1, m->name) || !mz_session_id_valid(m->name))
        return mz_fail(MZ_E_FORMAT, "manifest: bad session id");
    uint64_t tail = mz_get_le64(p + 160);
    if (!(flags & 1) && tail != 0) return mz_fail(MZ_E_FORMAT, "manifest: reserved bytes not zero");
    if ((flags & 1) && (tail == 0 || tail > 255 || nt == 0 || nc != (nt - 1) / 256 ||
                        nc * 256 + tail > nt - 1))
        return mz_fail(MZ_E_FORMAT, "manifest: tail of %llu positions does not fit %llu tokens",
                       (unsigned long long)tail, (unsigned long long)nt);
    uint64_t nrec = (nc + (flags & 1)) * m->n_layer;
    uint64_t need = MZ_MANIFEST_HDR_BYTES + nt * 4 + nrec * MZ_MANIFEST_REC_BYTES + 8;
    if (need != n) return mz_fail(MZ_E_FORMAT, "manifest: %zu bytes, its counts say %llu", n,
                                  (unsigned long long)need);
    m->n_tokens = (size_t)nt;
    m->n_chunks = (size_t)nc;
    m->tail_pos = (size_t)tail;
    m->tokens = malloc(m->n_tokens ? m->n_tokens * 4 : 1);
    m->recs = calloc(nrec ? nrec : 1, sizeof *m->recs);
    const mz_swap_slot_info **sorted = malloc((nrec ? nrec : 1) * sizeof *sorted);
    mz_status s = MZ_OK;
    if (!m->tokens || !m->recs || !sorted) {
        s = mz_fail(MZ_E_NOMEM, "out of memory (manifest)");
        goto out;
    }
    const unsigned char *q = p + MZ_MANIFEST_HDR_BYTES;
    for (size_t i = 0; i < m->n_tokens; i++, q += 4) {
        uint32_t t = mz_get_le32(q);
        if (t > INT32_MAX) {
            s = mz_fail(MZ_E_FORMAT, "manifest: negative token id at %zu", i);
            goto out;
        }
        m->tokens[i] = (int32_t)t;
    }
    uint64_t raw_ext = BLOCK + (m->chunk_bytes + BLOCK - 1) / BLOCK * BLOCK;
    for (uint64_t i = 0; i < nrec; i++, q += MZ_MANIFEST_REC_BYTES) {
        mz_swap_slot_info *r = &m->recs[i];
        r->off = mz_get_le64(q);
        r->ext = mz_get_le64(q + 8);
        r->len = mz_get_le64(q + 16);
        r->seq = mz_get_le64(q + 24);
        r->hash = mz_get_le64(q + 32);
        r->split = mz_get_le32(q + 40);
        uint64_t chunk = i / m->n_layer, layer = i % m->n_layer;
        r->tag = layer << 32 | chunk;
        uint64_t need_ext = r->split ? BLOCK + r->len : (64 + r->len + BLOCK - 1) / BLOCK * BLOCK;
        if (mz_get_le32(q + 44) || mz_get_le64(q + 48) || r->split > 1) {
            s = mz_fail(MZ_E_FORMAT, "manifest: record %llu has bad flags or padding",
                        (unsigned long long)i);
        } else if ((raw || chunk == nc ? r->len != m->chunk_bytes
                                       : r->len == 0 || r->len > m->chunk_bytes) ||
                   r->seq == 0 || r->off % BLOCK || r->ext != need_ext ||
                   r->ext > raw_ext || r->off > ((uint64_t)1 << 48)) {
            s = mz_fail(MZ_E_FORMAT, "manifest: record of KV chunk %llu/%llu has a bad extent",
                        (unsigned long long)layer, (unsigned long long)chunk);
        }
        if (s) goto out;
        sorted[i] = r;
    }
    qsort(sorted, (size_t)nrec, sizeof *sorted, cmp_off);
    for (uint64_t i = 1; i < nrec; i++)
        if (sorted[i - 1]->off + sorted[i - 1]->ext > sorted[i]->off) {
            s = mz_fail(MZ_E_FORMAT, "manifest: records overlap at offset %llu",
                        (unsigned long long)sorted[i]->off);
            goto out;
        }
out:
    free(sorted);
    if (s) mz_manifest_clear(m);
    return s;
}
