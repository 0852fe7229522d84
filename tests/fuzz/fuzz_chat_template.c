/*
 * fuzz_chat_template.c — libFuzzer target for the chat template recogniser
 * and the formats it picks (src/tokenizer/chat.c).
 *
 * The input is split at its first NUL byte: the part before is the
 * template text (tokenizer.chat_template), the part after is one message's
 * content. For every input:
 *   - recognising the template never fails, and the family is a known one or
 *     "unknown";
 *   - formatting a system/user/assistant/user conversation either refuses
 *     (unknown family only, MZ_E_UNSUPPORTED) or reports the same length to
 *     a size query and to the real call, NUL-terminated;
 *   - the input read as a family name either names a family or is refused.
 *
 * Build: clang -fsanitize=fuzzer,address,undefined (see CMake MZ_FUZZ).
 */
#include "tokenizer/tokenizer_impl.h"

#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(bool ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_chat_template: check failed: %s\n", what);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1 << 16) return 0;
    char *copy = malloc(size + 1);
    memcpy(copy, data, size);
    copy[size] = '\0';
    size_t tl = strlen(copy); /* the template: up to the first NUL */
    const char *content = tl < size ? copy + tl + 1 : "";

    mz_chat_tmpl c;
    check(mz_chat_tmpl_init(copy, tl, (size & 1) ? "gemma3" : NULL, &c) == MZ_OK, "init");
    check(c.kind >= MZ_CHAT_CHATML && c.kind < MZ_CHAT_KIND_COUNT, "kind in range");
    const mz_chat_msg msgs[4] = {{"system", content}, {"user", content}, {"assistant", content}, {"user", "x"}};
    for (size_t n_msgs = 0; n_msgs <= 4; n_msgs++) {
        size_t need = 0;
        mz_status st = mz_chat_tmpl_format(&c, msgs, n_msgs, n_msgs & 1, NULL, 0, &need);
        if (c.kind == MZ_CHAT_UNKNOWN) {
            check(st == MZ_E_UNSUPPORTED, "unknown family refused");
            continue;
        }
        check(st == MZ_E_RANGE, "size query");
        char *buf = malloc(need + 1);
        size_t n = 0;
        check(mz_chat_tmpl_format(&c, msgs, n_msgs, n_msgs & 1, buf, need + 1, &n) == MZ_OK && n == need &&
                  strlen(buf) == need,
              "format");
        free(buf);
    }
    mz_chat_tmpl_free(&c);

    mz_chat_kind k;
    mz_status st = mz_chat_kind_from_name(copy, &k);
    check(st == MZ_E_INVAL || (st == MZ_OK && k < MZ_CHAT_UNKNOWN && !strcmp(mz_chat_kind_name(k), copy)),
          "name");
    free(copy);
    return 0;
}
