#include "testutil.h"

#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

int t_checks;
int t_failures;

int t_done(const char *name)
{
    printf("%s: %d passed, %d failed\n", name, t_checks - t_failures, t_failures);
    return t_failures ? 1 : 0;
}

int t_skip(const char *name, const char *why)
{
    printf("%s: skipped: %s\n", name, why);
    return T_EXIT_SKIP;
}

const char *t_real_model_path(void)
{
    static const char *path = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
    return access(path, R_OK) == 0 ? path : NULL;
}

const char *t_tmp_dir(void)
{
    static char dir[1024];
    if (!dir[0]) {
        const char *e = getenv("MZ_TEST_TMP");
        snprintf(dir, sizeof dir, "%s", e && *e ? e : "build/test-tmp");
        mkdir(dir, 0700);
    }
    return dir;
}

const char *t_tmp_path(const char *name)
{
    static char path[2048];
    snprintf(path, sizeof path, "%s/%s", t_tmp_dir(), name);
    return path;
}

char *t_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = '\0';
        if (len) *len = (size_t)n;
    }
    return buf;
}

unsigned long long t_rand_u64(unsigned long long *s)
{
    unsigned long long z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

float t_rand_float(unsigned long long *s)
{
    return (float)((double)(t_rand_u64(s) >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}
