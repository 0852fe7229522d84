#define _GNU_SOURCE
#include "testutil.h"

#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int t_checks;
int t_failures;

int t_parts_skipped;

void t_skip_part(const char *part, const char *why)
{
    /* One line per part in a fixed form: scripts/test-skips.sh lists them
     * after `make test`. */
    printf("SKIP part %s: %s\n", part, why);
    fflush(stdout);
    t_parts_skipped++;
}

int t_done(const char *name)
{
    printf("%s: %d passed, %d failed", name, t_checks - t_failures, t_failures);
    if (t_parts_skipped) printf(", %d part%s skipped (SKIP lines above)", t_parts_skipped, t_parts_skipped == 1 ? "" : "s");
    putchar('\n');
    if (t_failures) return 1;
    /* Nothing checked and something skipped: the test did not run. */
    return t_checks == 0 && t_parts_skipped ? T_EXIT_SKIP : 0;
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

const char *t_gemma_model_path(void)
{
    const char *path = getenv("MZ_TEST_GEMMA");
    if (!path || !*path) path = "models/gemma-3-270m-q4_k_m.gguf";
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

/* Every path handed out, kept for the process (reachable from here, so no
 * leak report): a caller may hold several at once. */
typedef struct tmp_path {
    struct tmp_path *next;
    char path[];
} tmp_path;

const char *t_tmp_path(const char *name)
{
    static tmp_path *paths;
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    char want[2048];
    snprintf(want, sizeof want, "%s/%s", t_tmp_dir(), name);
    pthread_mutex_lock(&mu);
    tmp_path *p = paths;
    while (p && strcmp(p->path, want)) p = p->next;
    if (!p && (p = malloc(sizeof *p + strlen(want) + 1))) {
        strcpy(p->path, want);
        p->next = paths;
        paths = p;
    }
    pthread_mutex_unlock(&mu);
    return p ? p->path : NULL;
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

/* SHA-256 (FIPS 180-4), for checking generated files against golden data. */
static const unsigned int k_sha[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

#define ROR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void sha_block(unsigned int h[8], const unsigned char *p)
{
    unsigned int w[64];
    for (int i = 0; i < 16; i++)
        w[i] = (unsigned int)p[4 * i] << 24 | (unsigned int)p[4 * i + 1] << 16 |
               (unsigned int)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        unsigned int s0 = ROR(w[i - 15], 7) ^ ROR(w[i - 15], 18) ^ (w[i - 15] >> 3);
        unsigned int s1 = ROR(w[i - 2], 17) ^ ROR(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    unsigned int a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
    for (int i = 0; i < 64; i++) {
        unsigned int t1 = hh + (ROR(e, 6) ^ ROR(e, 11) ^ ROR(e, 25)) + ((e & f) ^ (~e & g)) + k_sha[i] + w[i];
        unsigned int t2 = (ROR(a, 2) ^ ROR(a, 13) ^ ROR(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        hh = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e; h[5] += f; h[6] += g; h[7] += hh;
}

int t_sha256_file(const char *path, char hex[65])
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    unsigned int h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                         0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    static unsigned char buf[1 << 16];
    unsigned long long total = 0;
    size_t n, fill = 0;
    while ((n = fread(buf + fill, 1, sizeof buf - fill, f)) > 0) {
        fill += n;
        total += n;
        size_t whole = fill / 64 * 64;
        for (size_t i = 0; i < whole; i += 64) sha_block(h, buf + i);
        memmove(buf, buf + whole, fill - whole);
        fill -= whole;
    }
    fclose(f);
    buf[fill++] = 0x80;
    if (fill > 56) {
        memset(buf + fill, 0, 64 - fill);
        sha_block(h, buf);
        fill = 0;
    }
    memset(buf + fill, 0, 56 - fill);
    for (int i = 0; i < 8; i++) buf[56 + i] = (unsigned char)((total * 8) >> (56 - 8 * i));
    sha_block(h, buf);
    for (int i = 0; i < 8; i++) sprintf(hex + 8 * i, "%08x", h[i]);
    return 0;
}

/* Pages of path resident in the page cache (-1 if it cannot tell). */
long t_resident_pages(const char *path)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0) return -1;
    struct stat st;
    long n = -1;
    if (fstat(fd, &st) == 0 && st.st_size > 0) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
        if (p != MAP_FAILED) {
            size_t pages = ((size_t)st.st_size + 4095) / 4096;
            unsigned char *v = malloc(pages);
            if (v && mincore(p, (size_t)st.st_size, v) == 0) {
                n = 0;
                for (size_t i = 0; i < pages; i++) n += v[i] & 1;
            }
            free(v);
            munmap(p, (size_t)st.st_size);
        }
    } else if (st.st_size == 0) {
        n = 0;
    }
    close(fd);
    return n;
}

float t_rand_normal(unsigned long long *state)
{
    float u1 = 0.5f * (t_rand_float(state) + 1.0f), u2 = t_rand_float(state);
    if (u1 < 1e-7f) u1 = 1e-7f;
    return sqrtf(-2.0f * logf(u1)) * cosf(3.14159265f * u2);
}

double t_cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

size_t t_parse_ids(const char *s, int32_t *out, size_t cap)
{
    size_t n = 0;
    char *end;
    while (n < cap) {
        long v = strtol(s, &end, 10);
        if (end == s) break;
        out[n++] = (int32_t)v;
        s = end;
    }
    return n;
}

size_t t_parse_floats(const char *s, float *out, size_t cap)
{
    size_t n = 0;
    char *end;
    while (n < cap) {
        float v = strtof(s, &end);
        if (end == s) break;
        out[n++] = v;
        s = end;
    }
    return n;
}

bool t_zram_up(const char *size, char *dev, size_t cap)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "sh scripts/zram-swap.sh up %s", size);
    FILE *p = popen(cmd, "r");
    dev[0] = '\0';
    if (!p || !fgets(dev, (int)cap, p)) {
        if (p) pclose(p);
        CHECK_MSG(0, "zram-swap.sh up failed although check passed");
        return false;
    }
    int prc = pclose(p);
    dev[strcspn(dev, "\n")] = '\0';
    CHECK(prc == 0 && strncmp(dev, "/dev/zram", 9) == 0);
    return true;
}
