/*
 * gate.c — the engine gate: one holder of the engine at a time (a request,
 * an eviction, a restore, a session deletion), a bounded queue of
 * completions with a timeout, priority for evictions and restores, and the
 * check for a client that left while its request waited. Leaving the gate
 * keeps the memory budget and refreshes the snapshot the control endpoints
 * read. Lock order: server_impl.h.
 */
#include "server/server_impl.h"

#include "core/core.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>

bool srv_client_gone(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci = c ? MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD) : NULL;
    if (!ci) return false;
    struct pollfd pfd = {.fd = ci->connect_fd, .events = POLLIN | POLLRDHUP};
    if (poll(&pfd, 1, 0) <= 0) return false;
    if (pfd.revents & (POLLHUP | POLLERR | POLLRDHUP)) return true;
    /* Readable: a pipelined request is data; end of stream is a close. */
    char b;
    return recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

int srv_gate_enter(mz_server_t *s, bool priority, double *wait_ms)
{
    return srv_gate_enter_for(s, priority, NULL, wait_ms);
}

int srv_gate_enter_for(mz_server_t *s, bool priority, struct MHD_Connection *client, double *wait_ms)
{
    double t0 = mz_time_ms();
    int rc = 0;
    pthread_mutex_lock(&s->mu);
    if (priority) {
        s->n_priority_waiting++;
        while (s->busy && !s->stopping) pthread_cond_wait(&s->cv, &s->mu);
        s->n_priority_waiting--;
        if (s->stopping) rc = 503;
    } else {
        if ((s->busy || s->n_priority_waiting) && s->n_waiting >= s->p.max_queue) {
            rc = 429;
        } else {
            struct timespec dl = srv_deadline_in(s->p.queue_timeout_ms);
            s->n_waiting++;
            while ((s->busy || s->n_priority_waiting) && !s->stopping && !rc && !srv_cut_short(s)) {
                /* With a client: wake every 200 ms to see whether it left. */
                struct timespec wake = dl;
                if (client) {
                    wake = srv_deadline_in(200);
                    if (wake.tv_sec > dl.tv_sec || (wake.tv_sec == dl.tv_sec && wake.tv_nsec > dl.tv_nsec)) wake = dl;
                }
                if (pthread_cond_timedwait(&s->cv, &s->mu, &wake) == ETIMEDOUT) {
                    struct timespec now;
                    clock_gettime(CLOCK_REALTIME, &now);
                    if (now.tv_sec > dl.tv_sec || (now.tv_sec == dl.tv_sec && now.tv_nsec >= dl.tv_nsec)) rc = 503;
                }
                if (!rc && client && srv_client_gone(client)) rc = SRV_GATE_CLIENT_GONE;
            }
            s->n_waiting--;
            if ((s->stopping || srv_cut_short(s)) && rc != SRV_GATE_CLIENT_GONE) rc = 503;
        }
    }
    if (!rc) s->busy = true;
    pthread_mutex_unlock(&s->mu);
    if (wait_ms) *wait_ms = mz_time_ms() - t0;
    return rc;
}

void srv_gate_leave(mz_server_t *s)
{
    /* The budget is checked after every use of the engine: a request that
     * brought its session back, a restore, a new session. */
    srv_enforce_budget(s);
    s->cur = NULL;
    pthread_mutex_lock(&s->snap_mu);
    s->active_id[0] = '\0';
    pthread_mutex_unlock(&s->snap_mu);
    srv_sessions_snapshot(s);
    pthread_mutex_lock(&s->mu);
    s->busy = false;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* The gate if nobody holds it or waits for it, else 1 (the monitor thread
 * must not queue behind requests: signals would wait with it). */
int srv_gate_try_enter(mz_server_t *s)
{
    int rc = 1;
    pthread_mutex_lock(&s->mu);
    if (!s->busy && !s->stopping && !s->n_waiting && !s->n_priority_waiting) {
        s->busy = true;
        rc = 0;
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}
