/*
 * The command-line number parser (app/cli/cli_num.c, compiled in): what
 * atoi/atof accepted silently is refused, and the error says which kind.
 */
#include "testutil.h"

#include "../../app/cli/cli_num.c"

int main(void)
{
    long long v = 0;
    CHECK_EQ_INT(cli_num_i64("8", 0, 10, &v), CLI_NUM_OK);
    CHECK_EQ_INT(v, 8);
    CHECK_EQ_INT(cli_num_i64("-1", -1, 10, &v), CLI_NUM_OK);
    CHECK_EQ_INT(v, -1);
    v = 99;
    const char *syntax[] = {"abc", "2.5", "8x", " 8", "8 ", "0x10", "--1", "+-1", "1e3", "٣"};
    for (size_t i = 0; i < sizeof syntax / sizeof *syntax; i++)
        CHECK_MSG(cli_num_i64(syntax[i], -100, 100, &v) == CLI_NUM_SYNTAX, "'%s'", syntax[i]);
    CHECK_EQ_INT(cli_num_i64("", 0, 10, &v), CLI_NUM_EMPTY);
    CHECK_EQ_INT(cli_num_i64("-3", 0, 256, &v), CLI_NUM_RANGE);
    CHECK_EQ_INT(cli_num_i64("1000000000", 0, 1 << 20, &v), CLI_NUM_RANGE);
    CHECK_EQ_INT(cli_num_i64("99999999999999999999999", LLONG_MIN, LLONG_MAX, &v), CLI_NUM_RANGE);
    CHECK_EQ_INT(v, 99); /* untouched on refusal */

    unsigned long long u = 0;
    CHECK_EQ_INT(cli_num_u64("0x5eed", &u), CLI_NUM_OK);
    CHECK_EQ_INT(u, 0x5eed);
    CHECK_EQ_INT(cli_num_u64("18446744073709551615", &u), CLI_NUM_OK);
    CHECK(u == UINT64_MAX);
    CHECK_EQ_INT(cli_num_u64("18446744073709551616", &u), CLI_NUM_RANGE);
    CHECK_EQ_INT(cli_num_u64("-1", &u), CLI_NUM_SYNTAX); /* strtoull would wrap it */
    CHECK_EQ_INT(cli_num_u64("0x", &u), CLI_NUM_SYNTAX);

    double d = 0;
    CHECK_EQ_INT(cli_num_double("0.95", 0, 1, &d), CLI_NUM_OK);
    CHECK(d == 0.95);
    CHECK_EQ_INT(cli_num_double(".5", 0, 1, &d), CLI_NUM_OK);
    CHECK_EQ_INT(cli_num_double("1e-2", 0, 1, &d), CLI_NUM_OK);
    const char *dsyntax[] = {"abc", "nan", "inf", "-inf", "0x1p3", "1.5x", " 1", "."};
    for (size_t i = 0; i < sizeof dsyntax / sizeof *dsyntax; i++)
        CHECK_MSG(cli_num_double(dsyntax[i], -100, 100, &d) == CLI_NUM_SYNTAX, "'%s'", dsyntax[i]);
    CHECK_EQ_INT(cli_num_double("1.5", 0, 1, &d), CLI_NUM_RANGE);
    CHECK_EQ_INT(cli_num_double("1e999", 0, 1e9, &d), CLI_NUM_RANGE);
    return t_done("test_cli_num");
}
