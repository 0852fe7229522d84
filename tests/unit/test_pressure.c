/*
 * test_pressure.c — the memory-pressure monitor on this machine's real
 * interfaces, and pressure → eviction in a running server.
 *
 *   1. cgroup discovery and the per-interface description (always);
 *   2. PSI trigger registration: a 2 s window, and what a 1 s window gets
 *      (skipped, saying why, where PSI is missing or refused);
 *   3. cgroup v1: a child memory cgroup under this process's own, with a
 *      limit, a child process moved in that allocates; a usage threshold
 *      fires the monitor's callback;
 *   4. the same cgroup watched by an in-process server: the child's
 *      allocation makes the server evict; once the child frees, the server
 *      restores ahead by itself (relief checks), and the same greedy answer
 *      comes back.
 * Parts 3-4 are skipped, saying why, where no v1 memory cgroup is writable.
 * Part 4 runs alone as ctest's test_pressure_server (`test_pressure server`),
 * so a host where it cannot run shows it as Skipped, not as a pass.
 */
#define _GNU_SOURCE
#include "pressure/pressure.h"
#include "server/server.h"

#include "cgroup_util.h"
#include "server_util.h"
#include "testutil.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MiB (1024.0 * 1024.0)

typedef struct seen {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n[MZ_PRESSURE_N_SOURCES];
    mz_pressure_event last;
} seen;

static void on_event(void *user, const mz_pressure_event *ev)
{
    seen *s = user;
    pthread_mutex_lock(&s->mu);
    s->n[ev->source]++;
    s->last = *ev;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static bool wait_for(seen *s, mz_pressure_source src, int n, int timeout_ms)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += timeout_ms / 1000;
    pthread_mutex_lock(&s->mu);
    while (s->n[src] < n)
        if (pthread_cond_timedwait(&s->cv, &s->mu, &dl) == ETIMEDOUT) break;
    bool ok = s->n[src] >= n;
    pthread_mutex_unlock(&s->mu);
    return ok;
}

static const char *state_of(const mz_pressure_monitor_t *m, mz_pressure_source s)
{
    static char buf[256];
    mz_pressure_source_state(m, s, buf, sizeof buf);
    return buf;
}

/* ---- a child process in the test cgroup, allocating on command ----------------------- */

typedef struct hog {
    pid_t pid;
    int cmd_fd, ack_fd;
} hog;

static void hog_main(const char *cg, int cmd, int ack)
{
    char path[700], pid[32];
    snprintf(path, sizeof path, "%.600s/cgroup.procs", cg);
    snprintf(pid, sizeof pid, "%d", getpid());
    char ok = cg_write_str(path, pid) ? 'E' : 'k';
    if (write(ack, &ok, 1) != 1) _exit(1);
    void *mem = NULL;
    size_t n = 0;
    char c;
    while (read(cmd, &c, 1) == 1) {
        if (c == 'a' && !mem) {
            n = 96u << 20;
            /* MAP_POPULATE: the kernel faults every page in (charged to the
             * cgroup) without user-space writes, which sanitizers would
             * shadow with memory of their own. */
            mem = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
            if (mem == MAP_FAILED) mem = NULL;
        } else if (c == 'f' && mem) {
            munmap(mem, n);
            mem = NULL;
        } else if (c == 'q') {
            break;
        }
        char a = mem || c != 'a' ? 'k' : 'E';
        if (write(ack, &a, 1) != 1) break;
    }
    _exit(0);
}

static int hog_start(hog *h, const char *cg)
{
    int cmd[2], ack[2];
    if (pipe(cmd) || pipe(ack)) return -1;
    h->pid = fork();
    if (h->pid < 0) return -1;
    if (h->pid == 0) {
        close(cmd[1]);
        close(ack[0]);
        hog_main(cg, cmd[0], ack[1]);
    }
    close(cmd[0]);
    close(ack[1]);
    h->cmd_fd = cmd[1];
    h->ack_fd = ack[0];
    char c = 0;
    return read(h->ack_fd, &c, 1) == 1 && c == 'k' ? 0 : -1;
}

