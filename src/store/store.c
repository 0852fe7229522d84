/*
 * store.c — the session store's directory, identities and files (store.h).
 *
 * Model identity is a hash of the GGUF file's bytes (its metadata and tensor
 * data alike), never its path: a renamed copy is the same model, a file with
 * one changed weight is not. Hashing is a chain of XXH64 over 8 MiB blocks
 * (~10 GB/s once cached); the result is cached in <store>/model-ids keyed by
 * the file's device, inode, size and mtime (nanoseconds), so a restart does
 * not read the whole model again. Tokenizer identity hashes every token's
 * bytes and the special tokens.
 */
#define _GNU_SOURCE
#include "store.h"

#include "../engine/engine.h"
#include "../io/io.h"

#include <dirent.h>
#include <pthread.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MANIFEST_MAX_BYTES ((size_t)64 << 20)

uint64_t mz_store_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

const char *mz_fsync_policy_name(mz_fsync_policy p)
{
    switch (p) {
    case MZ_FSYNC_BATCH: return "batch";
    case MZ_FSYNC_NONE: return "none";
    case MZ_FSYNC_ALWAYS: return "always";
    }
    return NULL;
}

mz_status mz_fsync_policy_parse(const char *name, mz_fsync_policy *out)
{
    for (int i = 0; i < 3; i++)
        if (name && strcmp(name, mz_fsync_policy_name((mz_fsync_policy)i)) == 0) {
            *out = (mz_fsync_policy)i;
            return MZ_OK;
        }
    return mz_fail(MZ_E_INVAL, "unknown fsync policy \"%s\" (none, batch, always)", name ? name : "");
}

mz_store_params mz_store_params_default(void)
{
    return (mz_store_params){.dir = NULL, .fsync = MZ_FSYNC_BATCH, .limit_bytes = 0,
                             .manifest_interval_ms = 100};
}

/* ---- directory ----------------------------------------------------------------------------- */

static mz_status default_dir(char *buf, size_t cap)
{
    const char *xdg = getenv("XDG_STATE_HOME");
    const char *home = getenv("HOME");
    int n;
    if (xdg && xdg[0] == '/') n = snprintf(buf, cap, "%s/mzcache", xdg);
    else if (home && home[0] == '/') n = snprintf(buf, cap, "%s/.local/state/mzcache", home);
    else return mz_fail(MZ_E_INVAL, "no store directory: set XDG_STATE_HOME or HOME, or give one");
    if (n < 0 || (size_t)n >= cap) return mz_fail(MZ_E_RANGE, "store directory path too long");
    return MZ_OK;
}

/* mkdir -p, 0700 for what it creates; the store itself must be a real
 * directory of this user that nobody else can enter: one store per user. */
static mz_status make_store_dir(const char *dir)
{
    if (dir[0] != '/')
        return mz_fail(MZ_E_INVAL, "store directory must be an absolute path: \"%s\"", dir);
    mz_status s = mz_dir_make_private(dir);
    if (s) return s;
    struct stat st;
    if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return mz_fail(MZ_E_IO, "store %s is not a directory (symbolic links are refused)", dir);
    if (st.st_uid != getuid())
        return mz_fail(MZ_E_IO, "store %s belongs to another user", dir);
    if (st.st_mode & 077) {
        if (chmod(dir, 0700) != 0)
            return mz_fail(MZ_E_IO, "store %s is open to other users and cannot be fixed: %s", dir,
                           strerror(errno));
    }
    return MZ_OK;
}

mz_status mz_store_path(const mz_store_t *st, const char *id, const char *suffix, char *buf,
                        size_t cap)
{
    if (!mz_session_id_valid(id))
        return mz_fail(MZ_E_INVAL, "bad session id \"%.80s\" (1..63 of A-Z a-z 0-9 _ . -)",
                       id ? id : "");
    int n = snprintf(buf, cap, "%s/%s%s", st->dir, id, suffix);
    if (n < 0 || (size_t)n >= cap) return mz_fail(MZ_E_RANGE, "store path too long");
    return MZ_OK;
}

static void fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;
    if (mz_io.fsync(fd) != 0) mz_log(MZ_LOG_WARN, "fsync of %s: %s", dir, strerror(errno));
    close(fd);
}

