/*
 * relief.c — the pressure → eviction path and its way back: the monitor's
 * callback sizes an eviction from the signal (src/pressure/evict_size.c),
 * evicts over the sessions under the gate and records the event; relief
 * checks restore what pressure took once it fits again. The eviction itself
 * (srv_evict_event) is shared with POST /mz/evict.
 */
#include "server/server_impl.h"

#include "core/core.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <math.h>
#include <stdint.h>
#include <string.h>

void srv_record_event(mz_server_t *s, const srv_event *ev)
{
    pthread_mutex_lock(&s->snap_mu);
    s->events[s->n_events % SRV_N_EVENTS] = *ev;
    s->n_events++;
    pthread_mutex_unlock(&s->snap_mu);
}

size_t srv_evictable_total(const mz_mem_stats *st)
{
    return st->weights.total_bytes + st->kv.total_bytes;
}

static size_t evictable_held(const mz_mem_stats *st)
{
    return st->weights.resident_bytes + st->weights.compressed_bytes + st->kv.resident_bytes +
           st->kv.compressed_bytes;
}

/* Caller owns the engine. Evicts nbytes (SIZE_MAX: all) over the sessions,
 * least recently used first; fills ev. */
mz_status srv_evict_event(mz_server_t *s, size_t nbytes, srv_event *ev, mz_evict_report *rep)
{
    mz_status st = srv_evict_sessions(s, nbytes, rep);
#ifdef __GLIBC__
    /* The heap memory the requests, restores and evictions freed goes back
     * too: glibc gives back only the top of its main heap and of each
     * per-thread arena, and only above its trim threshold (which it raises
     * whenever a chunk it had mmapped is freed), so the pages of freed
     * chunks stay resident: the daemon's RSS with everything evicted rose
     * 60 -> 77 MiB over evict / restore / question cycles of a 2.9k-token
     * SmolLM2 conversation, two arenas holding 13 and 14 MB of free chunks.
     * malloc_trim returns the free pages of every arena (1-3 ms). */
    malloc_trim(0);
#endif
    mz_mem_stats after;
    srv_mem_stats(s, &after);
    ev->requested = nbytes;
    ev->freed = rep->bytes_freed;
    ev->remaining_pct = after.remaining_pct;
    ev->ms = rep->time_ms;
    return st;
}

/* A relief check (mz_pressure_want_relief, asked after every pressure
 * eviction): what pressure took is restored before the next request needs it
 * once all of it fits below the cgroup's target (mz_esize_room) and no signal
 * has asked for bytes for restore_ahead_quiet_ms. All or nothing (mz_restore
 * brings a context back whole; the pipelined restore of a request, with no
 * tokens to prefill): a partial fit waits; a request in flight or
 * waiting goes first (it restores what it needs itself). While the restore
 * runs, signals wait on this thread (the kernel coalesces them). */
static void on_relief(mz_server_t *s, const mz_pressure_event *pe)
{
    double now = mz_time_ms();
    pthread_mutex_lock(&s->snap_mu);
    bool quiet = now - s->last_squeeze_ms >= (double)s->p.restore_ahead_quiet_ms;
    pthread_mutex_unlock(&s->snap_mu);
    if (!quiet) return;
    mz_psig sig;
    mz_pressure_read_signal(pe->monitor, pe, &sig);
    if (srv_gate_try_enter(s)) return;
    mz_mem_stats st;
    srv_mem_stats(s, &st);
    size_t back = srv_evictable_total(&st) - st.weights.resident_bytes - st.kv.resident_bytes;
    if (back == 0) {
        mz_pressure_want_relief(pe->monitor, false);
        srv_gate_leave(s);
        return;
    }
    /* What the restore adds: the evicted units' resident size less the
     * compressed stack it pops (its segments are unmapped as they empty). */
    size_t in_stack = st.weights.compressed_bytes + st.kv.compressed_bytes;
    size_t grow = back > in_stack ? back - in_stack : 0;
    if (s->p.mem_budget_bytes && srv_footprint(s) + grow > s->p.mem_budget_bytes) {
        /* The memory budget holds the rest (srv_enforce_budget would evict it
         * again at once): pressure has nothing left to give back. */
        mz_pressure_want_relief(pe->monitor, false);
        srv_gate_leave(s);
        return;
    }
    mz_esize_out o;
    if (!mz_esize_room(mz_pressure_esize_params(pe->monitor), &sig, grow, &o)) {
        srv_gate_leave(s);
        if (s->p.verbose) srv_log(s, "relief: %s: not restoring yet", o.why);
        return;
    }
    mz_restore_report rep = {0};
    mz_engine_restore_units units = {0};
    mz_status rc = srv_restore_sessions(s, true, &rep, &units);
    mz_mem_stats after;
    srv_mem_stats(s, &after);
    pthread_mutex_lock(&s->snap_mu);
    s->n_restores_ahead++;
    s->restored_ahead_bytes += rep.bytes_restored;
    pthread_mutex_unlock(&s->snap_mu);
    srv_gate_leave(s);
    if (!rc && after.remaining_pct >= 100.0) mz_pressure_want_relief(pe->monitor, false);
    srv_log(s, "relief: %s -> restored %.1f MiB ahead in %.1f ms (%zu units from storage, %zu from memory); "
               "remaining %.1f%%%s",
            o.why, (double)rep.bytes_restored / 1048576.0, rep.time_ms, units.n_storage, units.n_memory, after.remaining_pct,
            rc ? " (failed part way; see above)" : "");
}

