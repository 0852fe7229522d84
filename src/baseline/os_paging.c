/*
 * os_paging.c — the os-paging baseline (paper §6.1): what a llama.cpp-style
 * engine gets from the operating system. Contract in baseline.h.
 *
 * Weights. While a model has os-paging contexts, its blocks' tensors are
 * read where a read-only shared mapping of the GGUF file has them (kernels
 * use unaligned loads and the ggml block layout, so the file's bytes are used
 * as they are; GGUF aligns tensor data to 32 bytes). The model's own block
 * buffers are released and made PROT_NONE meanwhile; when the last os-paging
 * context goes, they are read back from the file and the tensors point at
 * them again. Embeddings and the output head stay in the pinned buffer.
 * Evicting a block: MADV_PAGEOUT + MADV_DONTNEED on its file range, then
 * POSIX_FADV_DONTNEED, so the page cache really drops it; it comes back by
 * page faults (reads of the model file) when the forward pass touches it.
 *
 * Large folios. The page cache holds the file in folios of up to 2 MiB (the
 * loader's reads and the faults' readahead make them), and a folio can
 * straddle two blocks or two KV slots. POSIX_FADV_DONTNEED drops only folios
 * wholly inside its range, so such a folio stayed resident: 53 MiB of
 * qwen3-0.6b's weights on the first full eviction, and, after a restore by
 * page faults, 749 of its 896 MiB of KV at 8k tokens (so the harness saw 45 %
 * or 78-80 % remaining on every run after the first). Now MADV_PAGEOUT
 * (which splits a mapped large folio that crosses the range, then reclaims
 * it) runs on file-backed KV too, and where pages of the range are still
 * resident after POSIX_FADV_DONTNEED the range widened to 2 MiB boundaries is
 * dropped as well (drop_file_range: only unmapped, clean pages go, so the
 * neighbours' mapped pages stay). Freed bytes are counted over a unit and its
 * file neighbours, since reclaiming a straddling folio frees some of theirs.
 *
 * KV. Chunks live in the context's anonymous mappings (src/kv). Evicting one:
 * MADV_PAGEOUT, which writes it to swap (a zram device where the harness set
 * one up, scripts/zram-swap.sh: zstd where the kernel has it, else lz4). With
 * no swap MADV_PAGEOUT does nothing to anonymous memory, so the chunk is
 * moved into a file-backed MAP_SHARED mapping at the same address (one
 * unlinked file per context in swap_dir, one slot per (layer, chunk)); later
 * evictions write it back with msync and drop it with MADV_PAGEOUT +
 * MADV_DONTNEED + POSIX_FADV_DONTNEED; it stays file-backed, and comes back
 * by page faults too. mz_ctx_truncate tells us (mz_ospage_kv_truncate) which
 * chunks it frees: one mapped again, even at the same address, is anonymous.
 * Stats and the eviction's freed bytes are measured with mincore, never
 * assumed; pages in zram are still RAM, so the bytes zram holds for them (the
 * compression ratio of the zram swap devices, mm_stat, applied to the chunks'
 * swapped-out bytes) count as compressed, i.e. remaining, and an eviction
 * goes on until its net freed bytes (less that) reach the request.
 *
 * Order of eviction: whole layers from the last one backward (its KV chunks,
 * last first, then its weights), like partial-offload, so that a percentage
 * means the same units in every baseline.
 */
#define _GNU_SOURCE
#include "baseline.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef MADV_PAGEOUT
#define MADV_PAGEOUT 21
#endif

/* ---- the engine's registry of its model's modes ------------------------------------------ */

/* One per engine (so one per model): which modes its sessions run, and the
 * file mapping while os-paging sessions exist. lock: a leaf. */
struct mz_ospage_model {
    pthread_mutex_t lock;
    mz_model_t *model;
    int n_ctx;                 /* sessions of any mode on the model */
    int n_os;                  /* of them, os-paging */
    int fd;                    /* the GGUF file while mapped, else -1 */
    uint8_t *map;
    size_t map_bytes;
    size_t *lo, *hi;           /* [n_layer] page-aligned file range of each block */
};
typedef struct mz_ospage_model fmodel;

static size_t pg(void) { return mz_page_size(); }
static size_t round_up(size_t n) { return (n + pg() - 1) / pg() * pg(); }

static int block_tensor_list(mz_block_weights *b, mz_tensor *out[11])
{
    mz_tensor *all[11] = {&b->attn_norm, &b->wq,   &b->wk,     &b->wv,     &b->wo,    &b->ffn_norm,
                          &b->w_gate,    &b->w_up, &b->w_down, &b->q_norm, &b->k_norm};
    int n = 0;
    for (int i = 0; i < 11; i++)
        if (all[i]->nbytes) out[n++] = all[i];
    return n;
}

