/*
 * codec_choice.c — the default KV codec of a session from the device
 * profile (the rule and why: codec_choice.h).
 */
#include "codec_choice.h"

#include "policy.h"
#include "unit.h"

#include <stdlib.h>
#include <string.h>

const char *const mz_codec_auto_candidates[MZ_CODEC_AUTO_N] = {"q8", "q8-q4r"};

/* A candidate wins only if its planned restore is shorter than the better
 * codec's by more than this fraction: the profile's rates move by about
 * that much between runs on one machine (docs/BENCHMARKS.md, "Device
 * profile"), and a smaller gain does not pay for q8-q4r's quality. */
#define AUTO_MIN_GAIN 0.10

/* Planned restore wall time after the hybrid policy frees half of the
 * table's bytes with times t: the longer of the two restore paths, which
 * run at once. units[]: n_layer weight blocks, then n_layer x n_chunks KV
 * chunks, reset to resident here. */
static int64_t planned_restore_ns(mz_unit *units, int n_layer, size_t n_chunks, const mz_profile_units *u,
                                  const mz_unit_times *t, size_t enc_bytes, const mz_policy *pol,
                                  mz_evict_plan *plan, uint64_t *seq)
{
    mz_unit *w = units, *kv = units + n_layer;
    size_t n_kv = (size_t)n_layer * n_chunks;
    for (int l = 0; l < n_layer; l++) {
        w[l] = (mz_unit){.kind = MZ_UNIT_WEIGHTS, .layer = l, .chunk = -1, .bytes = u->block_bytes};
        mz_unit_set(&w[l], MZ_UNIT_RESIDENT);
    }
    for (size_t i = 0; i < n_kv; i++) {
        kv[i] = (mz_unit){.kind = MZ_UNIT_KV, .layer = (int)(i / n_chunks), .chunk = (int)(i % n_chunks),
                          .bytes = u->kv_chunk_bytes};
        mz_unit_set(&kv[i], MZ_UNIT_RESIDENT);
    }
    mz_policy_view v = {.n_layer = n_layer,
                        .max_chunks = n_chunks,
                        .n_chunks = n_chunks,
                        .weights = w,
                        .kv = kv,
                        .kv_seq = seq,
                        .weights_evictable = true,
                        .can_store = true,
                        .unit_bytes_kv = u->kv_chunk_bytes,
                        .enc_bytes_kv_est = enc_bytes,
                        .times = *t};
    size_t total = (size_t)n_layer * u->block_bytes + n_kv * u->kv_chunk_bytes;
    pol->plan(pol, &v, total / 2, plan);
    /* The planner's simulated end states are the plan carried out. */
    for (int l = 0; l < n_layer; l++) mz_unit_set(&w[l], (mz_unit_state)plan->sim_w[l]);
    for (size_t i = 0; i < n_kv; i++) {
        mz_unit_set(&kv[i], (mz_unit_state)plan->sim_kv[i]);
        kv[i].enc_bytes = enc_bytes;
    }
    mz_restore_plan_times rt;
    mz_policy_restore_times(&v, &rt);
    return MZ_MAX(rt.mem_ns, rt.storage_ns);
}

mz_status mz_codec_choose(const mz_device_profile *prof, const mz_profile_units *u, int n_layer,
                          size_t n_chunks, mz_codec_choice *out)
{
    *out = (mz_codec_choice){.name = mz_codec_auto_candidates[0]};
    for (int k = 0; k < MZ_CODEC_AUTO_N; k++) out->restore_ns[k] = -1;
    /* Only codecs the profile has an entry of its own for: a family
     * fallback would give q8-q4r q8's rates and size. */
    const mz_profile_codec *entry[MZ_CODEC_AUTO_N];
    for (int k = 0; k < MZ_CODEC_AUTO_N; k++) {
        const mz_profile_codec *c = mz_profile_codec_find(prof, mz_codec_auto_candidates[k]);
        entry[k] = c && strcmp(c->name, mz_codec_auto_candidates[k]) == 0 && c->ratio > 0 ? c : NULL;
    }
    if (!entry[0] || n_layer <= 0 || n_chunks == 0) return MZ_OK;

    size_t n_units = (size_t)n_layer * (n_chunks + 1);
    mz_unit *units = calloc(n_units, sizeof *units);
    uint64_t *seq = calloc((size_t)n_layer * n_chunks, sizeof *seq);
    mz_policy_params pp = mz_policy_params_default();
    mz_policy *pol = mz_policy_hybrid_init(&pp);
    mz_evict_plan plan = {0};
    mz_status s = !units || !seq || !pol ? MZ_E_NOMEM : mz_evict_plan_init(&plan, n_layer, n_chunks);
    for (int k = 0; k < MZ_CODEC_AUTO_N && s == MZ_OK; k++) {
        if (!entry[k]) continue;
        mz_profile_units uk = *u;
        uk.codec = entry[k]->name;
        uk.kv_enc_bytes = (size_t)(entry[k]->ratio * (double)u->kv_chunk_bytes + 0.5); /* its measured size */
        mz_unit_times t;
        mz_profile_derive(prof, &uk, &t);
        out->restore_ns[k] =
            planned_restore_ns(units, n_layer, n_chunks, u, &t, uk.kv_enc_bytes, pol, &plan, seq);
    }
    if (s == MZ_OK) {
        for (int k = 1; k < MZ_CODEC_AUTO_N; k++) {
            int64_t best = out->restore_ns[0], r = out->restore_ns[k];
            if (r >= 0 && (double)r < (1.0 - AUTO_MIN_GAIN) * (double)best) {
                out->name = mz_codec_auto_candidates[k];
                break;
            }
        }
    }
    mz_evict_plan_free(&plan);
    if (pol) pol->free(pol);
    free(seq);
    free(units);
    return s == MZ_E_NOMEM ? mz_fail(s, "out of memory choosing the KV codec") : s;
}
