/*
 * testutil.h — tiny test harness: each test file is a program that counts
 * checks and exits 0 (pass), 1 (fail) or 77 (skipped: a needed feature or
 * file is missing, and it says which).
 */
#ifndef MZ_TESTUTIL_H
#define MZ_TESTUTIL_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern int t_checks;
extern int t_failures;
extern int t_parts_skipped;     /* t_skip_part calls */

#define T_EXIT_SKIP 77

#define CHECK(cond)                                                                   \
    do {                                                                              \
        t_checks++;                                                                   \
        if (!(cond)) {                                                                \
            t_failures++;                                                             \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);           \
        }                                                                             \
    } while (0)

#define CHECK_MSG(cond, ...)                                                          \
    do {                                                                              \
        t_checks++;                                                                   \
        if (!(cond)) {                                                                \
            t_failures++;                                                             \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);           \
            fprintf(stderr, __VA_ARGS__);                                             \
            fputc('\n', stderr);                                                      \
        }                                                                             \
    } while (0)

/* T_UNDER_TSAN: 1 in a ThreadSanitizer build (GCC's macro or Clang's
 * feature test), else 0; the slowest cases run shorter there. */
#if defined(__SANITIZE_THREAD__)
#define T_UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define T_UNDER_TSAN 1
#endif
#endif
#ifndef T_UNDER_TSAN
#define T_UNDER_TSAN 0
#endif

#define CHECK_EQ_INT(a, b) CHECK_MSG((long long)(a) == (long long)(b), "%lld != %lld", \
                                     (long long)(a), (long long)(b))

/* Prints "N passed, N failed" (and how many parts were skipped) and returns
 * the exit code: 1 on a failure, else 77 when parts were skipped and no
 * check ran, else 0. */
int t_done(const char *name);
/* A part of a test that cannot run here: "SKIP part PART: WHY" on stdout
 * (listed by scripts/test-skips.sh after `make test`), counted by t_done. */
void t_skip_part(const char *part, const char *why);
/* Prints the reason and returns 77. */
int t_skip(const char *name, const char *why);

/* scripts/zram-swap.sh up SIZE ("256M"), run from the repository root
 * once its check passed: the device's path in dev ("/dev/zram0"). False,
 * with a failed check, when the script gave no device; a device it gave
 * with a failed exit is a failed check too. */
bool t_zram_up(const char *size, char *dev, size_t cap);

/* Path of the bundled real model (models/SmolLM2-135M-Instruct.Q4_1.gguf), or
 * NULL if absent. */
const char *t_real_model_path(void);
/* The real Gemma 3 270M Q4_K_M file (scripts/fetch-gemma3.sh; MZ_TEST_GEMMA
 * names another), or NULL when it is not there. */
const char *t_gemma_model_path(void);
/* A scratch directory for this test run (created on demand). */
const char *t_tmp_dir(void);
/* t_tmp_dir()/name; the same string for the same name, valid until the
 * process ends (so several may be held at once). */
const char *t_tmp_path(const char *name);
/* Reads a whole file; NULL on failure. Caller frees. */
char *t_read_file(const char *path, size_t *len);
/* Simple deterministic RNG for test data. */
unsigned long long t_rand_u64(unsigned long long *state);
float t_rand_float(unsigned long long *state); /* uniform in [-1, 1) */
float t_rand_normal(unsigned long long *state); /* standard normal (Box-Muller) */
/* CPU time of the calling thread, for throughput figures that ignore other load. */
double t_cpu_ms(void);



/* Pages of path resident in the page cache, by mincore (-1 if it cannot tell). */
long t_resident_pages(const char *path);

/* Whitespace-separated integers / floats of s into out[cap]; returns the count. */
size_t t_parse_ids(const char *s, int32_t *out, size_t cap);
size_t t_parse_floats(const char *s, float *out, size_t cap);

/* Hex SHA-256 of a file; 0 on success. */
int t_sha256_file(const char *path, char hex[65]);
#endif