/* ---- identities ------------------------------------------------------------------------------ */

mz_status mz_store_hash_file(const char *path, uint64_t *out)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return mz_fail(MZ_E_IO, "cannot open %s: %s", path, strerror(errno));
    const size_t B = (size_t)8 << 20;
    unsigned char *buf = malloc(B);
    if (!buf) {
        close(fd);
        return mz_fail(MZ_E_NOMEM, "out of memory (model hash)");
    }
    uint64_t h = 0x6d7a6d6f64656cULL;
    uint64_t total = 0;
    mz_status s = MZ_OK;
    for (;;) {
        size_t got = 0;
        while (got < B) {
            ssize_t r = read(fd, buf + got, B - got);
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) {
                s = mz_fail(MZ_E_IO, "reading %s: %s", path, strerror(errno));
                break;
            }
            if (r == 0) break;
            got += (size_t)r;
        }
        if (s || got == 0) break;
        h = mz_hash64(buf, got, h);
        total += got;
        if (got < B) break;
    }
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED); /* the model is loaded already */
    free(buf);
    close(fd);
    *out = mz_hash64(&total, sizeof total, h);
    return s;
}

/* The cached id for the file's identity, or compute and append it. */
static mz_status model_identity(mz_store_t *st, const char *path, uint64_t *out)
{
    struct stat fs;
    if (stat(path, &fs) != 0) return mz_fail(MZ_E_IO, "cannot stat %s: %s", path, strerror(errno));
    char key[160];
    snprintf(key, sizeof key, "%" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRId64 " %ld",
             (uint64_t)fs.st_dev, (uint64_t)fs.st_ino, (uint64_t)fs.st_size,
             (int64_t)fs.st_mtim.tv_sec, (long)fs.st_mtim.tv_nsec);
    char cpath[PATH_MAX];
    snprintf(cpath, sizeof cpath, "%s/model-ids", st->dir);
    FILE *f = fopen(cpath, "re");
    if (f) {
        char line[256];
        while (fgets(line, sizeof line, f)) {
            size_t kl = strlen(key);
            if (strncmp(line, key, kl) != 0 || line[kl] != ' ') continue;
            char *end = NULL;
            errno = 0;
            unsigned long long v = strtoull(line + kl + 1, &end, 16);
            if (errno || end == line + kl + 1 || (*end != '\n' && *end != '\0')) continue;
            fclose(f);
            *out = (uint64_t)v;
            return MZ_OK;
        }
        fclose(f);
    }
    mz_status s = mz_store_hash_file(path, out);
    if (s) return s;
    int fd = open(cpath, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd >= 0) {
        char line[256];
        int n = snprintf(line, sizeof line, "%s %016" PRIx64 "\n", key, *out);
        if (write(fd, line, (size_t)n) != n) mz_log(MZ_LOG_WARN, "cannot cache the model id");
        close(fd);
    }
    return MZ_OK;
}

static uint64_t tokenizer_identity(const mz_model_t *m)
{
    int nv = mz_model_n_vocab(m);
    mz_model_info mi;
    mz_model_get_info(m, &mi);
    int32_t sp[4] = {nv, mi.bos, mi.eos, mi.eot};
    uint64_t h = mz_hash64(sp, sizeof sp, 0x746f6b);
    for (int t = 0; t < nv; t++) {
        size_t len = 0;
        const char *p = mz_token_piece(m, t, &len);
        uint64_t hdr[2] = {(uint64_t)t, p ? len : UINT64_MAX};
        h = mz_hash64(hdr, sizeof hdr, h);
        if (p && len) h = mz_hash64(p, len, h);
    }
    return h;
}

/* The store directory p names (relative to the working directory), else the default. */
static mz_status store_dir(const mz_store_params *p, char *buf, size_t cap)
{
    if (!p->dir || !p->dir[0]) return default_dir(buf, cap);
    char cwd[PATH_MAX] = "";
    if (p->dir[0] != '/' && !getcwd(cwd, sizeof cwd)) cwd[0] = '\0';
    int n = snprintf(buf, cap, "%s%s%s", cwd, cwd[0] ? "/" : "", p->dir);
    return n < 0 || (size_t)n >= cap ? mz_fail(MZ_E_RANGE, "store directory path too long") : MZ_OK;
}

