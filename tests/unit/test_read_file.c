/*
 * test_read_file.c — src/core/core.c's mz_read_file: whole files, the size
 * limit at its edge, files whose size stat does not know (/proc), and the
 * errors (missing file, directory), each naming the path.
 */
#include "core/core.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

static const char *write_bytes(const char *name, size_t n)
{
    const char *path = t_tmp_path(name);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return path;
    for (size_t i = 0; i < n; i++) fputc((int)('a' + i % 26), f);
    CHECK(fclose(f) == 0);
    return path;
}

static void test_sizes(void)
{
    /* Past the first buffer (8 KiB) and its doublings, and the edge of the
     * limit: exactly max_bytes is read, one more is refused. */
    static const size_t sizes[] = {0, 1, 8191, 8192, 8193, 20000, 65536};
    for (size_t k = 0; k < MZ_ARRAY_LEN(sizes); k++) {
        char name[32];
        snprintf(name, sizeof name, "read-%zu", sizes[k]);
        const char *path = write_bytes(name, sizes[k]);
        char *text = (char *)1;
        size_t len = 1;
        CHECK_EQ_INT(mz_read_file(path, 1 << 20, &text, &len), MZ_OK);
        CHECK(len == sizes[k] && text != NULL);
        if (!text) continue;
        CHECK(text[len] == '\0');
        bool same = true;
        for (size_t i = 0; i < len; i++) same &= text[i] == (char)('a' + i % 26);
        CHECK_MSG(same, "%zu bytes read back differently", sizes[k]);
        free(text);
        if (sizes[k] == 0) continue;
        CHECK_EQ_INT(mz_read_file(path, sizes[k], &text, &len), MZ_OK);
        CHECK(len == sizes[k]);
        free(text);
        text = (char *)1;
        CHECK_EQ_INT(mz_read_file(path, sizes[k] - 1, &text, &len), MZ_E_RANGE);
        CHECK(text == NULL && len == 0);
        CHECK_MSG(strstr(mz_last_error(), name) != NULL, "%s", mz_last_error());
        mz_clear_error();
    }
}

static void test_proc_and_errors(void)
{
    char *text;
    size_t len;
    /* stat says 0 bytes; the content is there all the same. */
    CHECK_EQ_INT(mz_read_file("/proc/self/status", 1 << 20, &text, &len), MZ_OK);
    CHECK(len > 0 && text && strstr(text, "Name:") != NULL);
    free(text);
    const char *missing = t_tmp_path("no-such-file");
    text = (char *)1;
    CHECK_EQ_INT(mz_read_file(missing, 1 << 20, &text, &len), MZ_E_IO);
    CHECK(text == NULL);
    CHECK_MSG(strstr(mz_last_error(), "no-such-file") != NULL, "%s", mz_last_error());
    mz_clear_error();
    /* A directory opens on Linux but does not read. */
    CHECK_EQ_INT(mz_read_file(t_tmp_dir(), 1 << 20, &text, &len), MZ_E_IO);
    CHECK(text == NULL);
    mz_clear_error();
}

int main(void)
{
    test_sizes();
    test_proc_and_errors();
    return t_done("test_read_file");
}
