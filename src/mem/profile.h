/*
 * profile.h — the device profile (paper §4.3, "Offline profiling"): what this
 * machine can do, measured once by `mzcache profile`, and the per-unit
 * restore times the eviction policy derives from it for any model.
 *
 * Divisions:
 *   1. the profile: codec decode throughput (every registered codec), O_DIRECT
 *      sequential read throughput by request size x queue depth (idle, and
 *      while compute runs on another thread), the cost of getting fresh memory
 *      back (first touch after the pages went back to the OS);
 *   2. files: JSON written by hand, read back by a small tolerant parser
 *      (unknown keys ignored, missing ones defaulted, anything malformed
 *      refused with MZ_E_FORMAT); a missing or bad file never fails a
 *      context: mz_profile_load_or_builtin() falls back to a built-in
 *      estimate (the figures of shared/MACHINE-NOTES.md) with a warning;
 *   3. derivation: unit sizes + profile -> mz_unit_times (policy.h), the
 *      paper's threshold T, and unit sizes from a model shape;
 *   4. measurement (mz_profile_run): I/O, threads and clocks, so it lives
 *      here and never in a policy.
 *
 * Thread contract: everything is reentrant except mz_profile_run, which
 * starts its own helper threads and must not run twice at once.
 */
#ifndef MZ_PROFILE_H
#define MZ_PROFILE_H

#include "../core/core.h"
#include "policy.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#define MZ_PROFILE_VERSION 1
#define MZ_PROFILE_MAX_CODECS 16
#define MZ_PROFILE_MAX_SIZES 8
#define MZ_PROFILE_MAX_QD 6
#define MZ_PROFILE_MAX_TOUCH 8

/* ---- 1. the profile ------------------------------------------------------------- */

typedef struct mz_profile_codec {
    char name[24];             /* as mz_codec_find() knows it */
    double decode_gbps;        /* GB/s (1e9 B/s) of decoded F16 output, one thread */
    double decode_gbps_loaded; /* the same while compute runs on another thread (0: not measured) */
    double encode_gbps;        /* GB/s of F16 input */
    double ratio;              /* encoded / raw bytes on the test data */
} mz_profile_codec;

typedef struct mz_device_profile {
    int version;
    bool measured;             /* false: the built-in estimate */
    char created[32];          /* UTC, ISO 8601 */
    char cpu[96];
    int n_cpus;
    /* storage: O_DIRECT sequential reads through io_uring */
    char dir[256];             /* where the test file was (the swap dir's filesystem) */
    bool direct, uring;
    uint64_t file_bytes;
    int n_sizes, n_qd;
    size_t read_size[MZ_PROFILE_MAX_SIZES]; /* request sizes, ascending */
    int read_qd[MZ_PROFILE_MAX_QD];         /* queue depths, ascending */
    double read_gbps[MZ_PROFILE_MAX_SIZES][MZ_PROFILE_MAX_QD];        /* idle machine */
    double read_gbps_loaded[MZ_PROFILE_MAX_SIZES][MZ_PROFILE_MAX_QD]; /* compute beside (0: n/a) */
    size_t sat_size;           /* saturation: the smallest size, then depth, within 10 % */
    int sat_qd;                /*   of the best idle throughput */
    size_t cached_pages_max;   /* page-cache pages of the test file seen before a pass (0) */
    /* memory */
    double memcpy_gbps;
    double touch_hot_s_per_gib;  /* first touch right after MADV_DONTNEED, one thread */
    double touch_cold_s_per_gib; /* after reclaim_wait_s (the hypervisor took it), one thread */
    double touch_cold2_s_per_gib;/* the same, two threads */
    double reclaim_wait_s;
    /* Pre-faulting as the restore does it (MADV_POPULATE_WRITE, 2 MiB pieces
     * claimed in turn), cold, by thread count: touch_threads ascending from 1,
     * touch_mt_s_per_gib the wall time per GiB. n_touch 0: not measured. */
    int n_touch;
    int touch_threads[MZ_PROFILE_MAX_TOUCH];
    double touch_mt_s_per_gib[MZ_PROFILE_MAX_TOUCH];
    /* the compute/restore thread split: threads the restore activities run on
       (1..MZ_RESTORE_THREADS_MAX) beside the compute threads; 0 = the rule of
       mz_profile_restore_threads */
    int restore_threads;
    /* codecs */
    int n_codecs;
    mz_profile_codec codec[MZ_PROFILE_MAX_CODECS];
} mz_device_profile;

