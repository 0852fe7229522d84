/*
 * unit.c — unit states, the per-unit ready event (a futex on the state word)
 * and page release / re-mapping (contract in unit.h).
 */
#define _GNU_SOURCE
#include "unit.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

const char *mz_unit_state_name(mz_unit_state s)
{
    static const char *const names[MZ_UNIT_N_STATES] = {
        [MZ_UNIT_ABSENT] = "absent",
        [MZ_UNIT_RESIDENT] = "resident",
        [MZ_UNIT_COMPRESSED] = "compressed",
        [MZ_UNIT_STORED_RAW] = "stored-raw",
        [MZ_UNIT_STORED_COMPRESSED] = "stored-compressed",
        [MZ_UNIT_DROPPED] = "dropped",
        [MZ_UNIT_BUSY] = "busy",
    };
    return (unsigned)s < MZ_UNIT_N_STATES ? names[s] : "?";
}

static long futex(_Atomic uint32_t *addr, int op, uint32_t val)
{
    return syscall(SYS_futex, (uint32_t *)(uintptr_t)addr, op, val, NULL, NULL, 0);
}

void mz_unit_settle(mz_unit *u, mz_unit_state to)
{
    MZ_ASSERT(to != MZ_UNIT_BUSY);
    MZ_ASSERT(atomic_load_explicit(&u->state, memory_order_relaxed) == MZ_UNIT_BUSY);
    atomic_store_explicit(&u->state, (uint32_t)to, memory_order_release);
    /* Private futex: the word lives in this process only. Waking with no
     * waiters is one cheap syscall per settled unit; units are >= 4 KiB of
     * I/O or decoding each, so it never shows. */
    futex(&u->state, FUTEX_WAKE_PRIVATE, INT_MAX);
}

void mz_unit_set(mz_unit *u, mz_unit_state to)
{
    atomic_store_explicit(&u->state, (uint32_t)to, memory_order_release);
}

mz_unit_state mz_unit_wait_settled(mz_unit *u)
{
    for (;;) {
        uint32_t s = atomic_load_explicit(&u->state, memory_order_acquire);
        if (s != MZ_UNIT_BUSY) return (mz_unit_state)s;
        /* Sleeps only if the word is still BUSY (no lost wake-up). */
        long r = futex(&u->state, FUTEX_WAIT_PRIVATE, (uint32_t)MZ_UNIT_BUSY);
        MZ_ASSERT(r == 0 || errno == EAGAIN || errno == EINTR);
    }
}

static size_t mapped_len(size_t n)
{
    size_t p = mz_page_size();
    return (n + p - 1) / p * p;
}

void mz_unit_drop_pages(mz_unit *u)
{
    int r = madvise(u->buf, mapped_len(u->bytes), MADV_DONTNEED);
    MZ_ASSERT(r == 0);
}

void mz_unit_protect_pages(mz_unit *u)
{
    int r = mprotect(u->buf, mapped_len(u->bytes), PROT_NONE);
    MZ_ASSERT(r == 0);
}

void mz_unit_release_pages(mz_unit *u)
{
    /* DONTNEED first (frees the pages, RSS falls now), then PROT_NONE so a
     * read of an evicted unit faults instead of seeing zeros. */
    int r = madvise(u->buf, mapped_len(u->bytes), MADV_DONTNEED);
    MZ_ASSERT(r == 0);
    r = mprotect(u->buf, mapped_len(u->bytes), PROT_NONE);
    MZ_ASSERT(r == 0);
}

static int by_address(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)(*(mz_unit *const *)a)->buf, y = (uintptr_t)(*(mz_unit *const *)b)->buf;
    return x < y ? -1 : x > y;
}

void mz_units_release_pages(mz_unit **u, size_t n)
{
    qsort(u, n, sizeof *u, by_address);
    for (int pass = 0; pass < 2; pass++) /* drop every run, then protect (unit.h) */
        for (size_t i = 0; i < n;) {
            uint8_t *start = u[i]->buf, *end = start + mapped_len(u[i]->bytes);
            size_t j = i + 1;
            for (; j < n && u[j]->buf == end; j++) end += mapped_len(u[j]->bytes);
            int r = pass == 0 ? madvise(start, (size_t)(end - start), MADV_DONTNEED)
                              : mprotect(start, (size_t)(end - start), PROT_NONE);
            MZ_ASSERT(r == 0);
            i = j;
        }
}

mz_status mz_unit_map_pages(mz_unit *u)
{
    if (mprotect(u->buf, mapped_len(u->bytes), PROT_READ | PROT_WRITE) != 0)
        return mz_fail(MZ_E_NOMEM, "cannot re-map %zu bytes: %s", u->bytes, strerror(errno));
    return MZ_OK;
}
