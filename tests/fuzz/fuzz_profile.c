/*
 * fuzz_profile.c — libFuzzer target for the device profile's JSON parser
 * (mz_profile_from_json, src/profile/profile_json.c). Invariants: never
 * crashes or reads past the input; an accepted profile serialises to text
 * that parses again to the same serialisation (a fixed point); a refused
 * one is MZ_E_FORMAT.
 */
#include "mem/profile.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* An exact-size copy, so reading past the end is caught by ASan. */
    char *text = malloc(size ? size : 1);
    if (!text) return 0;
    if (size) memcpy(text, data, size);
    mz_device_profile p;
    mz_status s = mz_profile_from_json(text, size, &p);
    free(text);
    if (s != MZ_OK) {
        if (s != MZ_E_FORMAT) __builtin_trap();
        return 0;
    }
    static char a[1 << 16], b[1 << 16];
    size_t la = mz_profile_to_json(&p, a, sizeof a);
    if (la >= sizeof a) return 0;
    mz_device_profile q;
    if (mz_profile_from_json(a, la, &q) != MZ_OK) __builtin_trap();
    size_t lb = mz_profile_to_json(&q, b, sizeof b);
    if (la != lb || memcmp(a, b, la) != 0) __builtin_trap();
    return 0;
}
