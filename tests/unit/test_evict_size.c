/*
 * test_evict_size.c — eviction sizing from the pressure signal
 * (src/pressure/evict_size.c).
 *
 *   1. hand-made tables: a reading (source, cgroup figures, time) and what
 *      the daemon holds → the expected basis and byte count, worked out by
 *      hand from the rules in evict_size.h (not from the code);
 *   2. sequences: a cgroup whose usage follows a hog's growth and the
 *      daemon's evictions, signal after signal; the eviction sizes and when
 *      they stop;
 *   3. PSI back-off over a sequence of firing times;
 *   4. invariants over many random readings: never more than what is held,
 *      never more than the larger of the need and one unit, nothing once the
 *      usage is at or below the target;
 *   4b. restore ahead (mz_esize_room): whether what is evicted fits back
 *      below the target, readings worked out by hand;
 *   5. the real signal: a child cgroup-v1 memory cgroup with a limit and a
 *      process in it that maps 96 MiB; the figures read from the kernel give
 *      the need the allocation implies (skipped, saying why, without a
 *      writable v1 memory cgroup).
 */
#define _GNU_SOURCE
#include "pressure/evict_size.h"

#include "cgroup_util.h"
#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MIB(x) ((uint64_t)(x) * 1048576ULL)
#define NOL MZ_PSIG_NOLIMIT

static const char *T = "test_evict_size";

/* ---- 1. tables -------------------------------------------------------------------------- */

typedef struct row {
    const char *name;
    mz_pressure_source src;
    uint64_t v2_high, v2_max, v2_cur, v1_lim, v1_use, inactive;
    uint64_t held, total, unit;
    mz_esize_basis basis;
    uint64_t bytes;
} row;

