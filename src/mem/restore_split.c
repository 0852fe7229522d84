/*
 * restore_split.c — which restore thread runs which activity (contract in
 * manager.h, mz_restore_split_plan). Pure: no clock, no I/O, no state.
 */
#include "manager.h"

#include <string.h>

/* Storage lanes among `count` lane threads, by bytes: all of them when
 * nothing is decoded, none when nothing is read, else at least one of each
 * kind (count >= 2). */
static int sto_lanes_by_bytes(int count, double sto_bytes, double mem_bytes)
{
    if (count <= 0 || sto_bytes <= 0) return 0;
    if (mem_bytes <= 0) return count;
    if (count == 1) return 1; /* the caller gives that thread both kinds */
    int s = (int)((double)count * sto_bytes / (sto_bytes + mem_bytes) + 0.5);
    return MZ_MAX(1, MZ_MIN(count - 1, s));
}

void mz_restore_split_plan(int n_threads, int n_prefault, double sto_bytes, double mem_bytes,
                           mz_restore_split *out)
{
    enum {
        A = 1u << MZ_RESTORE_ACT_ALLOC,
        S = 1u << MZ_RESTORE_ACT_STORAGE,
        M = 1u << MZ_RESTORE_ACT_MEM,
    };
    memset(out, 0, sizeof *out);
    const int nt = MZ_MAX(1, MZ_MIN(n_threads, MZ_RESTORE_THREADS_MAX));
    for (int t = 0; t < MZ_RESTORE_THREADS_MAX; t++) out->lane[t] = -1;
    out->n_threads = nt;
    if (nt < 4) {
        /* With one path empty (a session switched back after a tight
         * budget moved all of it to the swap file) both loader threads
         * run lanes of the other: the storage path decodes every encoded
         * chunk it reads, and on one thread it would be the whole
         * restore's critical path while the decoding thread only
         * pre-faults. */
        const unsigned only = mem_bytes <= 0 ? S : sto_bytes <= 0 ? M : 0;
        out->n_prefault = nt;
        int lane = 0;
        for (int t = 0; t < nt; t++) {
            unsigned mask = nt == 1 ? A | S | M
                            : nt == 2 ? A | (only ? only : t == 0 ? M : S)
                                      : (t == 0 ? A : A | (only ? only : t == 1 ? S : M));
            out->mask[t] = (unsigned char)mask;
            out->lane[t] = (signed char)((mask & S) ? lane++ : -1);
        }
        out->n_sto_lanes = MZ_MAX(lane, 1);
        return;
    }
    const int npf = MZ_MAX(1, MZ_MIN(n_prefault, nt));
    out->n_prefault = npf;
    if (npf >= nt) {
        /* Every thread pre-faults; thread 0 does nothing else. */
        const int r = nt - 1, ns = sto_lanes_by_bytes(r, sto_bytes, mem_bytes);
        out->mask[0] = A;
        for (int t = 1; t < nt; t++) {
            bool sto = t <= ns;
            out->mask[t] = (unsigned char)(A | (sto ? S : M));
            out->lane[t] = (signed char)(sto ? t - 1 : -1);
        }
        out->n_sto_lanes = ns;
        return;
    }
    /* Lanes from the start on threads npf..nt-1; threads 0..npf-1
     * pre-fault first, then run a lane. The whole job's storage lanes are
     * divided by bytes over all nt threads, and the early group takes them
     * first (keeping one thread for decoding when there is any): the disk
     * is the slowest path and cannot be hurried later, while decoding
     * gains the pre-faulting threads once they are done. */
    const int early = nt - npf;
    const int total_sto = sto_lanes_by_bytes(nt, sto_bytes, mem_bytes);
    const int early_sto =
        mem_bytes > 0 ? MZ_MIN(total_sto, MZ_MAX(early - 1, sto_bytes > 0 ? 1 : 0)) : early;
    const int late_sto = MZ_MAX(0, MZ_MIN(npf, total_sto - early_sto));
    int lane = 0;
    for (int t = npf; t < nt; t++) {
        const int k = t - npf;
        unsigned mask;
        if (early == 1 && sto_bytes > 0 && mem_bytes > 0) mask = S | M;
        else mask = k < early_sto ? S : M;
        out->mask[t] = (unsigned char)mask;
        if (mask & S) out->lane[t] = (signed char)lane++;
    }
    for (int t = 0; t < npf; t++) {
        const bool sto = t < late_sto;
        out->mask[t] = (unsigned char)(A | (sto ? S : M));
        out->alloc_first[t] = true;
        if (sto) out->lane[t] = (signed char)lane++;
    }
    out->n_sto_lanes = lane;
}