void srv_on_pressure(void *user, const mz_pressure_event *pe)
{
    /* How much to evict comes from src/pressure/evict_size.c: the cgroup's
     * need (usage above limit − headroom), or a small PSI step with back-off;
     * nothing once the signal has cleared. */
    mz_server_t *s = user;
    if (pe->relief) {
        on_relief(s, pe);
        return;
    }
    const char *src = mz_pressure_source_name(pe->source);
    double now = mz_time_ms();
    pthread_mutex_lock(&s->snap_mu);
    s->n_signals[pe->source]++;
    bool ignore_level = pe->level < s->p.pressure_min_level;
    if (ignore_level) s->n_ignored_level++;
    bool log_low = ignore_level && now - s->last_low_log_ms > 10000.0;
    if (log_low) s->last_low_log_ms = now;
    pthread_mutex_unlock(&s->snap_mu);
    if (ignore_level) {
        if (log_low)
            srv_log(s, "pressure %s (%s): below the action level, not evicting (counted; logged at most every 10 s)",
                    src, pe->what);
        return;
    }
    /* The cgroup figures are read before waiting for the gate: a request in
     * flight may finish first, and the need is re-read on the next signal. */
    mz_psig sig;
    mz_pressure_read_signal(pe->monitor, pe, &sig);
    if (srv_gate_enter(s, true, NULL)) return; /* shutting down */
    mz_mem_stats st;
    srv_mem_stats(s, &st);
    size_t total = srv_evictable_total(&st), held = evictable_held(&st);
    double floor_b = fmax((double)s->p.evict_floor_bytes, (double)total * s->p.evict_floor_pct / 100.0);
    double allowed = (double)held - floor_b;
    double unit_w = st.weights.n_units ? (double)st.weights.total_bytes / (double)st.weights.n_units : 0;
    double unit_kv = st.kv.n_units ? (double)st.kv.total_bytes / (double)st.kv.n_units : 0;
    double unit_min = unit_w > 0 && unit_kv > 0 ? fmin(unit_w, unit_kv) : fmax(unit_w, unit_kv);
    /* Units are whole and mz_evict frees at least what it is asked: with a
     * floor, less than a unit above it is nothing to give. */
    if ((s->p.evict_floor_bytes || s->p.evict_floor_pct > 0) && allowed < unit_min) allowed = 0;
    mz_esize_params prm = *mz_pressure_esize_params(pe->monitor);
    if (s->p.evict_step_bytes) prm.psi_step_bytes = s->p.evict_step_bytes;
    else if (s->p.evict_step_pct > 0) prm.psi_step_pct = s->p.evict_step_pct;
    if (s->p.pressure_interval_ms > 0) prm.psi_backoff_ms = s->p.pressure_interval_ms;
    mz_esize_held h = {.held = allowed > 0 ? (uint64_t)allowed : 0, .total = total, .unit = (uint64_t)unit_min};
    mz_esize_out o;
    mz_esize(&prm, mz_pressure_esize_state(pe->monitor), &sig, &h, &o);
    if (o.need > 0 && o.basis != MZ_ESIZE_CLEAR && o.basis != MZ_ESIZE_BACKOFF) {
        pthread_mutex_lock(&s->snap_mu);
        s->last_squeeze_ms = mz_time_ms();
        pthread_mutex_unlock(&s->snap_mu);
    }
    srv_event ev = {.t_unix = srv_unix_now()};
    snprintf(ev.trigger, sizeof ev.trigger, "%s", src);
    snprintf(ev.what, sizeof ev.what, "%s", pe->what);
    if (o.bytes == 0) {
        bool empty = o.basis == MZ_ESIZE_EMPTY;
        pthread_mutex_lock(&s->snap_mu);
        if (empty) s->n_ignored_floor++;
        else s->n_ignored_interval++;
        bool first = empty && s->last_pressure_evict_ms >= 0; /* log once per floor episode */
        if (empty) s->last_pressure_evict_ms = -1;
        pthread_mutex_unlock(&s->snap_mu);
        srv_gate_leave(s);
        if (empty) {
            ev.at_floor = true;
            ev.remaining_pct = st.remaining_pct;
            srv_record_event(s, &ev);
            if (first)
                srv_log(s, "pressure %s (%s): %s; at the floor (remaining %.1f%%), nothing more to give", src,
                        pe->what, o.why, st.remaining_pct);
        } else if (s->p.verbose) {
            srv_log(s, "pressure %s (%s): %s, not evicting", src, pe->what, o.why);
        }
        return;
    }
    mz_evict_report rep = {0};
    mz_status rc = srv_evict_event(s, (size_t)o.bytes, &ev, &rep);
    if (s->p.restore_ahead) mz_pressure_want_relief(pe->monitor, true);
    pthread_mutex_lock(&s->snap_mu);
    s->n_evictions[0]++;
    s->evicted_bytes[0] += rep.bytes_freed;
    s->last_pressure_evict_ms = mz_time_ms();
    pthread_mutex_unlock(&s->snap_mu);
    srv_gate_leave(s);
    srv_record_event(s, &ev);
    srv_log(s, "pressure %s (%s): %s [%s] -> evict %.1f MiB%s -> freed %.1f MiB (%.2fx the need) in %.1f ms "
               "(KV %zu compressed, %zu stored, %zu moved; %zu weight blocks dropped); remaining %.1f%%%s",
            src, pe->what, o.why, mz_esize_basis_name(o.basis), (double)o.bytes / 1048576.0,
            o.bytes < o.need ? (floor_b > 0 ? ", limited by the floor" : ", all that is left") : "",
            (double)rep.bytes_freed / 1048576.0, o.need ? (double)rep.bytes_freed / (double)o.need : 0.0,
            rep.time_ms, rep.n_kv_compressed, rep.n_kv_stored_raw + rep.n_kv_stored_compressed,
            rep.n_kv_compkv, rep.n_weights_dropped, ev.remaining_pct, rc ? " (failed part way; see above)" : "");
}