static void part_tables(void)
{
    mz_esize_params p = mz_esize_params_default();
    p.headroom_pct = 0;
    p.headroom_bytes = MIB(10);
    const row rows[] = {
        /* v2 high: target 300 - 10 = 290, usage 340 → 50 */
        {"v2 high over", MZ_PRESSURE_CG2_EVENTS, MIB(300), NOL, MIB(340), 0, 0, 0, MIB(200), MIB(300), MIB(3),
         MZ_ESIZE_CGROUP, MIB(50)},
        /* after the eviction: 288 <= 290 → clear */
        {"v2 cleared", MZ_PRESSURE_CG2_EVENTS, MIB(300), NOL, MIB(288), 0, 0, 0, MIB(150), MIB(300), MIB(3),
         MZ_ESIZE_CLEAR, 0},
        /* max only: target 390, usage 400 → 10 */
        {"v2 max hit", MZ_PRESSURE_CG2_EVENTS, NOL, MIB(400), MIB(400), 0, 0, 0, MIB(200), MIB(300), MIB(3),
         MZ_ESIZE_CGROUP, MIB(10)},
        /* the lower of high and max counts: 250 → target 240, usage 270 → 30 */
        {"v2 max below high", MZ_PRESSURE_CG2_EVENTS, MIB(300), MIB(250), MIB(270), 0, 0, 0, MIB(200), MIB(300),
         MIB(3), MZ_ESIZE_CGROUP, MIB(30)},
        /* inactive file pages are not a need: 340 - 30 = 310 → 20 */
        {"v2 minus inactive file", MZ_PRESSURE_CG2_EVENTS, MIB(300), NOL, MIB(340), 0, 0, MIB(30), MIB(200),
         MIB(300), MIB(3), MZ_ESIZE_CGROUP, MIB(20)},
        /* v1: limit 256, usage 250, target 246 → 4 (less than a unit: mz_evict rounds up) */
        {"v1 usage", MZ_PRESSURE_CG1_USAGE, 0, 0, 0, MIB(256), MIB(250), 0, MIB(200), MIB(300), MIB(3),
         MZ_ESIZE_CGROUP, MIB(4)},
        /* v1 pressure level with a limit: the need, not a step */
        {"v1 level with limit", MZ_PRESSURE_CG1_LEVEL, 0, 0, 0, MIB(256), MIB(300), 0, MIB(200), MIB(300), MIB(3),
         MZ_ESIZE_CGROUP, MIB(54)},
        /* v1 without a limit: a step of 2 % of 300 = 6 */
        {"v1 level, no limit", MZ_PRESSURE_CG1_LEVEL, 0, 0, 0, NOL, MIB(300), 0, MIB(200), MIB(300), MIB(3),
         MZ_ESIZE_PSI, MIB(6)},
        /* the step is at least one unit: 2 % of 100 = 2 < 3 */
        {"step at least a unit", MZ_PRESSURE_PSI, 0, 0, 0, 0, 0, 0, MIB(50), MIB(100), MIB(3), MZ_ESIZE_PSI,
         MIB(3)},
        /* need beyond what is held: all that is held */
        {"held caps", MZ_PRESSURE_CG2_EVENTS, MIB(300), NOL, MIB(500), 0, 0, 0, MIB(80), MIB(300), MIB(3),
         MZ_ESIZE_CGROUP, MIB(80)},
        /* nothing held above the floor */
        {"empty", MZ_PRESSURE_CG1_USAGE, 0, 0, 0, MIB(256), MIB(300), 0, 0, MIB(300), MIB(3), MZ_ESIZE_EMPTY, 0},
        /* PSI with a cgroup need above the step: the need (the cgroup is the cause) */
        {"psi, cgroup need", MZ_PRESSURE_PSI, MIB(300), NOL, MIB(340), 0, 0, 0, MIB(200), MIB(300), MIB(3),
         MZ_ESIZE_CGROUP, MIB(50)},
        /* PSI, cgroup under its target: stall from elsewhere, a step */
        {"psi, cgroup fine", MZ_PRESSURE_PSI, MIB(300), NOL, MIB(100), 0, 0, 0, MIB(200), MIB(300), MIB(3),
         MZ_ESIZE_PSI, MIB(6)},
        /* nothing readable at all (no cgroup files): a step */
        {"no figures", MZ_PRESSURE_CG2_EVENTS, 0, 0, 0, 0, 0, 0, MIB(200), MIB(300), MIB(3), MZ_ESIZE_PSI, MIB(6)},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const row *r = &rows[i];
        mz_esize_state st;
        mz_esize_state_init(&st, &p);
        mz_psig s = {.source = r->src, .level = MZ_PRESSURE_MEDIUM, .t_ms = 1000, .v2_high = r->v2_high,
                     .v2_max = r->v2_max, .v2_current = r->v2_cur, .v1_limit = r->v1_lim, .v1_usage = r->v1_use,
                     .inactive_file = r->inactive};
        mz_esize_held h = {.held = r->held, .total = r->total, .unit = r->unit};
        mz_esize_out o;
        mz_esize(&p, &st, &s, &h, &o);
        CHECK_MSG(o.basis == r->basis && o.bytes == r->bytes, "%s: %s %.2f MiB, expected %s %.2f MiB (%s)", r->name,
                  mz_esize_basis_name(o.basis), (double)o.bytes / MIB(1), mz_esize_basis_name(r->basis),
                  (double)r->bytes / MIB(1), o.why);
    }
    /* The percent headroom: 15 % of 200 = 30 → target 170, usage 190 → 20. */
    mz_esize_params q = mz_esize_params_default();
    mz_esize_state st;
    mz_esize_state_init(&st, &q);
    mz_psig s = {.source = MZ_PRESSURE_CG1_USAGE, .t_ms = 0, .v1_limit = MIB(200), .v1_usage = MIB(190)};
    mz_esize_held h = {.held = MIB(300), .total = MIB(300), .unit = MIB(1)};
    mz_esize_out o;
    mz_esize(&q, &st, &s, &h, &o);
    CHECK_MSG(o.bytes == MIB(20) && o.target == MIB(170), "15%% headroom: %s", o.why);
}

/* ---- 2. sequences: usage follows the hog and the evictions ------------------------------- */