static int hog_cmd(hog *h, char c)
{
    char a = 0;
    if (write(h->cmd_fd, &c, 1) != 1 || read(h->ack_fd, &a, 1) != 1) return -1;
    return a == 'k' ? 0 : -1;
}

static void hog_stop(hog *h)
{
    if (h->pid <= 0) return;
    char q = 'q';
    if (write(h->cmd_fd, &q, 1) != 1) kill(h->pid, SIGKILL);
    waitpid(h->pid, NULL, 0);
    close(h->cmd_fd);
    close(h->ack_fd);
    h->pid = 0;
}

/* ---- server helpers ------------------------------------------------------------------- */

static int g_port;

static cJSON *get_json(const char *method, const char *path, const char *body, int *status)
{
    mz_http_response r;
    *status = -1;
    if (mz_http_request("127.0.0.1", g_port, method, path, NULL, body, body ? strlen(body) : 0, 30000, &r))
        return NULL;
    *status = r.status;
    cJSON *j = cJSON_ParseWithLength(r.body, r.len);
    mz_http_response_free(&r);
    return j;
}

static char *answer(const char *body)
{
    int st;
    cJSON *j = get_json("POST", "/v1/chat/completions", body, &st);
    CHECK_EQ_INT(st, 200);
    const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "message"), "content");
    char *out = cJSON_IsString(m) ? strdup(m->valuestring) : NULL;
    cJSON_Delete(j);
    return out;
}

static double status_num(const char *a, const char *b)
{
    int st;
    cJSON *j = get_json("GET", "/mz/status", NULL, &st);
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, a), b);
    double v = cJSON_IsNumber(o) ? o->valuedouble : -1;
    cJSON_Delete(j);
    return v;
}

/* ---- parts ------------------------------------------------------------------------------- */

static void part_psi(void)
{
    seen s = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, {0}, {0}};
    mz_pressure_params p = mz_pressure_params_default();
    for (int i = 0; i < MZ_PRESSURE_N_SOURCES; i++) p.enable[i] = i == MZ_PRESSURE_PSI;
    mz_pressure_monitor_t *m = NULL;
    CHECK(mz_pressure_start(&p, on_event, &s, &m) == MZ_OK);
    const char *st = state_of(m, MZ_PRESSURE_PSI);
    fprintf(stderr, "psi (2 s window): %s\n", st);
    CHECK(st[0] != '\0');
    bool active = mz_pressure_active(m, MZ_PRESSURE_PSI);
    mz_pressure_stop(m);
    if (!active) {
        char why[300];
        snprintf(why, sizeof why, "PSI trigger not registered here (%.250s)", st);
        t_skip_part("psi", why);
        return;
    }
    /* A 1 s window: accepted with CAP_SYS_RESOURCE, else refused with a clear reason. */
    p.psi_trigger = "some 100000 1000000";
    CHECK(mz_pressure_start(&p, on_event, &s, &m) == MZ_OK);
    st = state_of(m, MZ_PRESSURE_PSI);
    fprintf(stderr, "psi (1 s window): %s\n", st);
    CHECK(mz_pressure_active(m, MZ_PRESSURE_PSI) || strstr(st, "multiple of 2 s") != NULL);
    mz_pressure_stop(m);
    /* A bad trigger is refused, not fatal. */
    p.psi_trigger = "nonsense";
    CHECK(mz_pressure_start(&p, on_event, &s, &m) == MZ_OK);
    CHECK(!mz_pressure_active(m, MZ_PRESSURE_PSI));
    CHECK(mz_pressure_n_active(m) == 0);
    mz_pressure_stop(m);
}

/* server_only: part 4 alone (ctest test_pressure_server), else parts 3
 * and 3b; each needs the child cgroup. */
