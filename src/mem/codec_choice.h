/*
 * codec_choice.h — which KV codec a session gets when it names none
 * (kv_codec NULL or "auto").
 *
 * Eviction's restore is bounded by two paths (policy.h): decoding the
 * compressed stack, spread over the decoding threads, and reading stored
 * units from one disk. Fewer bytes a chunk (q8-q4r: K at 8 bits, V at 4
 * bits after a rotation, 0.41 of F16 against q8's 0.53) let the memory path
 * free more, so less leaves through the disk, but decode slower (the
 * rotation). Which wins is a property of the machine: on the 16-vCPU
 * machine, 7 decoding threads beside a 1 GB/s disk, q8 is disk-bound at
 * half the memory and q8-q4r is not; on two cores one decoding thread is
 * the long pole and q8-q4r's slower decode loses.
 *
 * So the choice asks the owners of both answers instead of a rule of its
 * own: the device profile gives each candidate's per-unit times
 * (mz_profile_derive) and the hybrid planner places half of a session's
 * evictable bytes (every weight block and every KV chunk of its context)
 * with each; the candidate whose planned restore (the longer of the two
 * paths, mz_policy_restore_times) is shorter by more than a tenth wins,
 * and q8, the better codec (docs/CODECS.md), keeps ties. q8-q4r is a
 * candidate only where the profile measured it (a measured profile has
 * every registered codec; the built-in estimate has not, so without a
 * profile the answer is q8). Pure: the same profile and shape always give
 * the same codec.
 */
#ifndef MZ_CODEC_CHOICE_H
#define MZ_CODEC_CHOICE_H
#include "profile.h"

#include <stddef.h>
#include <stdint.h>

/* The candidates, best quality first. */
#define MZ_CODEC_AUTO_N 2
MZ_INTERNAL extern const char *const mz_codec_auto_candidates[MZ_CODEC_AUTO_N];

typedef struct mz_codec_choice {
    const char *name;          /* the chosen candidate (never NULL) */
    /* Planned restore wall time of each candidate after the reference
     * eviction (half the session's evictable bytes); -1: not a candidate
     * here (the profile has no entry of its own for it). */
    int64_t restore_ns[MZ_CODEC_AUTO_N];
} mz_codec_choice;

/* u: the session's unit sizes, decoding threads and I/O shape (its codec
 * and kv_enc_bytes are ignored: each candidate's come from the profile);
 * n_layer weight blocks and n_layer x n_chunks KV chunks. MZ_E_NOMEM if the
 * simulated table cannot be allocated (out->name is then q8). */
MZ_INTERNAL MZ_NODISCARD mz_status mz_codec_choose(const mz_device_profile *prof,
                                                   const mz_profile_units *u, int n_layer,
                                                   size_t n_chunks, mz_codec_choice *out);

#endif