mz_status mz_store_open(mz_engine_t *e, const mz_store_params *p, mz_store_t **out)
{
    *out = NULL;
    if (!e) return mz_fail(MZ_E_INVAL, "null engine");
    mz_store_params d = mz_store_params_default();
    if (!p) p = &d;
    if ((unsigned)p->fsync > MZ_FSYNC_ALWAYS) return mz_fail(MZ_E_INVAL, "bad fsync policy");
    const char *codec = p->codec && p->codec[0] ? p->codec : "raw";
    if (strcmp(codec, "raw") != 0 && strcmp(codec, "q8") != 0)
        return mz_fail(MZ_E_INVAL, "store codec \"%.32s\": raw or q8", codec);
    mz_store_t *st = mz_calloc(1, sizeof *st);
    if (!st) return MZ_E_NOMEM;
    st->e = e;
    st->p = *p;
    pthread_mutex_init(&st->idx_mu, NULL);
    st->p.dir = NULL;
    snprintf(st->codec, sizeof st->codec, "%s", codec);
    st->p.codec = st->codec;
    mz_status s = store_dir(p, st->dir, sizeof st->dir);
    if (!s) s = make_store_dir(st->dir);
    mz_model_t *model = mz_engine_model(e);
    if (!s) s = model_identity(st, model->path, &st->model_id);
    if (s) {
        pthread_mutex_destroy(&st->idx_mu);
        free(st);
        return mz_fail_prefix(s, "session store");
    }
    st->tok_id = tokenizer_identity(model);
    st->n_vocab = mz_model_n_vocab(model);
    *out = st;
    return MZ_OK;
}

void mz_store_close(mz_store_t *st)
{
    if (!st) return;
    mz_store_index_close(st);
    pthread_mutex_destroy(&st->idx_mu);
    free(st);
}

const char *mz_store_dir(const mz_store_t *st) { return st ? st->dir : NULL; }

/* ---- manifests ------------------------------------------------------------------------------- */

mz_status mz_store_write_manifest(mz_store_t *st, const mz_manifest *m)
{
    char path[PATH_MAX], tmp[PATH_MAX];
    mz_status s;
    if ((s = mz_store_path(st, m->name, ".mzs", path, sizeof path)) ||
        (s = mz_store_path(st, m->name, ".mzs.tmp", tmp, sizeof tmp)))
        return s;
    size_t n = mz_manifest_size(m);
    unsigned char *buf = malloc(n);
    if (!buf) return mz_fail(MZ_E_NOMEM, "out of memory (manifest)");
    if ((s = mz_manifest_encode(m, buf, n))) {
        free(buf);
        return s;
    }
    int fd = mz_io.open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        s = mz_fail(MZ_E_IO, "cannot create %s: %s", tmp, strerror(errno));
        free(buf);
        return s;
    }
    size_t done = 0;
    while (done < n && !s) {
        ssize_t w = mz_io.pwrite(fd, buf + done, n - done, (off_t)done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) s = mz_fail(MZ_E_IO, "writing %s: %s", tmp, w < 0 ? strerror(errno) : "no progress");
        else done += (size_t)w;
    }
    if (!s && st->p.fsync != MZ_FSYNC_NONE && mz_io.fsync(fd) != 0)
        s = mz_fail(MZ_E_IO, "fsync %s: %s", tmp, strerror(errno));
    if (mz_io.close(fd) != 0 && !s) s = mz_fail(MZ_E_IO, "closing %s: %s", tmp, strerror(errno));
    free(buf);
    if (!s && rename(tmp, path) != 0) s = mz_fail(MZ_E_IO, "rename %s: %s", tmp, strerror(errno));
    if (s) {
        unlink(tmp); /* the previous manifest stays current */
        return s;
    }
    if (st->p.fsync != MZ_FSYNC_NONE) fsync_dir(st->dir);
    mz_store_index_note(st, m->name, (const mz_token *)m->tokens, m->n_tokens);
    return MZ_OK;
}

