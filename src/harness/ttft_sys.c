/*
 * ttft_sys.c — what `mzcache bench ttft` changes on the machine around its
 * measurement: directories, the page cache of the model and swap files
 * (posix_fadvise, /proc/sys/vm/drop_caches, checked with mincore) and a zram
 * swap device for os-paging (scripts/zram-swap.sh or zram-control, through
 * system(); root only). Nothing here is part of libmzcache.
 */
#define _GNU_SOURCE

#include "ttft_impl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int ttft_mkdir_p(const char *dir, mode_t mode)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s", dir);
    for (char *s = p + 1; *s; s++)
        if (*s == '/') {
            *s = 0;
            if (mkdir(p, mode) && errno != EEXIST) break;
            *s = '/';
        }
    if (mkdir(p, mode) && errno != EEXIST) {
        fprintf(stderr, "mzcache bench: mkdir %s: %s\n", dir, strerror(errno));
        return -1;
    }
    return 0;
}

/* ---- page cache: drop and check --------------------------------------------------- */

static void fadvise_dontneed(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
}

/* Bytes of the file present in the page cache (mincore over a read-only map). */
static size_t cached_bytes(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    struct stat st;
    size_t got = 0;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
        size_t len = (size_t)st.st_size, pg = (size_t)sysconf(_SC_PAGESIZE);
        void *p = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
        if (p != MAP_FAILED) {
            size_t np = (len + pg - 1) / pg;
            unsigned char *vec = malloc(np);
            if (vec && mincore(p, len, vec) == 0)
                for (size_t i = 0; i < np; i++) got += (vec[i] & 1) ? pg : 0;
            free(vec);
            munmap(p, len);
        }
    }
    close(fd);
    return got;
}

/* Calls fn on every regular file directly inside dir. */
static void for_dir_files(const char *dir, void (*fn)(const char *, void *), void *user)
{
    DIR *d = dir ? opendir(dir) : NULL;
    if (!d) return;
    struct dirent *e;
    char path[PATH_MAX];
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) fn(path, user);
    }
    closedir(d);
}

static void drop_one(const char *path, void *user)
{
    (void)user;
    fadvise_dontneed(path);
}

static void count_one(const char *path, void *user)
{
    *(size_t *)user += cached_bytes(path);
}

/* Empties the page cache of the model and swap files; returns the bytes of
 * them still cached afterwards (mincore). As root also drops the whole page
 * cache (/proc/sys/vm/drop_caches). */
size_t ttft_drop_caches(const char *model, const char *swap_dir, bool global)
{
    fadvise_dontneed(model);
    for_dir_files(swap_dir, drop_one, NULL);
    if (global && geteuid() == 0) {
        sync();
        int fd = open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
        if (fd >= 0) {
            if (write(fd, "3\n", 2) != 2) { /* not fatal: fadvise did the files */ }
            close(fd);
        }
    }
    size_t left = cached_bytes(model);
    for_dir_files(swap_dir, count_one, &left);
    return left;
}

/* ---- zram swap for os-paging -------------------------------------------------------- */

static int g_zram_id = -1;
static bool g_zram_script; /* set up by scripts/zram-swap.sh */

static int sh(const char *cmd)
{
    int rc = system(cmd);
    if (rc != 0) fprintf(stderr, "mzcache bench: '%s' failed (%d)\n", cmd, rc);
    return rc;
}

void ttft_zram_down(void)
{
    if (g_zram_id < 0) return;
    char cmd[256];
    if (g_zram_script) {
        snprintf(cmd, sizeof cmd, "scripts/zram-swap.sh down /dev/zram%d", g_zram_id);
        (void)sh(cmd);
        fprintf(stderr, "mzcache bench: zram%d swap removed\n", g_zram_id);
        g_zram_id = -1;
        g_zram_script = false;
        return;
    }
    snprintf(cmd, sizeof cmd, "swapoff /dev/zram%d", g_zram_id);
    (void)sh(cmd);
    snprintf(cmd, sizeof cmd, "echo %d > /sys/class/zram-control/hot_remove", g_zram_id);
    (void)sh(cmd);
    fprintf(stderr, "mzcache bench: zram%d swap removed\n", g_zram_id);
    g_zram_id = -1;
}

static void on_signal(int sig)
{
    ttft_zram_down(); /* not async-signal-safe, but the run is being abandoned anyway */
    signal(sig, SIG_DFL);
    raise(sig);
}