static void part_sequence(void)
{
    /* A v2 cgroup, memory.high 400 MiB, headroom 20 MiB → target 380 MiB.
     * The daemon holds 300 MiB (weights + KV, all evictable) and the hog
     * grows by the amounts below; after each signal the daemon frees what
     * was sized (whole units of 4 MiB, as mz_evict does: the next multiple of
     * 4 at or above the request). Expected sizes by hand:
     *   hog 100 → usage 400 + 0: need 20 → evict 20 (frees 20) → usage 380
     *   hog +30 → 410: need 30 → frees 32 → 378
     *   hog  +0 → 378: clear
     *   hog +50 → 428: need 48 → frees 48 → 380
     *   hog -80 → 300: clear (the hog let go)
     *   hog +90 → 390: need 10 → frees 12 → 378 */
    mz_esize_params p = mz_esize_params_default();
    p.headroom_pct = 0;
    p.headroom_bytes = MIB(20);
    mz_esize_state st;
    mz_esize_state_init(&st, &p);
    const int64_t grow[] = {100, 30, 0, 50, -80, 90};
    const uint64_t want[] = {20, 30, 0, 48, 0, 10};
    int64_t hog = 0, daemon = 300;
    double sum_ratio = 0;
    int n_ev = 0;
    for (size_t i = 0; i < sizeof grow / sizeof grow[0]; i++) {
        hog += grow[i];
        mz_psig s = {.source = MZ_PRESSURE_CG2_EVENTS, .t_ms = 1000.0 * (double)i, .v2_high = MIB(400),
                     .v2_max = NOL, .v2_current = MIB(hog + daemon)};
        mz_esize_held h = {.held = MIB(daemon), .total = MIB(300), .unit = MIB(4)};
        mz_esize_out o;
        mz_esize(&p, &st, &s, &h, &o);
        CHECK_MSG(o.bytes == MIB(want[i]), "step %zu: %.1f MiB, expected %llu (%s)", i, (double)o.bytes / MIB(1),
                  (unsigned long long)want[i], o.why);
        if (o.bytes) {
            int64_t freed = (int64_t)((o.bytes + MIB(4) - 1) / MIB(4) * 4); /* whole units, MiB */
            daemon -= freed;
            sum_ratio += (double)freed / ((double)o.need / MIB(1));
            n_ev++;
            /* every eviction frees within 1.5x of the need or one unit */
            CHECK_MSG((double)MIB(freed) <= fmax(1.5 * (double)o.need, (double)(o.need + MIB(4))),
                      "step %zu freed %lld MiB for a need of %.1f", i, (long long)freed, (double)o.need / MIB(1));
        }
    }
    printf("  sequence: %d evictions, mean freed/need %.2f\n", n_ev, n_ev ? sum_ratio / n_ev : 0.0);
}

/* ---- 3. PSI back-off ------------------------------------------------------------------------ */

static void part_psi(void)
{
    /* back-off 2 s doubling to 8 s; step 6 MiB (2 % of 300).
     *   t=0     step (first)                      wait stays 2 s
     *   t=0.5   back-off (0.5 < 2)
     *   t=2.1   step (2.1 >= 2; < 4: repeat)      wait 4 s
     *   t=5.0   back-off (2.9 < 4)
     *   t=6.2   step (4.1 >= 4; < 8: repeat)      wait 8 s
     *   t=14.0  back-off (7.8 < 8)
     *   t=14.3  step (8.1 >= 8; < 16: repeat)     wait 8 s (the cap)
     *   t=40    step (25.7 >= 16: quiet spell)    wait back to 2 s
     *   t=41    back-off (1 < 2) */
    mz_esize_params p = mz_esize_params_default();
    p.psi_backoff_ms = 2000;
    p.psi_backoff_max_ms = 8000;
    mz_esize_state st;
    mz_esize_state_init(&st, &p);
    const double t[] = {0, 500, 2100, 5000, 6200, 14000, 14300, 40000, 41000};
    const int step[] = {1, 0, 1, 0, 1, 0, 1, 1, 0};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        mz_psig s = {.source = MZ_PRESSURE_PSI, .t_ms = t[i]};
        mz_esize_held h = {.held = MIB(300), .total = MIB(300), .unit = MIB(3)};
        mz_esize_out o;
        mz_esize(&p, &st, &s, &h, &o);
        CHECK_MSG(step[i] ? (o.basis == MZ_ESIZE_PSI && o.bytes == MIB(6)) : (o.basis == MZ_ESIZE_BACKOFF && !o.bytes),
                  "psi at %.1f s: %s %.1f MiB (%s)", t[i] / 1000, mz_esize_basis_name(o.basis),
                  (double)o.bytes / MIB(1), o.why);
    }
}

/* ---- 4. invariants --------------------------------------------------------------------------- */