static mz_status read_file(const char *path, unsigned char **buf, size_t *n)
{
    *buf = NULL;
    *n = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return mz_fail(errno == ENOENT ? MZ_E_INVAL : MZ_E_IO, "cannot open %s: %s", path,
                       strerror(errno));
    struct stat fs;
    mz_status s = MZ_OK;
    if (fstat(fd, &fs) != 0 || !S_ISREG(fs.st_mode) || (size_t)fs.st_size > MANIFEST_MAX_BYTES) {
        s = mz_fail(MZ_E_FORMAT, "%s: not a regular file of at most 64 MiB", path);
    } else if (!(*buf = malloc((size_t)fs.st_size + 1))) {
        s = mz_fail(MZ_E_NOMEM, "out of memory (manifest)");
    } else {
        size_t got = 0;
        while (got < (size_t)fs.st_size) {
            ssize_t r = read(fd, *buf + got, (size_t)fs.st_size - got);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) break;
            got += (size_t)r;
        }
        if (got != (size_t)fs.st_size) s = mz_fail(MZ_E_IO, "short read of %s", path);
        *n = got;
    }
    close(fd);
    if (s) {
        free(*buf);
        *buf = NULL;
    }
    return s;
}

bool mz_store_has(const mz_store_t *st, const char *id)
{
    char path[PATH_MAX];
    if (!st || !mz_session_id_valid(id) || mz_store_path(st, id, ".mzs", path, sizeof path)) return false;
    return access(path, F_OK) == 0;
}

mz_status mz_store_read_manifest(mz_store_t *st, const char *id, mz_manifest *m)
{
    memset(m, 0, sizeof *m);
    char path[PATH_MAX];
    mz_status s = mz_store_path(st, id, ".mzs", path, sizeof path);
    if (s) return s;
    unsigned char *buf;
    size_t n;
    if ((s = read_file(path, &buf, &n))) return mz_fail_prefix(s, "session %s", id);
    s = mz_manifest_decode(buf, n, m);
    free(buf);
    if (s) return mz_fail_prefix(s, "session %s: manifest refused", id);
    if (strcmp(m->name, id) != 0) {
        mz_manifest_clear(m);
        return mz_fail(MZ_E_FORMAT, "session %s: the manifest names another session", id);
    }
    return MZ_OK;
}

/* ---- list, delete, limit ------------------------------------------------------------------- */

static uint64_t file_bytes(const char *path, uint64_t *mtime_ns)
{
    struct stat fs;
    if (lstat(path, &fs) != 0) return 0;
    if (mtime_ns) *mtime_ns = (uint64_t)fs.st_mtim.tv_sec * 1000000000ull + (uint64_t)fs.st_mtim.tv_nsec;
    return (uint64_t)fs.st_blocks * 512u;
}

static int cmp_age(const void *a, const void *b)
{
    const mz_stored_session *x = a, *y = b;
    if (x->updated_ns != y->updated_ns) return x->updated_ns < y->updated_ns ? -1 : 1;
    return strcmp(x->id, y->id);
}

mz_status mz_store_list_all(mz_store_t *st, mz_stored_session **out, size_t *n_out)
{
    *out = NULL;
    *n_out = 0;
    DIR *d = opendir(st->dir);
    if (!d) return mz_fail(MZ_E_IO, "cannot list %s: %s", st->dir, strerror(errno));
    mz_stored_session *v = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t len = strlen(de->d_name);
        if (len <= 4 || strcmp(de->d_name + len - 4, ".mzs") != 0) continue;
        char id[64];
        if (len - 4 >= sizeof id) continue;
        memcpy(id, de->d_name, len - 4);
        id[len - 4] = '\0';
        if (!mz_session_id_valid(id)) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            mz_stored_session *nv = realloc(v, cap * sizeof *nv);
            if (!nv) break;
            v = nv;
        }
        mz_stored_session *e = &v[n++];
        memset(e, 0, sizeof *e);
        snprintf(e->id, sizeof e->id, "%s", id);
        char p1[PATH_MAX], p2[PATH_MAX];
        if (mz_store_path(st, id, ".mzs", p1, sizeof p1) || mz_store_path(st, id, ".kv", p2, sizeof p2))
            continue;
        e->bytes = file_bytes(p1, &e->updated_ns) + file_bytes(p2, NULL);
        mz_manifest m;
        if (mz_store_read_manifest(st, id, &m) == MZ_OK) {
            e->readable = true;
            e->n_tokens = m.n_tokens;
            e->updated_ns = m.updated_ns;
            e->same_model = m.model_id == st->model_id && m.tok_id == st->tok_id;
            mz_manifest_clear(&m);
        }
    }
    closedir(d);
    if (n) qsort(v, n, sizeof *v, cmp_age);
    *out = v;
    *n_out = n;
    return MZ_OK;
}