/* A zram swap device of size bytes (zstd as Android does, where available). */
int ttft_zram_up(size_t bytes)
{
    if (g_zram_id >= 0) return 0;
    if (geteuid() != 0) {
        fprintf(stderr, "mzcache bench: --zram needs root; os-paging uses its file-backed fallback\n");
        return -1;
    }
    /* The baselines' own set-up script when present (run from the repository root). */
    if (access("scripts/zram-swap.sh", X_OK) == 0) {
        char cmd[128], dev[64] = "";
        snprintf(cmd, sizeof cmd, "scripts/zram-swap.sh up %zu", bytes);
        FILE *p = popen(cmd, "r");
        int id = -1;
        if (p && fgets(dev, sizeof dev, p) && sscanf(dev, "/dev/zram%d", &id) == 1) g_zram_id = id;
        if (p && pclose(p) != 0) g_zram_id = -1;
        if (g_zram_id < 0) {
            fprintf(stderr, "mzcache bench: scripts/zram-swap.sh up failed; os-paging uses its "
                            "file-backed fallback\n");
            return -1;
        }
        g_zram_script = true;
        signal(SIGINT, on_signal);
        signal(SIGTERM, on_signal);
        fprintf(stderr, "mzcache bench: zram%d swap up (%zu MiB, scripts/zram-swap.sh)\n", id, bytes >> 20);
        return 0;
    }
    FILE *f = fopen("/sys/class/zram-control/hot_add", "r");
    int id = -1;
    if (!f || fscanf(f, "%d", &id) != 1) {
        if (f) fclose(f);
        fprintf(stderr, "mzcache bench: no zram here; os-paging uses its file-backed fallback\n");
        return -1;
    }
    fclose(f);
    g_zram_id = id;
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    char cmd[256];
    /* zstd as Android does where the kernel has it, else lz4, else the default. */
    const char *algo = "default";
    static const char *const algos[] = {"zstd", "lz4"};
    for (int k = 0; k < 2 && !strcmp(algo, "default"); k++) {
        snprintf(cmd, sizeof cmd, "echo %s > /sys/block/zram%d/comp_algorithm 2>/dev/null", algos[k], id);
        if (system(cmd) == 0) algo = algos[k];
    }
    snprintf(cmd, sizeof cmd, "echo %zu > /sys/block/zram%d/disksize", bytes, id);
    if (sh(cmd)) goto fail;
    snprintf(cmd, sizeof cmd, "mkswap /dev/zram%d >/dev/null && swapon -p 100 /dev/zram%d", id, id);
    if (sh(cmd)) goto fail;
    fprintf(stderr, "mzcache bench: zram%d swap up (%zu MiB, %s)\n", id, bytes >> 20, algo);
    return 0;
fail:
    ttft_zram_down();
    return -1;
}

/* What our zram device holds now (/sys/block/zramN/mm_stat: orig_data_size,
 * compr_data_size, mem_used_total) and its algorithm (the bracketed entry of
 * comp_algorithm). False when there is none. */
bool ttft_zram_stat(double *orig_mib, double *compr_mib, double *used_mib, char *algo, size_t cap)
{
    if (g_zram_id < 0) return false;
    char path[96];
    snprintf(path, sizeof path, "/sys/block/zram%d/mm_stat", g_zram_id);
    FILE *f = fopen(path, "r");
    unsigned long long o = 0, c = 0, u = 0;
    bool ok = f && fscanf(f, "%llu %llu %llu", &o, &c, &u) == 3;
    if (f) fclose(f);
    if (!ok) return false;
    *orig_mib = (double)o / (1 << 20);
    *compr_mib = (double)c / (1 << 20);
    *used_mib = (double)u / (1 << 20);
    snprintf(path, sizeof path, "/sys/block/zram%d/comp_algorithm", g_zram_id);
    snprintf(algo, cap, "?");
    char line[256];
    if ((f = fopen(path, "r"))) {
        if (fgets(line, sizeof line, f)) {
            char *a = strchr(line, '['), *b = a ? strchr(a, ']') : NULL;
            if (a && b && b - a - 1 < (long)cap) snprintf(algo, cap, "%.*s", (int)(b - a - 1), a + 1);
        }
        fclose(f);
    }
    return true;
}