static void part_cgroup_v1(bool server_only)
{
    const char *part = server_only ? "server (cgroup-v1)" : "cgroup-v1";
    char cg[600];
    if (!cg_make_child_v1(part, "test",
                          "no cgroup-v1 memory controller for this process (the in-server pressure test "
                          "watches a child v1 memory cgroup)",
                          cg, sizeof cg))
        return;
    char path[700];
    snprintf(path, sizeof path, "%.600s/memory.limit_in_bytes", cg);
    int rc = cg_write_str(path, "268435456");
    CHECK_MSG(rc == 0, "set limit: %s", strerror(-rc));
    hog h = {0};
    if (hog_start(&h, cg)) {
        t_skip_part(part, "cannot move a process into the child cgroup");
        hog_stop(&h);
        rmdir(cg);
        return;
    }

    /* 3. the monitor alone: a usage threshold fires */
    if (!server_only) {
        seen s = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, {0}, {0}};
        mz_pressure_params p = mz_pressure_params_default();
        p.enable[MZ_PRESSURE_PSI] = p.enable[MZ_PRESSURE_CG2_EVENTS] = false;
        p.cg1_dir = cg;
        p.cg1_thresholds[0] = 48.0 * MiB;
        p.cg1_thresholds[1] = 90; /* 90 % of 256 MiB */
        p.resignal_ms = 200;
        mz_pressure_monitor_t *m = NULL;
        CHECK(mz_pressure_start(&p, on_event, &s, &m) == MZ_OK);
        char desc[1024];
        mz_pressure_describe(m, desc, sizeof desc);
        fprintf(stderr, "monitor on the test cgroup:\n%s", desc);
        CHECK(mz_pressure_active(m, MZ_PRESSURE_CG1_USAGE));
        CHECK(mz_pressure_active(m, MZ_PRESSURE_CG1_LEVEL));
        CHECK_EQ_INT(hog_cmd(&h, 'a'), 0);
        CHECK_MSG(wait_for(&s, MZ_PRESSURE_CG1_USAGE, 1, 10000), "no usage-threshold event");
        pthread_mutex_lock(&s.mu);
        mz_pressure_event ev = s.last;
        pthread_mutex_unlock(&s.mu);
        fprintf(stderr, "event: %s (%s)\n", ev.what, mz_pressure_source_name(ev.source));
        CHECK(ev.usage_bytes >= (size_t)(48.0 * MiB));
        CHECK(ev.threshold_bytes == (size_t)(48.0 * MiB));
        /* still above: re-signalled */
        CHECK_MSG(wait_for(&s, MZ_PRESSURE_CG1_USAGE, 3, 5000), "no re-signal while above");
        CHECK_EQ_INT(hog_cmd(&h, 'f'), 0);
        usleep(500 * 1000);
        pthread_mutex_lock(&s.mu);
        int n_before = s.n[MZ_PRESSURE_CG1_USAGE];
        pthread_mutex_unlock(&s.mu);
        usleep(700 * 1000);
        pthread_mutex_lock(&s.mu);
        CHECK_MSG(s.n[MZ_PRESSURE_CG1_USAGE] == n_before, "signals kept coming below the threshold");
        pthread_mutex_unlock(&s.mu);
        mz_pressure_stop(m);
    }

    /* 3b. percent thresholds follow the limit */
    if (!server_only) {
        seen s = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, {0}, {0}};
        mz_pressure_params p = mz_pressure_params_default();
        for (int i = 0; i < MZ_PRESSURE_N_SOURCES; i++) p.enable[i] = i == MZ_PRESSURE_CG1_USAGE;
        p.cg1_dir = cg;
        p.cg1_thresholds[0] = 50; /* 50 % of 256 MiB = 128 MiB */
        mz_pressure_monitor_t *m = NULL;
        CHECK(mz_pressure_start(&p, on_event, &s, &m) == MZ_OK);
        CHECK_MSG(strstr(state_of(m, MZ_PRESSURE_CG1_USAGE), "128.0 MiB") != NULL, "%s",
                  state_of(m, MZ_PRESSURE_CG1_USAGE));
        CHECK(cg_write_str(path, "134217728") == 0); /* 128 MiB: threshold 64 MiB */
        bool moved = false;
        for (int i = 0; i < 40 && !moved; i++) {
            usleep(100 * 1000);
            moved = strstr(state_of(m, MZ_PRESSURE_CG1_USAGE), "64.0 MiB") != NULL;
        }
        CHECK_MSG(moved, "threshold did not follow the limit: %s", state_of(m, MZ_PRESSURE_CG1_USAGE));
        CHECK_EQ_INT(hog_cmd(&h, 'a'), 0); /* 96 MiB > 64 MiB */
        CHECK_MSG(wait_for(&s, MZ_PRESSURE_CG1_USAGE, 1, 10000), "no event at the re-armed threshold");
        CHECK_EQ_INT(hog_cmd(&h, 'f'), 0);
        mz_pressure_stop(m);
        CHECK(cg_write_str(path, "268435456") == 0);
    }

    /* 4. a server watching the cgroup evicts when the child allocates */
    const char *real = server_only ? t_real_model_path() : NULL;
    if (!server_only) {
        /* part 4 runs as test_pressure_server */
    } else if (!real) {
        t_skip_part("server", "no models/SmolLM2 (its tokenizer is needed)");
    } else {
        const char *model = t_tmp_path("pressure-tiny.gguf");
        CHECK_MSG(srv_gen_tiny(model, real) == MZ_OK, "gen-model: %s", mz_last_error());
        char model_path[512], swap_dir[512];
        snprintf(model_path, sizeof model_path, "%s", model);
        snprintf(swap_dir, sizeof swap_dir, "%s", t_tmp_path("pressure-swap"));
        mz_server_params sp = srv_params(model_path, swap_dir);
        sp.pressure_params.enable[MZ_PRESSURE_PSI] = false;
        sp.pressure_params.enable[MZ_PRESSURE_CG2_EVENTS] = false;
        sp.pressure_params.cg1_dir = cg;
        sp.pressure_params.cg1_thresholds[0] = 48.0 * MiB;
        sp.pressure_params.resignal_ms = 200;
        sp.pressure_interval_ms = 100;
        sp.evict_floor_pct = 50;
        /* Sizing (evict_size.h): target = 256 MiB - 162 MiB = 94 MiB, so the
         * child's 96 MiB give a need of ~2 MiB per signal. The server's own
         * memory is not in this cgroup, so the need stays and the server
         * steps down signal by signal, each step the need, to the floor. */
        sp.pressure_params.size.headroom_pct = 0;
        sp.pressure_params.size.headroom_bytes = 162ull << 20;
        mz_server_t *srv = NULL;
        CHECK_MSG(mz_server_start(&sp, &srv) == MZ_OK, "server: %s", mz_last_error());
        if (srv) {
            g_port = mz_server_port(srv);
            const char *body = "{\"messages\":[{\"role\":\"user\",\"content\":\"Count to ten, slowly, please.\"}],"
                               "\"temperature\":0,\"max_tokens\":24}";
            char *before = answer(body);
            CHECK(status_num("memory", "remaining_pct") == 100);
            CHECK_EQ_INT(hog_cmd(&h, 'a'), 0);
            /* The need (~2 MiB) is more than this tiny model holds above the
             * floor: one eviction down to the floor, then at-floor signals. */
            double rem = 100;
            for (int i = 0; i < 100 && status_num("pressure", "at_floor") < 1; i++) usleep(100 * 1000);
            rem = status_num("memory", "remaining_pct");
            double nev = status_num("pressure", "evictions");
            fprintf(stderr, "server under pressure: %.0f evictions, remaining %.1f%%\n", nev, rem);
            CHECK_MSG(nev >= 1, "pressure evictions: %.0f", nev);
            /* Whole units: the floor holds to within one unit (here ~6 % each). */
            CHECK_MSG(rem <= 50 && rem >= 40, "remaining %.1f%% (floor 50%%)", rem);
            CHECK(status_num("pressure", "at_floor") >= 1);
            CHECK_EQ_INT(hog_cmd(&h, 'f'), 0);
            /* Restore ahead: the child's pages are gone, so everything evicted
             * (~50 % of a tiny model) fits below the target again; a second
             * after the last signal the server brings it back by itself. */
            for (int i = 0; i < 100 && status_num("pressure", "restores_ahead") < 1; i++) usleep(100 * 1000);
            double n_ahead = status_num("pressure", "restores_ahead");
            rem = status_num("memory", "remaining_pct");
            fprintf(stderr, "after the release: %.0f restores ahead, remaining %.1f%%\n", n_ahead, rem);
            CHECK_MSG(n_ahead >= 1 && rem == 100, "restore ahead: %.0f, remaining %.1f%%", n_ahead, rem);
            CHECK(status_num("pressure", "restored_ahead_bytes") > 0);
            char *after = answer(body);
            CHECK_MSG(before && after && !strcmp(before, after), "after pressure: '%s' vs '%s'", after ? after : "",
                      before ? before : "");
            int st;
            cJSON *j = get_json("GET", "/mz/status", NULL, &st);
            const cJSON *evs = cJSON_GetObjectItemCaseSensitive(j, "events"), *e;
            int n_cg = 0;
            cJSON_ArrayForEach(e, evs) {
                const cJSON *t = cJSON_GetObjectItemCaseSensitive(e, "trigger");
                if (cJSON_IsString(t) && !strcmp(t->valuestring, "cg1-usage")) n_cg++;
                /* Each eviction asked at most the need (~2 MiB), never a fixed step. */
                const cJSON *rq = cJSON_GetObjectItemCaseSensitive(e, "requested_bytes");
                if (cJSON_IsNumber(rq) && rq->valuedouble > 0)
                    CHECK_MSG(rq->valuedouble <= 3.0 * MiB, "requested %.2f MiB", rq->valuedouble / MiB);
            }
            CHECK_MSG(n_cg >= 2, "cg1-usage events in status: %d", n_cg); /* the eviction and the floor */
            cJSON_Delete(j);
            free(before);
            free(after);
            mz_server_stop(srv);
        }
    }
    hog_stop(&h);
    for (int i = 0; i < 50 && rmdir(cg); i++) usleep(20000);
    CHECK_MSG(access(cg, F_OK) != 0, "test cgroup left behind");
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    if (argc > 1 && !strcmp(argv[1], "server")) {
        part_cgroup_v1(true);
        int rc = t_done("test_pressure_server");
        /* Its one part did not run: skipped, whatever the set-up checked. */
        return rc == 0 && t_parts_skipped ? T_EXIT_SKIP : rc;
    }
    char dir[512];
    if (!mz_cgroup_v1_memory_dir(dir, sizeof dir)) {
        fprintf(stderr, "v1 memory cgroup: %s\n", dir);
        CHECK(access(dir, F_OK) == 0);
    }
    if (!mz_cgroup_v2_dir(dir, sizeof dir)) {
        fprintf(stderr, "v2 cgroup: %s\n", dir);
        CHECK(access(dir, F_OK) == 0);
    }
    {
        /* Everything at once, the way the server starts it: never an error. */
        seen s = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, {0}, {0}};
        mz_pressure_monitor_t *m = NULL;
        CHECK(mz_pressure_start(NULL, on_event, &s, &m) == MZ_OK);
        char desc[2048];
        size_t n = mz_pressure_describe(m, desc, sizeof desc);
        CHECK(n > 0 && strstr(desc, "psi: ") && strstr(desc, "cg1-usage: "));
        fprintf(stderr, "interfaces on this machine:\n%s", desc);
        mz_pressure_stop(m);
    }
    part_psi();
    part_cgroup_v1(false);
    return t_done("test_pressure");
}