/* The built-in estimate (MACHINE-NOTES figures: a 2-vCPU VM on virtio ext4). */
MZ_INTERNAL void mz_profile_builtin(mz_device_profile *out);

/* Restore threads beside n_compute compute threads (n_compute <= 0: the
 * machine's other CPUs are taken as busy, as with one compute thread per CPU
 * minus one). The profile's restore_threads when set; else, with fewer than
 * 4 CPUs, 2 (docs/BENCHMARKS.md, "compute/restore split": on 2 vCPUs two
 * restore threads beside two compute threads beat one); else the CPUs the
 * compute threads leave (at least 3), and no more than the thread count
 * past which pre-faulting stops getting faster (touch_mt_s_per_gib within
 * 10 % of the best measured up to there): the memory system is saturated
 * there, so more restore threads only slow the compute beside them.
 * Never above MZ_RESTORE_THREADS_MAX. */
MZ_INTERNAL int mz_profile_restore_threads(const mz_device_profile *p, int n_compute);

/* Of n_restore restore threads, how many pre-fault: the smallest measured
 * thread count (up to n_restore) whose pre-fault time per GiB is within 10 %
 * of the best measured up to n_restore — past it more threads fault no
 * faster (the kernel's page allocator and the hypervisor's backing are
 * shared) and only take CPU from storage and decoding. n_restore (every
 * restore thread pre-faults) when the table has fewer than two counts or
 * none of them fits. 1..n_restore for n_restore >= 1; 0 for n_restore <= 0. */
MZ_INTERNAL int mz_profile_prefault_threads(const mz_device_profile *p, int n_restore);

/* Of n_restore restore threads, how many decode compressed chunks side by
 * side (mz_restore_split_plan's layout): 1 below 4 (the 1-3 thread splits
 * decode on one thread; 2 = the 2-vCPU machine: decoding beside one storage
 * thread); else all but one storage lane (one keeps the disk at the
 * profile's saturation depth), and but thread 0 too when every thread
 * pre-faults (mz_profile_prefault_threads = n_restore: thread 0 only
 * allocates). The eviction policy charges the memory path's decoding over
 * this many threads (mz_profile_derive); the disk does not spread. >= 1. */
MZ_INTERNAL int mz_profile_decode_threads(const mz_device_profile *p, int n_restore);

/* The restore's storage requests: bytes per request (the saturation size,
 * 64 KiB..4 MiB, 4 KiB multiple) and requests in flight in all (the
 * saturation depth, 4..64). Unmeasured: 1 MiB x 4. */
MZ_INTERNAL void mz_profile_io_shape(const mz_device_profile *p, size_t *io_bytes,
                                     int *queue_depth);

/* ---- 2. files ------------------------------------------------------------------- */

/* $XDG_CACHE_HOME/mzcache/profile.json, else $HOME/.cache/mzcache/profile.json. */
MZ_INTERNAL MZ_NODISCARD mz_status mz_profile_default_path(char *buf, size_t cap);
/* Writes the JSON (creating the directory, mode 0700; atomically by rename). */
MZ_INTERNAL MZ_NODISCARD mz_status mz_profile_save(const mz_device_profile *p, const char *path);
/* Serialises into buf (always NUL-terminated); returns the full length. */
MZ_INTERNAL size_t mz_profile_to_json(const mz_device_profile *p, char *buf, size_t cap);
/* Parses JSON text. MZ_E_FORMAT for malformed text, a wrong version, or a
 * profile without read throughputs or codecs; *out is then the built-in one. */
MZ_INTERNAL MZ_NODISCARD mz_status mz_profile_from_json(const char *text, size_t len,
                                                        mz_device_profile *out);
/* Reads a file: MZ_E_IO if it cannot be read, MZ_E_FORMAT as above. */
MZ_INTERNAL MZ_NODISCARD mz_status mz_profile_load(const char *path, mz_device_profile *out);
/* Never fails: path NULL or "" = the default path; on any problem, the
 * built-in estimate and one warning per process and path. */
MZ_INTERNAL void mz_profile_load_or_builtin(const char *path, mz_device_profile *out);

/* ---- 3. derivation ----------------------------------------------------------------- */

