/* cli_num.h — checked parsing of command-line numbers (cli_num.c). */
#ifndef MZ_CLI_NUM_H
#define MZ_CLI_NUM_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum cli_num_err {
    CLI_NUM_OK = 0,
    CLI_NUM_EMPTY,  /* "" */
    CLI_NUM_SYNTAX, /* not entirely a number of that kind: "abc", "2.5" for a count, "8x" */
    CLI_NUM_RANGE,  /* a number, outside [min, max] or beyond the type */
} cli_num_err;

/* The whole string must be the number (no white space, no trailing text);
 * *out is written only on CLI_NUM_OK. Decimal; cli_num_u64 also takes 0x hex. */
cli_num_err cli_num_i64(const char *s, long long min, long long max, long long *out);
cli_num_err cli_num_u64(const char *s, unsigned long long *out);
cli_num_err cli_num_double(const char *s, double min, double max, double *out);

/* The same for option OPT's value V, printing "mzcache: OPT: ..." with the
 * accepted range on stderr; 0 = ok, -1 = refused (*out untouched). */
int cli_opt_int(const char *opt, const char *v, int min, int max, int *out);
int cli_opt_size(const char *opt, const char *v, size_t min, size_t max, size_t *out);
int cli_opt_u64(const char *opt, const char *v, uint64_t *out);
int cli_opt_double(const char *opt, const char *v, double min, double max, double *out);
int cli_opt_float(const char *opt, const char *v, double min, double max, float *out);

#endif
