/*
 * fuzz_swapslot.c — libFuzzer target for the swap record header parser
 * (mz_swap_rec_decode). Invariants: never crashes; whatever it accepts
 * re-encodes to the same 64 bytes; a rejected header leaves *r zeroed.
 */
#include "io/swapfile.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mz_swap_rec r;
    const char *why = NULL;
    mz_status s = mz_swap_rec_decode(data, size, &r, &why);
    if (!why) __builtin_trap();
    if (s == MZ_OK) {
        unsigned char again[MZ_SWAP_REC_HDR_BYTES];
        mz_swap_rec_encode(&r, again);
        if (memcmp(again, data, MZ_SWAP_REC_HDR_BYTES) != 0) __builtin_trap();
    } else {
        static const mz_swap_rec zero;
        if (s != MZ_E_CORRUPT || memcmp(&r, &zero, sizeof r) != 0) __builtin_trap();
    }
    /* Encode of arbitrary fields must decode back (when in range). */
    if (size >= 40) {
        mz_swap_rec in;
        memcpy(&in.len, data, 8);
        memcpy(&in.tag, data + 8, 8);
        memcpy(&in.seq, data + 16, 8);
        memcpy(&in.payload_hash, data + 24, 8);
        in.flags = data[32] & 1u;
        in.len &= ((uint64_t)1 << 35) - 1; /* stays within the 2^48 bound after << 12 */
        if (in.flags) in.len = (in.len | 1) << 12;
        unsigned char h[MZ_SWAP_REC_HDR_BYTES];
        mz_swap_rec_encode(&in, h);
        mz_swap_rec out;
        if (mz_swap_rec_decode(h, sizeof h, &out, &why) != MZ_OK) __builtin_trap();
        if (out.len != in.len || out.tag != in.tag || out.seq != in.seq ||
            out.payload_hash != in.payload_hash || out.flags != in.flags)
            __builtin_trap();
    }
    return 0;
}