size_t mz_store_list(mz_store_t *st, mz_stored_session *out, size_t cap)
{
    mz_stored_session *v;
    size_t n;
    if (!st || mz_store_list_all(st, &v, &n)) return 0;
    for (size_t i = 0; i < n && i < cap; i++) out[i] = v[i];
    free(v);
    return n;
}

/* Removes session id's files from dir: manifest and data file, and, with
 * with_history, the chat history `chat --session` keeps beside them (a
 * history left behind by a delete would bring the conversation back). */
static mz_status delete_in_dir(const char *dir, const char *id, bool sync_dir, bool with_history)
{
    if (!mz_session_id_valid(id))
        return mz_fail(MZ_E_INVAL, "bad session id \"%.80s\" (%s)", id ? id : "", mz_session_id_check(id, true));
    /* A session exists while one of its files that count does (not a
     * temporary one). path[1] is the data file. */
    static const struct {
        const char *suffix;
        bool history, counts;
    } file[] = {{".mzs", false, true}, {".kv", false, true}, {".chat", true, true},
                {".mzs.tmp", false, false}, {".chat.tmp", true, false}};
    enum { N_FILES = sizeof file / sizeof file[0] };
    char path[N_FILES][PATH_MAX];
    for (int i = 0; i < N_FILES; i++) {
        int n = snprintf(path[i], sizeof path[i], "%s/%s%s", dir, id, file[i].suffix);
        if (n < 0 || (size_t)n >= sizeof path[i]) return mz_fail(MZ_E_RANGE, "store path too long");
    }
    /* The data file's lock says whether a session (any process) has it open. */
    int fd = open(path[1], O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) != 0) {
        close(fd);
        return mz_fail(MZ_E_IO, "session %s is in use", id);
    }
    int gone = 0;
    for (int i = 0; i < N_FILES; i++)
        if ((with_history || !file[i].history) && unlink(path[i]) == 0 && file[i].counts) gone++;
    if (fd >= 0) close(fd);
    if (!gone) return mz_fail(MZ_E_INVAL, "no stored session %s", id);
    if (sync_dir) fsync_dir(dir);
    return MZ_OK;
}

/* delete_in_dir in the store's directory; the index forgets id unless its
 * files stay (in use: MZ_E_IO). */
static mz_status delete_stored(mz_store_t *st, const char *id, bool with_history)
{
    mz_status s = delete_in_dir(st->dir, id, st->p.fsync != MZ_FSYNC_NONE, with_history);
    if (s != MZ_E_IO && mz_session_id_valid(id)) mz_store_index_forget(st, id);
    return s;
}

mz_status mz_store_delete(mz_store_t *st, const char *id) { return delete_stored(st, id, true); }

mz_status mz_store_delete_kv(mz_store_t *st, const char *id) { return delete_stored(st, id, false); }

mz_status mz_store_delete_id(const mz_store_params *p, const char *id)
{
    mz_store_params d = mz_store_params_default();
    if (!p) p = &d;
    char dir[3968];
    mz_status s = store_dir(p, dir, sizeof dir);
    if (s) return s;
    struct stat ds;
    if (lstat(dir, &ds) != 0 || !S_ISDIR(ds.st_mode) || ds.st_uid != getuid())
        return mz_fail(MZ_E_IO, "no session store at %s", dir);
    return delete_in_dir(dir, id, p->fsync != MZ_FSYNC_NONE, true);
}