mz_ospage_model *mz_ospage_model_new(mz_model_t *m)
{
    fmodel *f = mz_calloc(1, sizeof *f);
    if (!f) return NULL;
    pthread_mutex_init(&f->lock, NULL);
    f->model = m;
    f->fd = -1;
    return f;
}

void mz_ospage_model_free(mz_ospage_model *f)
{
    if (!f) return;
    MZ_ASSERT(f->n_ctx == 0 && !f->map);
    pthread_mutex_destroy(&f->lock);
    free(f->lo);
    free(f->hi);
    free(f);
}

/* Points the blocks' tensors into the file mapping and releases the model's
 * block buffers. */
static mz_status fm_map(fmodel *f)
{
    mz_model_t *m = f->model;
    int L = m->cfg.n_layer;
    int fd = open(m->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return mz_fail(MZ_E_IO, "os-paging: cannot open %s: %s", m->path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size <= 0) {
        close(fd);
        return mz_fail(MZ_E_IO, "os-paging: cannot stat %s", m->path);
    }
    size_t len = (size_t)st.st_size;
    void *map = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
        int e = errno;
        close(fd);
        return mz_fail(MZ_E_NOMEM, "os-paging: cannot map %s: %s", m->path, strerror(e));
    }
    f->lo = mz_calloc((size_t)L, sizeof *f->lo);
    f->hi = mz_calloc((size_t)L, sizeof *f->hi);
    if (!f->lo || !f->hi) {
        munmap(map, len);
        close(fd);
        return MZ_E_NOMEM;
    }
    for (int l = 0; l < L; l++) {
        mz_tensor *ts[11];
        int n = block_tensor_list(&m->blocks[l], ts);
        size_t lo = SIZE_MAX, hi = 0;
        for (int i = 0; i < n; i++) {
            if (ts[i]->file_offset + ts[i]->nbytes > len) {
                munmap(map, len);
                close(fd);
                return mz_fail(MZ_E_FORMAT, "os-paging: %s is shorter than its tensors", m->path);
            }
            lo = MZ_MIN(lo, (size_t)ts[i]->file_offset);
            hi = MZ_MAX(hi, (size_t)(ts[i]->file_offset + ts[i]->nbytes));
        }
        f->lo[l] = lo / pg() * pg();
        f->hi[l] = MZ_MIN(round_up(hi), round_up(len));
    }
    for (int l = 0; l < L; l++) {
        mz_block_weights *b = &m->blocks[l];
        mz_tensor *ts[11];
        int n = block_tensor_list(b, ts);
        for (int i = 0; i < n; i++) ts[i]->data = (const uint8_t *)map + ts[i]->file_offset;
        mz_model_block_set_plain(m, l, true); /* the file's bytes: never repacked */
        /* The block buffer keeps its address (the memory manager's unit points
         * at it) but gives its pages back; reading it now faults. */
        (void)madvise(b->buf, round_up(b->buf_bytes), MADV_DONTNEED);
        (void)mprotect(b->buf, round_up(b->buf_bytes), PROT_NONE);
    }
    f->fd = fd;
    f->map = map;
    f->map_bytes = len;
    return MZ_OK;
}