static void part_random(void)
{
    unsigned long long rng = 12345;
    int bad = 0;
    for (int i = 0; i < 20000; i++) {
        mz_esize_params p = mz_esize_params_default();
        p.headroom_pct = (double)(t_rand_u64(&rng) % 30);
        p.headroom_bytes = MIB(t_rand_u64(&rng) % 64);
        mz_esize_state st;
        mz_esize_state_init(&st, &p);
        uint64_t lim = MIB(64 + t_rand_u64(&rng) % 1024);
        uint64_t use = MIB(t_rand_u64(&rng) % 1200) + t_rand_u64(&rng) % 4096;
        bool v2 = t_rand_u64(&rng) & 1;
        mz_psig s = {.source = (mz_pressure_source)(t_rand_u64(&rng) % MZ_PRESSURE_N_SOURCES), .t_ms = (double)i};
        if (v2) s.v2_high = lim, s.v2_max = NOL, s.v2_current = use;
        else s.v1_limit = lim, s.v1_usage = use;
        mz_esize_held h = {.held = MIB(t_rand_u64(&rng) % 400), .total = MIB(400), .unit = MIB(1 + t_rand_u64(&rng) % 4)};
        mz_esize_out o;
        mz_esize(&p, &st, &s, &h, &o);
        uint64_t head = (uint64_t)((double)lim * p.headroom_pct / 100.0);
        if (p.headroom_bytes > head) head = p.headroom_bytes;
        uint64_t target = head < lim ? lim - head : 0;
        uint64_t need = use > target ? use - target : 0;
        uint64_t step = (uint64_t)((double)h.total * p.psi_step_pct / 100.0);
        if (step < h.unit) step = h.unit;
        bool ok = o.bytes <= h.held;
        if (s.source == MZ_PRESSURE_PSI) ok = ok && o.bytes <= (need > step ? need : step);
        else ok = ok && o.bytes <= (need > h.unit ? need : h.unit) && (need > 0 || o.bytes == 0);
        if (!ok && bad++ < 5)
            fprintf(stderr, "  random %d: %s %.2f MiB (need %.2f, held %.2f): %s\n", i, mz_esize_basis_name(o.basis),
                    (double)o.bytes / MIB(1), (double)need / MIB(1), (double)h.held / MIB(1), o.why);
    }
    CHECK_EQ_INT(bad, 0);
}

/* ---- 5. the real signal (cgroup v1) ---------------------------------------------------------- */

