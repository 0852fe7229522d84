/*
 * cgroup_util.h — the child cgroup-v1 memory group that test_pressure.c and
 * test_evict_size.c put their processes in, and writing its control files.
 * Header-only (static inline functions); Linux only, like the tests.
 */
#ifndef MZ_TEST_CGROUP_UTIL_H
#define MZ_TEST_CGROUP_UTIL_H

#include "pressure/pressure.h"
#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Writes s to the file at path (a control file: no partial writes); 0 or -errno. */
static inline int cg_write_str(const char *path, const char *s)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return -errno;
    int rc = write(fd, s, strlen(s)) < 0 ? -errno : 0;
    close(fd);
    return rc;
}

/* Creates OWN/mzcache-TAG-PID, OWN being this process's cgroup-v1 memory
 * group, into cg; false when there is none or it cannot be made, after
 * skipping part (t_skip_part) with why_no_v1 or the reason. */
static inline bool cg_make_child_v1(const char *part, const char *tag, const char *why_no_v1, char *cg,
                                    size_t cap)
{
    char own[512];
    if (mz_cgroup_v1_memory_dir(own, sizeof own)) {
        t_skip_part(part, why_no_v1);
        return false;
    }
    snprintf(cg, cap, "%.500s/mzcache-%s-%d", own, tag, (int)getpid());
    if (mkdir(cg, 0755)) {
        char why[300];
        snprintf(why, sizeof why, "cannot create a child memory cgroup (%s)", strerror(errno));
        t_skip_part(part, why);
        return false;
    }
    return true;
}

#endif