/* Sizes of one model's units and how the restore reads them. */
typedef struct mz_profile_units {
    size_t kv_chunk_bytes;     /* resident KV chunk */
    size_t kv_enc_bytes;       /* one encoded chunk; 0: the codec's measured ratio */
    size_t block_bytes;        /* one weight block (the largest) */
    const char *codec;         /* KV codec name ("q8", "q8-g32", "cachegen", …) */
    int queue_depth;           /* reads in flight; 0: 4 (the mechanism's) */
    size_t max_io_bytes;       /* bytes per read request; 0: 1 MiB (the mechanism's) */
    bool loaded;               /* false (default): idle-machine figures, as the paper
                                  profiles; true: those measured beside a compute thread,
                                  where present */
    int decode_threads;        /* restore threads that decode at once
                                  (mz_profile_decode_threads); 0: 1 */
} mz_profile_units;

/* Per-unit restore times (every field >= 1 ns). t_d from the codec's decode
 * throughput (unknown codec: a conservative 1 GB/s) divided by the decoding
 * threads — the memory path's wall time per chunk when decode_threads decode
 * side by side; the decode half of t_rkvc likewise (storage lanes decode
 * what they read), the reads not (one disk, its throughput already taken at
 * the requests in flight); reads at request size
 * min(unit, max_io), interpolated in log2(size) between measured sizes;
 * allocation from the cold first-touch cost. */
MZ_INTERNAL void mz_profile_derive(const mz_device_profile *p, const mz_profile_units *u,
                                   mz_unit_times *out);
/* Read throughput (GB/s) for requests of `bytes` at depth qd (nearest
 * measured depth not above qd), interpolated over sizes. */
MZ_INTERNAL double mz_profile_read_gbps(const mz_device_profile *p, size_t bytes, int qd,
                                        bool loaded);
/* The codec's entry (exact name, then its family "q8-g32" -> "q8"); NULL if none. */
MZ_INTERNAL const mz_profile_codec *mz_profile_codec_find(const mz_device_profile *p,
                                                          const char *name);
/* The paper's threshold T = N_W_total * floor(t_rW / t_d). */
MZ_INTERNAL int64_t mz_profile_threshold(const mz_unit_times *t, int n_w_total);
/* The threshold the default (exact) hybrid policy uses on a fresh table:
 * floor(N_W_total * t_rW / t_d). */
MZ_INTERNAL int64_t mz_profile_threshold_exact(const mz_unit_times *t, int n_w_total);

/* Unit sizes of a transformer shape (llama / qwen3 blocks as the model loader
 * lays them out: every tensor 64-byte aligned, norms F32, q_norm/k_norm for
 * qwen3). weight_type: "F16", "Q8_0", "Q4_0", "Q4_1", "BF16", "F32". */
typedef struct mz_profile_shape {
    bool qwen3;
    int n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff;
    const char *weight_type;
} mz_profile_shape;

MZ_INTERNAL MZ_NODISCARD mz_status mz_profile_shape_units(const mz_profile_shape *s,
                                                          size_t *kv_chunk_bytes,
                                                          size_t *block_bytes);

/* ---- 4. measurement ------------------------------------------------------------------ */

typedef struct mz_profile_run_params {
    const char *dir;           /* test file directory; NULL/"": the swap file's default dir */
    bool quick;                /* a few seconds: small file, few sizes, no reclaim wait */
    size_t file_bytes;         /* 0: 256 MiB (quick: 32 MiB) */
    size_t mem_bytes;          /* first-touch test size; 0: 256 MiB (quick: 16 MiB) */
    double reclaim_wait_s;     /* < 0: default (3 s; quick: 0.2 s) */
    bool skip_storage, skip_memory, skip_loaded;
    FILE *log;                 /* progress lines; NULL: silent */
} mz_profile_run_params;

MZ_INTERNAL mz_profile_run_params mz_profile_run_params_default(void);
/* Measures this machine. The test file is unlinked as soon as it is created,
 * so nothing is left behind whatever happens. MZ_E_IO if the directory
 * cannot hold it; the codec and memory figures need no file. */
MZ_INTERNAL MZ_NODISCARD mz_status mz_profile_run(const mz_profile_run_params *rp,
                                                  mz_device_profile *out);

#endif /* MZ_PROFILE_H */