static void part_real_v1(void)
{
    char cg[600], path[700];
    if (!cg_make_child_v1("real signal", "esize",
                          "no cgroup-v1 memory controller for this process (v2 machines: the v2 figures are "
                          "read the same way, by mz_psig_read_dirs)",
                          cg, sizeof cg))
        return;
    snprintf(path, sizeof path, "%.600s/memory.limit_in_bytes", cg);
    CHECK(cg_write_str(path, "268435456") == 0); /* 256 MiB */
    int cmd[2], ack[2];
    CHECK(pipe(cmd) == 0 && pipe(ack) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        char p2[700], me[32];
        snprintf(p2, sizeof p2, "%.600s/cgroup.procs", cg);
        snprintf(me, sizeof me, "%d", getpid());
        char ok = cg_write_str(p2, me) ? 'E' : 'k';
        if (write(ack[1], &ok, 1) != 1) _exit(1);
        char c;
        void *mem = NULL;
        while (read(cmd[0], &c, 1) == 1 && c != 'q') {
            if (c == 'a') mem = mmap(NULL, 96u << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
            if (c == 'f' && mem && mem != MAP_FAILED) munmap(mem, 96u << 20), mem = NULL;
            char a = c == 'a' && mem == MAP_FAILED ? 'E' : 'k';
            if (write(ack[1], &a, 1) != 1) break;
        }
        _exit(0);
    }
    char a = 0;
    bool in = pid > 0 && read(ack[0], &a, 1) == 1 && a == 'k';
    if (!in) {
        t_skip_part("real signal", "cannot move a process into the child cgroup");
    } else {
        mz_esize_params p = mz_esize_params_default();
        p.headroom_pct = 0;
        p.headroom_bytes = MIB(256 - 64); /* target 64 MiB */
        mz_esize_state st;
        mz_esize_state_init(&st, &p);
        mz_esize_held h = {.held = MIB(500), .total = MIB(500), .unit = MIB(1)};
        mz_psig s = {.source = MZ_PRESSURE_CG1_USAGE};
        mz_esize_out o;
        mz_psig_read_dirs(NULL, cg, &s);
        mz_esize(&p, &st, &s, &h, &o);
        printf("  real v1, idle child: limit %.1f MiB usage %.2f MiB -> %s %.2f MiB\n", (double)s.v1_limit / MIB(1),
               (double)s.v1_usage / MIB(1), mz_esize_basis_name(o.basis), (double)o.bytes / MIB(1));
        CHECK(s.v1_limit == MIB(256));
        CHECK(o.basis == MZ_ESIZE_CLEAR && o.bytes == 0);
        CHECK(write(cmd[1], "a", 1) == 1 && read(ack[0], &a, 1) == 1 && a == 'k');
        memset(&s, 0, sizeof s);
        s.source = MZ_PRESSURE_CG1_USAGE;
        mz_psig_read_dirs(NULL, cg, &s);
        mz_esize(&p, &st, &s, &h, &o);
        /* 96 MiB mapped against a 64 MiB target: a need of 32 MiB, plus the
         * child's own few pages (page tables, stack): within 2 MiB. */
        printf("  real v1, 96 MiB mapped: usage %.2f MiB (inactive file %.2f) -> %s %.2f MiB (%s)\n",
               (double)s.v1_usage / MIB(1), (double)s.inactive_file / MIB(1), mz_esize_basis_name(o.basis),
               (double)o.bytes / MIB(1), o.why);
        CHECK_MSG(o.basis == MZ_ESIZE_CGROUP && o.bytes >= MIB(32) && o.bytes <= MIB(34), "need %.2f MiB",
                  (double)o.bytes / MIB(1));
        CHECK(write(cmd[1], "f", 1) == 1 && read(ack[0], &a, 1) == 1 && a == 'k');
        memset(&s, 0, sizeof s);
        s.source = MZ_PRESSURE_CG1_USAGE;
        mz_psig_read_dirs(NULL, cg, &s);
        mz_esize(&p, &st, &s, &h, &o);
        CHECK_MSG(o.basis == MZ_ESIZE_CLEAR, "after the release: %s", o.why);
    }
    if (pid > 0) {
        if (write(cmd[1], "q", 1) != 1) kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    close(cmd[0]), close(cmd[1]), close(ack[0]), close(ack[1]);
    for (int i = 0; i < 50 && rmdir(cg); i++) usleep(20000);
    CHECK_MSG(access(cg, F_OK) != 0, "test cgroup left behind");
}

/* ---- 4b. restore ahead: room below the target ------------------------------------------- */

static void part_room(void)
{
    /* The multitask scenario's figures: v1 limit 349 MiB, headroom 32 MiB →
     * target 317 MiB. Hog released: usage 35 MiB; 266 MiB evicted fit
     * (35 + 266 = 301 <= 317); with the hog still holding 25 MiB they do
     * not (326 > 317); 282 MiB is the most that fits (35 + 282 = 317). */
    mz_esize_params p = mz_esize_params_default();
    p.headroom_pct = 0;
    p.headroom_bytes = MIB(32);
    mz_psig sig = {.source = MZ_PRESSURE_CG1_USAGE, .v1_limit = MIB(349), .v1_usage = MIB(35)};
    mz_esize_out o;
    CHECK_MSG(mz_esize_room(&p, &sig, MIB(266), &o) && o.target == MIB(317) && o.usage == MIB(35) &&
                  o.basis == MZ_ESIZE_CLEAR, "266 MiB back into 35 of 317: %s", o.why);
    CHECK_MSG(mz_esize_room(&p, &sig, MIB(282), &o), "exactly the room: %s", o.why);
    CHECK_MSG(!mz_esize_room(&p, &sig, MIB(282) + 1, &o) && o.basis == MZ_ESIZE_CGROUP, "a byte over: %s", o.why);
    sig.v1_usage = MIB(60);
    CHECK_MSG(!mz_esize_room(&p, &sig, MIB(266), &o), "hog still there: %s", o.why);
    /* Inactive file pages do not take room (the kernel drops them). */
    sig.inactive_file = MIB(25);
    CHECK_MSG(mz_esize_room(&p, &sig, MIB(266), &o) && o.usage == MIB(35), "inactive file: %s", o.why);
    /* Usage above the target: no room at all, even for nothing more than 1 byte. */
    sig.inactive_file = 0;
    sig.v1_usage = MIB(330);
    CHECK_MSG(!mz_esize_room(&p, &sig, 1, &o) && mz_esize_room(&p, &sig, 0, &o), "over the target: %s", o.why);
    /* v2: the lower of high and max; 10 % headroom of 400 → target 360. */
    p.headroom_bytes = 0;
    p.headroom_pct = 10;
    mz_psig v2 = {.source = MZ_PRESSURE_CG2_EVENTS, .v2_high = MIB(400), .v2_max = MIB(500), .v2_current = MIB(100)};
    CHECK_MSG(mz_esize_room(&p, &v2, MIB(260), &o) && o.target == MIB(360), "v2 fits: %s", o.why);
    CHECK_MSG(!mz_esize_room(&p, &v2, MIB(261), &o), "v2 a MiB over: %s", o.why);
    /* No limit anywhere: nothing to measure against, never restore ahead. */
    mz_psig none = {.source = MZ_PRESSURE_PSI, .v2_high = NOL, .v2_max = NOL, .v2_current = MIB(100),
                    .v1_limit = NOL, .v1_usage = MIB(100)};
    CHECK_MSG(!mz_esize_room(&p, &none, 1, &o) && o.target == 0, "no limit: %s", o.why);
}

/* ---- 6. the parsers ---------------------------------------------------------------------- */

static void part_parsers(void)
{
    CHECK(mz_psig_parse_value("268435456\n") == 268435456ULL);
    CHECK(mz_psig_parse_value("max\n") == MZ_PSIG_NOLIMIT);
    CHECK(mz_psig_parse_value("") == 0);
    CHECK(mz_psig_parse_value("-5") == 0);
    CHECK(mz_psig_parse_value(" 5") == 0);
    CHECK(mz_psig_parse_value("12abc") == 0);
    CHECK(mz_psig_parse_value("99999999999999999999999") == 0); /* overflow */
    const char *stat = "cache 1\ninactive_anon 7\ninactive_file 4096\ntotal_inactive_file 8192\n";
    CHECK(mz_psig_parse_stat(stat, "inactive_file") == 4096);
    CHECK(mz_psig_parse_stat(stat, "total_inactive_file") == 8192);
    CHECK(mz_psig_parse_stat(stat, "active_file") == 0);
    CHECK(mz_psig_parse_stat("inactive_file x\n", "inactive_file") == 0);
    mz_esize_params p = mz_esize_params_default();
    CHECK(mz_esize_parse_headroom("20%", &p) == 0 && p.headroom_pct == 20 && p.headroom_bytes == 0);
    CHECK(mz_esize_parse_headroom("64M", &p) == 0 && p.headroom_bytes == MIB(64) && p.headroom_pct == 0);
    CHECK(mz_esize_parse_headroom("1G", &p) == 0 && p.headroom_bytes == MIB(1024));
    CHECK(mz_esize_parse_headroom("4096", &p) == 0 && p.headroom_bytes == 4096);
    mz_esize_params before = p;
    CHECK(mz_esize_parse_headroom("101%", &p) == -1);
    CHECK(mz_esize_parse_headroom("-1M", &p) == -1);
    CHECK(mz_esize_parse_headroom("96%", &p) == -1);   /* more than MZ_ESIZE_HEADROOM_MAX_PCT */
    CHECK(mz_esize_parse_headroom("5MX", &p) == -1);
    CHECK(mz_esize_parse_headroom("0", &p) == -1);     /* no headroom is "0%" */
    CHECK(mz_esize_parse_headroom("0x40", &p) == -1);
    CHECK(mz_esize_parse_headroom("1e6", &p) == -1);
    CHECK(mz_esize_parse_headroom("%", &p) == -1);
    CHECK(mz_esize_parse_headroom("20%%", &p) == -1);
    CHECK(mz_esize_parse_headroom("nan", &p) == -1);
    CHECK(mz_esize_parse_headroom("nan%", &p) == -1);
    CHECK(mz_esize_parse_headroom("", &p) == -1);
    CHECK(mz_esize_parse_headroom(NULL, &p) == -1);
    CHECK(memcmp(&before, &p, sizeof p) == 0);
    /* the sizes serve's other options take (mz_parse_size): the same units */
    CHECK(mz_esize_parse_headroom("5MB", &p) == 0 && p.headroom_bytes == MIB(5));
    CHECK(mz_esize_parse_headroom("1.5GiB", &p) == 0 && p.headroom_bytes == MIB(1536));
    CHECK(mz_esize_parse_headroom("95%", &p) == 0 && p.headroom_pct == 95 && p.headroom_bytes == 0);
    CHECK(mz_esize_parse_headroom("0%", &p) == 0 && p.headroom_pct == 0 && p.headroom_bytes == 0);
    CHECK(mz_esize_parse_headroom("12.5%", &p) == 0 && p.headroom_pct == 12.5);
    before = p;
    CHECK(memcmp(&before, &p, sizeof p) == 0);
}

int main(void)
{
    part_parsers();
    part_tables();
    part_sequence();
    part_psi();
    part_random();
    part_room();
    part_real_v1();
    return t_done(T);
}