static mz_status read_all(int fd, void *dst, size_t n, uint64_t off)
{
    uint8_t *p = dst;
    while (n) {
        ssize_t r = pread(fd, p, MZ_MIN(n, (size_t)1 << 30), (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return mz_fail(MZ_E_IO, "read: %s", r < 0 ? strerror(errno) : "end of file");
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return MZ_OK;
}

/* The reverse of fm_map: blocks back in their own buffers. On a read error the
 * mapping stays (the tensors keep pointing into it) and the error is logged. */
static void fm_unmap(fmodel *f)
{
    mz_model_t *m = f->model;
    mz_status s = MZ_OK;
    for (int l = 0; l < m->cfg.n_layer && !s; l++) {
        mz_block_weights *b = &m->blocks[l];
        if (mprotect(b->buf, round_up(b->buf_bytes), PROT_READ | PROT_WRITE) != 0) {
            s = mz_fail(MZ_E_NOMEM, "mprotect: %s", strerror(errno));
            break;
        }
        mz_tensor *ts[11];
        int n = block_tensor_list(b, ts);
        for (int i = 0; i < n && !s; i++)
            s = read_all(f->fd, b->buf + ts[i]->offset, ts[i]->nbytes, ts[i]->file_offset);
        if (!s) {
            /* into the layouts chosen at load (the tensors still read the map) */
            mz_model_block_set_plain(m, l, false);
            s = mz_model_block_to_layout(m, l, b->buf);
            mz_model_block_set_plain(m, l, true);
        }
    }
    if (s) {
        mz_log(MZ_LOG_ERROR, "os-paging: cannot read the weights of %s back (%s); they stay "
                             "file-mapped", m->path, mz_last_error());
        return;
    }
    for (int l = 0; l < m->cfg.n_layer; l++) {
        mz_block_weights *b = &m->blocks[l];
        mz_tensor *ts[11];
        int n = block_tensor_list(b, ts);
        for (int i = 0; i < n; i++) ts[i]->data = b->buf + ts[i]->offset;
        mz_model_block_set_plain(m, l, false);
    }
    munmap(f->map, f->map_bytes);
    close(f->fd);
    f->map = NULL;
    f->fd = -1;
}

mz_status mz_ospage_model_attach(mz_ospage_model *f, mz_engine_mode mode)
{
    mz_status s = MZ_OK;
    pthread_mutex_lock(&f->lock);
    bool os = mode == MZ_MODE_OS_PAGING;
    if (os && f->n_ctx > f->n_os) {
        s = mz_fail(MZ_E_INVAL, "os-paging reads the weights from a mapping of the model file, "
                                "but this model has %d context(s) of another mode; load the "
                                "model again for os-paging", f->n_ctx - f->n_os);
        goto out;
    }
    if (!os && f->n_os > 0) {
        s = mz_fail(MZ_E_INVAL, "this model's weights are file-mapped for %d os-paging "
                                "context(s); load the model again for mode %s", f->n_os,
                    mz_engine_mode_name(mode));
        goto out;
    }
    if (os && f->n_os == 0 && (s = fm_map(f))) {
        free(f->lo);
        free(f->hi);
        f->lo = f->hi = NULL;
        goto out;
    }
    f->n_ctx++;
    if (os) f->n_os++;
out:
    pthread_mutex_unlock(&f->lock);
    return s;
}

void mz_ospage_model_detach(mz_ospage_model *f, mz_engine_mode mode)
{
    pthread_mutex_lock(&f->lock);
    f->n_ctx--;
    if (mode == MZ_MODE_OS_PAGING && --f->n_os == 0) fm_unmap(f);
    pthread_mutex_unlock(&f->lock);
}

/* ---- swap ----------------------------------------------------------------------------- */

size_t mz_ospage_swap_total(bool *all_zram)
{
    FILE *fp = fopen("/proc/swaps", "r");
    size_t total = 0;
    bool zram = true;
    int n = 0;
    if (fp) {
        char line[512], name[256], type[64];
        unsigned long long size_kb, used_kb;
        int prio;
        while (fgets(line, sizeof line, fp)) {
            if (sscanf(line, "%255s %63s %llu %llu %d", name, type, &size_kb, &used_kb, &prio) != 5)
                continue;
            total += (size_t)size_kb * 1024;
            n++;
            if (!strstr(name, "/zram")) zram = false;
        }
        fclose(fp);
    }
    if (all_zram) *all_zram = n > 0 && zram;
    return total;
}

/* What the zram devices that are active swap hold now (/sys/block/zramN/mm_stat,
 * summed): orig = bytes swapped to them, compr = those bytes compressed, used =
 * memory they take (allocator overhead included). Devices that are not swap
 * (another user's) are left out. Returns the ratio compr / orig (0 when empty). */
static double zram_swap_stat(size_t *orig, size_t *compr, size_t *used)
{
    unsigned long long o_all = 0, c_all = 0, u_all = 0;
    FILE *sw = fopen("/proc/swaps", "r");
    char line[512];
    while (sw && fgets(line, sizeof line, sw)) {
        int id = -1;
        if (sscanf(line, "/dev/zram%d", &id) != 1 || id < 0) continue;
        char path[64];
        snprintf(path, sizeof path, "/sys/block/zram%d/mm_stat", id);
        FILE *fp = fopen(path, "r");
        if (!fp) continue;
        unsigned long long o, c, u;
        if (fscanf(fp, "%llu %llu %llu", &o, &c, &u) == 3) o_all += o, c_all += c, u_all += u;
        fclose(fp);
    }
    if (sw) fclose(sw);
    if (orig) *orig = (size_t)o_all;
    if (compr) *compr = (size_t)c_all;
    if (used) *used = (size_t)u_all;
    return o_all ? (double)c_all / (double)o_all : 0.0;
}

/* ---- the context's part ---------------------------------------------------------------- */

struct mz_ospage {
    fmodel *fm;                /* stable while the context lives */
    char dir[4096];            /* where the KV fallback file goes */
    int kv_fd;                 /* unlinked KV file (no-swap fallback), -1 until needed */
    int pagemap_fd;            /* /proc/self/pagemap (mapped_bytes), -1 until needed or
                                  where it cannot be opened */
    size_t kv_file_bytes;
    uint8_t **fb;              /* [n_layer * max_chunks]: address of chunk (l, c) while it is
                                  file-backed (NULL: anonymous) */
    size_t slot_bytes;         /* mapped size of a chunk */
    bool warned;
};

mz_status mz_ospage_init(const mz_mode_session *ms, mz_ospage_model *fm, const char *swap_dir,
                         mz_ospage **out)
{
    *out = NULL;
    mz_ospage *op = mz_calloc(1, sizeof *op);
    if (!op) return MZ_E_NOMEM;
    op->kv_fd = -1;
    op->pagemap_fd = -1;
    op->slot_bytes = round_up(ms->kv->chunk_bytes);
    op->fb = mz_calloc((size_t)ms->kv->n_layer * MZ_MAX(ms->kv->max_chunks, 1), sizeof *op->fb);
    if (!op->fb) {
        free(op);
        return MZ_E_NOMEM;
    }
    if (swap_dir && swap_dir[0]) {
        snprintf(op->dir, sizeof op->dir, "%s", swap_dir);
    } else {
        const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
        if (xdg && xdg[0]) snprintf(op->dir, sizeof op->dir, "%s/mzcache", xdg);
        else snprintf(op->dir, sizeof op->dir, "%s/.cache/mzcache", home && home[0] ? home : "/tmp");
    }
    op->fm = fm;
    MZ_ASSERT(op->fm->map); /* attached as an os-paging session */
    *out = op;
    return MZ_OK;
}

void mz_ospage_free(mz_ospage *op)
{
    if (!op) return;
    /* File-backed chunks stay mapped until the KV cache unmaps them; the file
     * is already unlinked, so closing it here loses nothing. */
    if (op->kv_fd >= 0) close(op->kv_fd);
    if (op->pagemap_fd >= 0) close(op->pagemap_fd);
    free(op->fb);
    free(op);
}

/* Resident bytes of [p, p + len) by mincore (len rounded up to pages). */
static size_t resident_bytes(const void *p, size_t len)
{
    if (!p || !len) return 0;
    size_t n = round_up(len) / pg();
    unsigned char vec[1024];
    size_t res = 0;
    for (size_t i = 0; i < n; i += sizeof vec) {
        size_t k = MZ_MIN(n - i, sizeof vec);
        if (mincore((void *)((uintptr_t)p + i * pg()), k * pg(), vec) != 0) return 0;
        for (size_t j = 0; j < k; j++) res += vec[j] & 1;
    }
    return MZ_MIN(res * pg(), len);
}

/* Bytes of [p, p + len) mapped in this process's page table now
 * (/proc/self/pagemap, bit 63). Unlike mincore, a page that went to swap but
 * still sits in the swap cache does not count: MADV_PAGEOUT has done all it
 * can with it. Falls back to mincore where pagemap cannot be read. *fd is
 * the context's pagemap descriptor, opened at the first call. */
static size_t mapped_bytes(int *fd_cache, const void *p, size_t len)
{
    if (!p || !len) return 0;
    if (*fd_cache < 0) *fd_cache = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    int fd = *fd_cache;
    if (fd < 0) return resident_bytes(p, len);
    size_t n = round_up(len) / pg(), res = 0;
    uint64_t ent[512];
    off_t off = (off_t)((uintptr_t)p / pg() * sizeof ent[0]);
    for (size_t i = 0; i < n;) {
        size_t k = MZ_MIN(n - i, sizeof ent / sizeof ent[0]);
        ssize_t got = pread(fd, ent, k * sizeof ent[0], off + (off_t)(i * sizeof ent[0]));
        if (got != (ssize_t)(k * sizeof ent[0])) return resident_bytes(p, len);
        for (size_t j = 0; j < k; j++) res += (ent[j] >> 63) & 1;
        i += k;
    }
    return MZ_MIN(res * pg(), len);
}

static size_t block_resident(const mz_ospage *op, int l)
{
    const fmodel *f = op->fm;
    return MZ_MIN(resident_bytes(f->map + f->lo[l], f->hi[l] - f->lo[l]),
                  f->model->blocks[l].buf_bytes);
}

/* Largest page-cache folio the kernel makes (a PMD: 2 MiB with 4 KiB pages). */
#define OSP_FOLIO_MAX ((size_t)2 << 20)

/* Drops the page cache of [off, off + len) of fd. POSIX_FADV_DONTNEED drops
 * only folios wholly inside the range, and the page cache holds large folios
 * (file reads and mapping faults read ahead in up to 2 MiB folios) that can
 * straddle the range's ends; so when pages of the range are still resident
 * afterwards (still_resident, by mincore), the range widened to 2 MiB
 * boundaries is dropped as well. That takes only what no one maps and is
 * clean: the neighbours' mapped pages stay. */
static int drop_file_range(int fd, size_t off, size_t len, size_t (*still_resident)(void *),
                           void *arg)
{
    int e = posix_fadvise(fd, (off_t)off, (off_t)len, POSIX_FADV_DONTNEED);
    if (e || !still_resident(arg)) return e;
    size_t lo = off / OSP_FOLIO_MAX * OSP_FOLIO_MAX;
    size_t hi = (off + len + OSP_FOLIO_MAX - 1) / OSP_FOLIO_MAX * OSP_FOLIO_MAX;
    e = posix_fadvise(fd, (off_t)lo, (off_t)(hi - lo), POSIX_FADV_DONTNEED);
    if (e || !still_resident(arg)) return e;
    /* Dirty pages are not dropped: a model file written moments ago (just
     * downloaded or copied) is still in the page cache waiting for
     * writeback. Write the range back, then drop it again. */
    if (sync_file_range(fd, (off_t)lo, (off_t)(hi - lo),
                        SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                            SYNC_FILE_RANGE_WAIT_AFTER) != 0)
        return errno;
    return posix_fadvise(fd, (off_t)lo, (off_t)(hi - lo), POSIX_FADV_DONTNEED);
}

typedef struct resid_arg {
    const mz_ospage *op;
    int l;
    const void *p;
    size_t len;
} resid_arg;

static size_t block_still_resident(void *a)
{
    const resid_arg *r = a;
    return block_resident(r->op, r->l);
}

static size_t range_still_resident(void *a)
{
    const resid_arg *r = a;
    return resident_bytes(r->p, r->len);
}

/* A block's weights: MADV_PAGEOUT reclaims the folios this process maps
 * (splitting large ones that straddle the range), MADV_DONTNEED unmaps what is
 * left, and the page cache of the range is dropped. Folios that nothing maps
 * (e.g. left in the page cache by the model loader's reads) only go by the
 * last step. */
static mz_status evict_block(mz_ospage *op, int l)
{
    const fmodel *f = op->fm;
    void *p = f->map + f->lo[l];
    size_t len = f->hi[l] - f->lo[l];
    (void)madvise(p, len, MADV_PAGEOUT);
    if (madvise(p, len, MADV_DONTNEED) != 0)
        return mz_fail(MZ_E_IO, "weights of layer %d: madvise: %s", l, strerror(errno));
    resid_arg ra = {op, l, NULL, 0};
    int e = drop_file_range(f->fd, f->lo[l], len, block_still_resident, &ra);
    if (e) return mz_fail(MZ_E_IO, "weights of layer %d: posix_fadvise: %s", l, strerror(e));
    return MZ_OK;
}

static mz_status ensure_kv_file(mz_ospage *op)
{
    if (op->kv_fd >= 0) return MZ_OK;
    mz_status s = mz_dir_make_private(op->dir);
    if (s) return s;
    char path[4200];
    snprintf(path, sizeof path, "%s/os-paging-kv-XXXXXX", op->dir);
    int fd = mkostemp(path, O_CLOEXEC);
    if (fd < 0) return mz_fail(MZ_E_IO, "cannot create %s: %s", path, strerror(errno));
    unlink(path);
    op->kv_fd = fd;
    if (!op->warned) {
        mz_log(MZ_LOG_WARN, "os-paging: no swap, so MADV_PAGEOUT cannot move anonymous memory; "
                            "KV chunks go to a file-backed shared mapping in %s instead", op->dir);
        op->warned = true;
    }
    return MZ_OK;
}

/* Moves an anonymous chunk into its slot of the KV file, mapped MAP_SHARED at
 * the same address. */
static mz_status chunk_to_file(mz_ospage *op, uint8_t *chunk, size_t idx, int l, size_t ck)
{
    mz_status s = ensure_kv_file(op);
    if (s) return s;
    off_t off = (off_t)(idx * op->slot_bytes);
    const uint8_t *p = chunk;
    size_t n = op->slot_bytes;
    for (off_t o = off; n;) {
        ssize_t w = pwrite(op->kv_fd, p, n, o);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0)
            return mz_fail(MZ_E_IO, "KV chunk (layer %d, chunk %zu): writing the KV file: %s", l,
                           ck, w < 0 ? strerror(errno) : "short write");
        p += w;
        n -= (size_t)w;
        o += w;
    }
    void *m = mmap(chunk, op->slot_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
                   op->kv_fd, off);
    if (m == MAP_FAILED)
        return mz_fail(MZ_E_NOMEM, "KV chunk (layer %d, chunk %zu): mapping the KV file: %s", l,
                       ck, strerror(errno));
    op->fb[idx] = chunk;
    op->kv_file_bytes = MZ_MAX(op->kv_file_bytes, (size_t)off + op->slot_bytes);
    return MZ_OK;
}

/* swap: the system has swap space (read once per eviction). */
static mz_status evict_chunk(const mz_mode_session *ms, mz_ospage *op, int l, size_t ck, bool swap)
{
    uint8_t *chunk = ms->kv->chunks[l][ck];
    size_t idx = (size_t)l * ms->kv->max_chunks + ck;
    if (op->fb[idx] != chunk) {
        /* Anonymous. (A chunk freed by mz_ctx_truncate loses its fb entry there,
         * mz_ospage_kv_truncate: mapped again, maybe at the same address, it is
         * anonymous; taking it for the file-backed one would MADV_DONTNEED its
         * data away.) */
        op->fb[idx] = NULL;
        /* A page the kernel is still writing to swap, or that another CPU
         * touched a moment ago, is skipped by one pass; a few passes give the
         * swap device its chance. */
        for (int pass = 0; pass < 4; pass++) {
            (void)madvise(chunk, op->slot_bytes, MADV_PAGEOUT);
            if (mapped_bytes(&op->pagemap_fd, chunk, op->slot_bytes) == 0)
                return MZ_OK; /* in swap */
            if (!swap) break; /* no swap: the file it is */
            sched_yield();
        }
        /* With swap, what the kernel would not page out stays, as it would
         * under OS paging; the file is the stand-in for swap, not for it. */
        if (swap) return MZ_OK;
        mz_status s = chunk_to_file(op, chunk, idx, l, ck);
        if (s) return s;
    }
    /* File-backed: written back, then as for the weights (evict_block; see
     * "Large folios" at the top). */
    if (msync(chunk, op->slot_bytes, MS_SYNC) != 0)
        return mz_fail(MZ_E_IO, "KV chunk (layer %d, chunk %zu): msync: %s", l, ck,
                       strerror(errno));
    (void)madvise(chunk, op->slot_bytes, MADV_PAGEOUT);
    if (madvise(chunk, op->slot_bytes, MADV_DONTNEED) != 0)
        return mz_fail(MZ_E_IO, "KV chunk (layer %d, chunk %zu): madvise: %s", l, ck,
                       strerror(errno));
    resid_arg ra = {op, l, chunk, op->slot_bytes};
    int e = drop_file_range(op->kv_fd, idx * op->slot_bytes, op->slot_bytes, range_still_resident,
                            &ra);
    if (e) return mz_fail(MZ_E_IO, "KV chunk (layer %d, chunk %zu): posix_fadvise: %s", l, ck,
                          strerror(e));
    return MZ_OK;
}

static size_t touch(const void *p, size_t len)
{
    const volatile uint8_t *b = p;
    size_t sum = 0;
    for (size_t i = 0; i < len; i += pg()) sum += b[i];
    return sum;
}

/* Chunk k's pages that hold written positions: each of its 2 * n_head_kv
 * K/V head regions ([256][head_dim] F16) up to the context's length. Pages
 * never written are no memory at all, so they count neither as total nor as
 * resident. *data = those bytes, return = of them resident. */
static size_t chunk_data_resident(const mz_mode_session *ms, size_t k, const uint8_t *chunk, size_t *data,
                                  bool fault_in)
{
    size_t region = (size_t)MZ_KV_CHUNK_TOKENS * (size_t)ms->kv->head_dim * sizeof(mz_f16);
    size_t pos0 = k * MZ_KV_CHUNK_TOKENS;
    const size_t n_tokens = ms->n_tokens(ms->ud);
    size_t npos = n_tokens > pos0 ? MZ_MIN(n_tokens - pos0, (size_t)MZ_KV_CHUNK_TOKENS) : 0;
    if (region % pg() != 0 || npos == MZ_KV_CHUNK_TOKENS) {
        *data = ms->kv->chunk_bytes;
        if (fault_in) (void)touch(chunk, ms->kv->chunk_bytes);
        return resident_bytes(chunk, ms->kv->chunk_bytes);
    }
    size_t len = round_up(npos * (size_t)ms->kv->head_dim * sizeof(mz_f16)), res = 0;
    *data = 0;
    for (int r = 0; r < 2 * ms->kv->n_head_kv && len; r++) {
        *data += len;
        if (fault_in) (void)touch(chunk + (size_t)r * region, len);
        res += resident_bytes(chunk + (size_t)r * region, len);
    }
    return res;
}

static size_t total_resident(const mz_mode_session *ms, mz_ospage *op)
{
    size_t r = 0;
    for (int l = 0; l < ms->kv->n_layer; l++) {
        r += block_resident(op, l);
        for (size_t k = 0; k < ms->kv->n_chunks; k++)
            r += resident_bytes(ms->kv->chunks[l][k], ms->kv->chunk_bytes);
    }
    return r;
}

/* Resident bytes of KV chunk (l, k) and its neighbours k - 1 and k + 1 (their
 * slots in the KV file are adjacent), and of block l and blocks l - 1, l + 1
 * (adjacent in the GGUF file). */
static size_t kv_window_resident(const mz_mode_session *ms, int l, size_t k)
{
    size_t r = 0;
    for (size_t j = k ? k - 1 : 0; j <= k + 1 && j < ms->kv->n_chunks; j++)
        r += resident_bytes(ms->kv->chunks[l][j], ms->kv->chunk_bytes);
    return r;
}

static size_t block_window_resident(const mz_mode_session *ms, const mz_ospage *op, int l)
{
    size_t r = 0;
    for (int j = l ? l - 1 : 0; j <= l + 1 && j < ms->kv->n_layer; j++) r += block_resident(op, j);
    return r;
}

/* Net bytes an eviction freed so far: what left RAM, less what zram holds for
 * the KV chunks that went to it (its measured ratio, as mz_ospage_get_stats
 * counts them). */
static size_t net_freed(size_t raw, size_t to_zram)
{
    if (!to_zram) return raw;
    size_t held = (size_t)((double)to_zram * zram_swap_stat(NULL, NULL, NULL));
    return raw > held ? raw - held : 0;
}

mz_status mz_ospage_evict(const mz_mode_session *ms, mz_ospage *op, size_t nbytes, mz_evict_report *r)
{
    mz_evict_report scratch;
    r = mz_evict_report_start(r, &scratch, nbytes);
    double t0 = mz_time_ms();
    mz_status s = MZ_OK;
    /* raw: bytes that left RAM (mincore); to_zram: of them, KV bytes now in a
     * zram swap device, still RAM (compressed). Eviction goes on until the net
     * amount reaches nbytes: with zram that takes more units than the raw
     * count says (the net is read only once the raw count is there). */
    size_t raw = 0, to_zram = 0;
    bool all_zram = false;
    bool swap = mz_ospage_swap_total(&all_zram) > 0;
#define OSP_ENOUGH() (raw >= nbytes && net_freed(raw, to_zram) >= nbytes)
    if (nbytes == 0) goto out;
    /* Freed bytes are counted over the unit and its neighbours: reclaiming a
     * large folio that straddles into a neighbour's range takes the
     * neighbour's pages with it. */
    for (int l = ms->kv->n_layer - 1; l >= 0 && !s && !OSP_ENOUGH(); l--) {
        for (size_t k = ms->kv->n_chunks; k-- > 0 && !OSP_ENOUGH();) {
            uint8_t *chunk = ms->kv->chunks[l][k];
            size_t before = resident_bytes(chunk, ms->kv->chunk_bytes);
            if (!before) continue;
            size_t wbefore = kv_window_resident(ms, l, k);
            if ((s = evict_chunk(ms, op, l, k, swap))) break;
            size_t after = resident_bytes(chunk, ms->kv->chunk_bytes);
            size_t wafter = kv_window_resident(ms, l, k);
            raw += wbefore > wafter ? wbefore - wafter : 0;
            if (all_zram && op->fb[(size_t)l * ms->kv->max_chunks + k] != chunk)
                to_zram += before > after ? before - after : 0;
            if (after < before) r->n_kv_stored_raw++; /* to swap or to the KV file, raw */
            r->stage = MZ_EVICT_STAGE_KV_ONLY;
        }
        if (s || OSP_ENOUGH()) break;
        size_t before = block_resident(op, l);
        if (!before) continue;
        size_t wbefore = block_window_resident(ms, op, l);
        if ((s = evict_block(op, l))) break;
        size_t after = block_resident(op, l);
        size_t wafter = block_window_resident(ms, op, l);
        raw += wbefore > wafter ? wbefore - wafter : 0;
        /* Pages another process maps stay in the page cache: counted only
         * when something really went. */
        if (after < before) r->n_weights_dropped++;
        r->stage = MZ_EVICT_STAGE_W_ONLY;
    }
#undef OSP_ENOUGH
out:
    r->bytes_freed = net_freed(raw, to_zram);
    r->complete = r->bytes_freed >= nbytes;
    r->time_ms = mz_time_ms() - t0;
    return s;
}

mz_status mz_ospage_restore(const mz_mode_session *ms, mz_ospage *op, mz_restore_report *r)
{
    mz_restore_report dummy;
    if (!r) r = &dummy;
    memset(r, 0, sizeof *r);
    double t0 = mz_time_ms();
    size_t before = total_resident(ms, op);
    /* Page faults bring everything back, in forward order. */
    size_t sink = 0;
    for (int l = 0; l < ms->kv->n_layer; l++) {
        const fmodel *f = op->fm;
        if (block_resident(op, l) < f->model->blocks[l].buf_bytes) {
            sink += touch(f->map + f->lo[l], f->hi[l] - f->lo[l]);
            r->n_weights_loaded++;
        }
        for (size_t k = 0; k < ms->kv->n_chunks; k++) {
            uint8_t *chunk = ms->kv->chunks[l][k];
            size_t data = 0;
            if (chunk_data_resident(ms, k, chunk, &data, false) == data) continue;
            (void)chunk_data_resident(ms, k, chunk, &data, true);
            if (op->fb[(size_t)l * ms->kv->max_chunks + k] == chunk) r->n_kv_read_raw++;
            else r->n_kv_decoded++;
        }
    }
    (void)sink;
    size_t after = total_resident(ms, op);
    r->bytes_restored = after > before ? after - before : 0;
    r->time_ms = mz_time_ms() - t0;
    return MZ_OK;
}

void mz_ospage_kv_truncate(const mz_mode_session *ms, mz_ospage *op, size_t n_keep)
{
    if (!op) return;
    size_t keep = (n_keep + MZ_KV_CHUNK_TOKENS - 1) / MZ_KV_CHUNK_TOKENS;
    for (int l = 0; l < ms->kv->n_layer; l++)
        for (size_t k = keep; k < ms->kv->max_chunks; k++) op->fb[(size_t)l * ms->kv->max_chunks + k] = NULL;
}

void mz_ospage_get_stats(const mz_mode_session *ms, mz_ospage *op, mz_mem_stats *out)
{
    memset(out, 0, sizeof *out);
    const fmodel *f = op->fm;
    for (int l = 0; l < ms->kv->n_layer; l++) {
        size_t tot = f->model->blocks[l].buf_bytes, res = block_resident(op, l);
        out->weights.total_bytes += tot;
        out->weights.resident_bytes += res;
        out->weights.dropped_bytes += tot - res;
        out->weights.n_units++;
        if (res == tot) out->weights.n_resident++;
    }
    bool all_zram = false;
    size_t swap = mz_ospage_swap_total(&all_zram);
    double ratio = all_zram ? zram_swap_stat(NULL, NULL, NULL) : 0.0;
    size_t swapped = 0;
    for (int l = 0; l < ms->kv->n_layer; l++) {
        for (size_t k = 0; k < ms->kv->n_chunks; k++) {
            uint8_t *chunk = ms->kv->chunks[l][k];
            size_t tot = 0, res = chunk_data_resident(ms, k, chunk, &tot, false);
            out->kv.total_bytes += tot;
            out->kv.resident_bytes += res;
            out->kv.n_units++;
            if (res == tot) out->kv.n_resident++;
            if (op->fb[(size_t)l * ms->kv->max_chunks + k] == chunk) out->kv.stored_bytes += tot - res;
            else swapped += tot - res;
        }
    }
    if (all_zram) {
        /* In zram: still RAM, compressed. */
        out->kv.compressed_bytes = (size_t)((double)swapped * ratio);
    }
    out->kv.stored_bytes += all_zram ? 0 : swapped;
    out->pinned_bytes = ms->model->pinned_bytes;
    size_t total = out->weights.total_bytes + out->kv.total_bytes;
    size_t kept = out->weights.resident_bytes + out->kv.resident_bytes + out->kv.compressed_bytes;
    out->remaining_pct = total ? 100.0 * (double)kept / (double)total : 100.0;
    out->swap_file_bytes = op->kv_file_bytes;
    snprintf(out->codec, sizeof out->codec, "%s", all_zram ? "zram" : "-");
    snprintf(out->placement, sizeof out->placement, "%s",
             op->kv_fd >= 0 ? "file-mapping" : swap ? (all_zram ? "zram-swap" : "swap") : "anon");
    snprintf(out->policy, sizeof out->policy, "os-paging");
    snprintf(out->evict_order, sizeof out->evict_order, "backward");
    bool any = out->weights.resident_bytes || out->kv.resident_bytes;
    out->stage = any ? MZ_EVICT_STAGE_KV_ONLY : MZ_EVICT_STAGE_DONE;
}
