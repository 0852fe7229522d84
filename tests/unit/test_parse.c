/*
 * test_parse.c — src/core/parse.c: sizes and percentages given as text.
 * Expected values are the units' definitions (K/M/G = 2^10/2^20/2^30).
 */
#include "core/parse.h"
#include "testutil.h"

#include <string.h>

static void test_amount(void)
{
    double v = -1;
    bool pct = true;
    CHECK(mz_parse_amount("512M", &v, &pct) == 0 && v == 512.0 * 1048576 && !pct);
    CHECK(mz_parse_amount("2G", &v, &pct) == 0 && v == 2.0 * 1073741824 && !pct);
    CHECK(mz_parse_amount("300k", &v, &pct) == 0 && v == 300.0 * 1024);
    CHECK(mz_parse_amount("1.5GiB", &v, &pct) == 0 && v == 1.5 * 1073741824);
    CHECK(mz_parse_amount("12345", &v, &pct) == 0 && v == 12345 && !pct);
    CHECK(mz_parse_amount("12345B", &v, &pct) == 0 && v == 12345);
    CHECK(mz_parse_amount(" 40%", &v, &pct) == 0 && v == 40 && pct);
    CHECK(mz_parse_amount("100%", &v, &pct) == 0 && v == 100 && pct);
    CHECK(mz_parse_amount("100.5%", &v, &pct) == -1);
    CHECK(mz_parse_amount("40%B", &v, &pct) == -1);
    CHECK(mz_parse_amount("-1", &v, &pct) == -1);
    CHECK(mz_parse_amount("nan", &v, &pct) == -1);
    CHECK(mz_parse_amount("", &v, &pct) == -1);
    CHECK(mz_parse_amount("M", &v, &pct) == -1);
    CHECK(mz_parse_amount("5T", &v, &pct) == -1);
    CHECK(mz_parse_amount("5Mx", &v, &pct) == -1);
    CHECK(mz_parse_amount("5iB", &v, &pct) == -1); /* "i" only after a unit */
}

static void test_size(void)
{
    size_t n = 7;
    CHECK(mz_parse_size("512M", &n) == 0 && n == (size_t)512 << 20);
    CHECK(mz_parse_size("1.5G", &n) == 0 && n == (size_t)3 << 29);
    CHECK(mz_parse_size("1", &n) == 0 && n == 1);
    CHECK(mz_parse_size("1024P", &n) == -1);
    CHECK(mz_parse_size("1048576G", &n) == 0 && n == (size_t)1 << 50); /* 1 PiB: the largest */
    CHECK(mz_parse_size("1048577G", &n) == -1);
    n = 7;
    CHECK(mz_parse_size("0", &n) == -1 && n == 7);
    CHECK(mz_parse_size("0.5", &n) == -1);
    CHECK(mz_parse_size("40%", &n) == -1);
    CHECK(mz_parse_size("0x10", &n) == -1);
    CHECK(mz_parse_size("1e9", &n) == -1);
    CHECK(mz_parse_size("inf", &n) == -1);
    CHECK(mz_parse_size(NULL, &n) == -1);
    CHECK(n == 7);
}

int main(void)
{
    test_amount();
    test_size();
    return t_done("test_parse");
}
