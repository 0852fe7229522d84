/*
 * cli_env.c — what the subcommands set up before the real work starts:
 * checks, so that a bad setting is reported at once with its option's name
 * instead of at the first eviction (the swap directory) or as a slow, huge
 * allocation (the context length); the device-profile note for commands that
 * evict; and the signal handling that lets chat and demo stop work and still
 * clean up (the swap file).
 */
#define _GNU_SOURCE
#include "cli.h"

#include "core/core.h"
#include "io/swapfile.h"
#include "mem/profile.h"
#include "gguf/gguf.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int cli_check_swap_dir(const char *cmd, const char *dir)
{
    char def[PATH_MAX];
    const char *what = "--swap-dir";
    if (!dir || !dir[0]) {
        if (mz_swapfile_default_dir(def, sizeof def)) {
            fprintf(stderr, "mzcache %s: no swap directory: %s (give one with --swap-dir)\n", cmd,
                    mz_last_error());
            return -1;
        }
        dir = def;
        what = "the default swap directory";
    }
    char tmp[PATH_MAX];
    size_t n = strlen(dir);
    if (n >= sizeof tmp - 32) {
        fprintf(stderr, "mzcache %s: %s %s: path too long\n", cmd, what, dir);
        return -1;
    }
    /* mkdir -p, every directory made 0700 whatever the umask (as the swap
     * file code does): the swap file holds the conversation. */
    if (mz_dir_make_private(dir) != MZ_OK) {
        fprintf(stderr, "mzcache %s: %s %s is not usable: %s\n", cmd, what, dir, mz_last_error());
        return -1;
    }
    /* access() is not enough: root passes it on a read-only file system. */
    int k = snprintf(tmp, sizeof tmp, "%s/.mzcache-probe-XXXXXX", dir);
    if (k < 0 || (size_t)k >= sizeof tmp) return -1; /* not reached: the length was checked */
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "mzcache %s: %s %s is not writable: %s\n", cmd, what, dir, strerror(errno));
        return -1;
    }
    close(fd);
    unlink(tmp);
    /* Swap files of processes that died (kill -9, a crash) are useless to
     * anyone: removed here, as serve does at start. */
    int n_stale = 0;
    if (mz_swapfile_cleanup_stale(dir, &n_stale) == MZ_OK && n_stale)
        fprintf(stderr, "mzcache %s: removed %d stale swap file%s left by a process that died\n", cmd, n_stale,
                n_stale > 1 ? "s" : "");
    mz_clear_error();
    return 0;
}

static void fit_ctx(cli_opts *o, int n_ctx_train)
{
    if (n_ctx_train <= 0) return;
    if (!o->ctx_given) {
        if (o->n_ctx > n_ctx_train) o->n_ctx = n_ctx_train;
        return;
    }
    int n = o->n_ctx ? o->n_ctx : n_ctx_train;
    if (n > n_ctx_train)
        fprintf(stderr, "mzcache: warning: -c %d is more than the %d tokens this model was trained for; "
                        "answers past %d tokens are likely to degrade, and the context's memory grows "
                        "with -c\n",
                o->n_ctx, n_ctx_train, n_ctx_train);
}

void cli_fit_ctx(cli_opts *o, const mz_model_t *m)
{
    mz_model_info mi;
    mz_model_get_info(m, &mi);
    fit_ctx(o, mi.n_ctx_train);
}

void cli_fit_ctx_file(cli_opts *o)
{
    /* The metadata only (the loader's key and default): serve loads the
     * model itself, later. A file that does not parse is the loader's to
     * report. */
    mz_gguf *g = NULL;
    if (!o->model || mz_gguf_open(o->model, &g)) {
        mz_clear_error();
        return;
    }
    mz_gguf_str arch;
    char key[96];
    uint32_t n = 2048;
    if (!mz_gguf_get_str(g, "general.architecture", &arch) && arch.len < 64) {
        snprintf(key, sizeof key, "%.*s.context_length", (int)arch.len, arch.ptr);
        if (mz_gguf_get_u32(g, key, &n)) n = 2048;
    }
    mz_gguf_free(g);
    mz_clear_error();
    fit_ctx(o, n > INT_MAX ? INT_MAX : (int)n);
}

volatile sig_atomic_t cli_quit;

static void on_signal(int sig)
{
    cli_interrupted = 1;
    if (sig != SIGINT) cli_quit = 1;
}

static sigset_t catch_set(void)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    return set;
}

void cli_signals_catch(void)
{
    sigset_t set = catch_set();
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

void cli_signals_unblock(void)
{
    sigset_t set = catch_set();
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
}

void cli_note_profile(const char *cmd)
{
    char def[1024];
    mz_device_profile p;
    if (mz_profile_default_path(def, sizeof def) == MZ_OK && mz_profile_load(def, &p) == MZ_OK) return;
    mz_clear_error();
    fprintf(stderr, "mzcache %s: no device profile yet: eviction plans with a built-in estimate of this "
                    "machine; run `mzcache profile` once to measure it\n",
            cmd);
}