mz_status mz_store_enforce_limit(mz_store_t *st, size_t *n_deleted)
{
    if (n_deleted) *n_deleted = 0;
    if (!st->p.limit_bytes) return MZ_OK;
    mz_stored_session *v;
    size_t n;
    mz_status s = mz_store_list_all(st, &v, &n);
    if (s) return s;
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) total += v[i].bytes;
    for (size_t i = 0; i < n && total > st->p.limit_bytes; i++) {
        if (mz_store_delete(st, v[i].id) != MZ_OK) continue; /* in use: the next oldest */
        mz_log(MZ_LOG_INFO, "session store over its limit: deleted session %s (%" PRIu64 " bytes)",
               v[i].id, v[i].bytes);
        total -= v[i].bytes;
        if (n_deleted) (*n_deleted)++;
    }
    free(v);
    return MZ_OK;
}

/* ---- prefetch --------------------------------------------------------------------------------- */

/* POSIX_FADV_WILLNEED reads at most the device's readahead per call (8 MiB
 * on the work VM's virtio disk, whatever the range asked), so a file is
 * asked for in steps of this size. At most two steps are in flight: before
 * asking for step i + 1 the thread reads the last page of step i - 1 (which
 * waits for it), so the model file's reads, made meanwhile, queue behind two
 * steps at most instead of behind the whole file. */
#define PREFETCH_STEP ((off_t)4 << 20)

static void *prefetch_main(void *arg)
{
    int *fd = arg;
    char page[4096];
#ifdef SYS_ioprio_set
    /* The idle I/O class: the model file's reads (and the resume's own) go
     * first where the scheduler knows classes (mq-deadline, bfq); the
     * prefetch takes the gaps (about half of a cold model load is CPU). */
    (void)syscall(SYS_ioprio_set, 1 /* IOPRIO_WHO_PROCESS */, (pid_t)syscall(SYS_gettid),
                  3 << 13 /* IOPRIO_CLASS_IDLE */);
#endif
    for (int i = 0; i < 2; i++) {
        struct stat fs;
        if (fstat(fd[i], &fs) == 0)
            for (off_t off = 0; off < fs.st_size; off += PREFETCH_STEP) {
                (void)posix_fadvise(fd[i], off, PREFETCH_STEP, POSIX_FADV_WILLNEED);
                if (off >= PREFETCH_STEP && pread(fd[i], page, sizeof page, off - (off_t)sizeof page) < 0)
                    break;
            }
        close(fd[i]);
    }
    free(fd);
    return NULL;
}

mz_status mz_store_prefetch(const mz_store_params *p, const char *id)
{
    mz_store_params d = mz_store_params_default();
    if (!p) p = &d;
    if (!mz_session_id_valid(id))
        return mz_fail(MZ_E_INVAL, "bad session id \"%.80s\" (1..63 of A-Z a-z 0-9 _ . -)",
                       id ? id : "");
    char dir[3968], path[4096];
    mz_status s = store_dir(p, dir, sizeof dir);
    if (s) return s;
    /* Only a store mz_store_open would accept: a directory of this user. */
    struct stat ds;
    if (lstat(dir, &ds) != 0 || !S_ISDIR(ds.st_mode) || ds.st_uid != getuid())
        return mz_fail(MZ_E_IO, "no session store at %s", dir);
    int *fd = malloc(2 * sizeof *fd);
    if (!fd) return MZ_E_NOMEM;
    static const char *const suffix[2] = {".mzs", ".kv"};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s%s", dir, id, suffix[i]);
        /* O_NONBLOCK: a FIFO in the store's place must not hang the caller */
        fd[i] = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
        struct stat fs;
        if (fd[i] < 0 || fstat(fd[i], &fs) != 0 || !S_ISREG(fs.st_mode)) {
            s = fd[i] < 0 ? mz_fail(MZ_E_IO, "cannot open %s: %s", path, strerror(errno))
                          : mz_fail(MZ_E_IO, "%s is not a regular file", path);
            for (int k = 0; k <= i; k++)
                if (fd[k] >= 0) close(fd[k]);
            free(fd);
            return s;
        }
    }
    pthread_attr_t at;
    pthread_t th;
    bool started = false;
    if (pthread_attr_init(&at) == 0) {
        started = pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED) == 0 &&
                  pthread_create(&th, &at, prefetch_main, fd) == 0;
        pthread_attr_destroy(&at);
    }
    if (!started) {
        close(fd[0]);
        close(fd[1]);
        free(fd);
        return mz_fail(MZ_E_NOMEM, "cannot start the prefetch thread");
    }
    return MZ_OK;
}
