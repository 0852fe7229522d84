/*
 * test_pressure_scenario.c — the real scenario, small: scripts/pressure-scenario.sh
 * --quick runs `mzcache serve` ($MZ_BIN) in a v1 memory cgroup with a limit,
 * builds a ~400-token conversation, grows a memory hog until only eviction
 * keeps the server alive, and requires: not OOM-killed, evicted, and the
 * next greedy answer equal to the one before the pressure (raw codec).
 * Skips (77), saying why, where no memory cgroup is writable, without the
 * model, or in sanitizer builds (the script's timing assumes a plain build;
 * the server code runs under the sanitizers in test_server/test_pressure).
 */
#define _GNU_SOURCE
#include "testutil.h"

#include <sys/wait.h>

int main(void)
{
    if (getenv("MZ_SANITIZED")) return t_skip("test_pressure_scenario", "sanitizer build: timing-dependent scenario runs in the plain build");
    const char *bin = getenv("MZ_BIN");
    if (!bin) return t_skip("test_pressure_scenario", "MZ_BIN not set (run through ctest)");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "MZ_BIN='%s' scripts/pressure-scenario.sh --quick --out '%s' 1>&2", bin,
             t_tmp_path("pressure-scenario"));
    int rc = system(cmd);
    if (rc == -1 || !WIFEXITED(rc)) {
        fprintf(stderr, "could not run the scenario script\n");
        return 1;
    }
    int code = WEXITSTATUS(rc);
    if (code == T_EXIT_SKIP) return t_skip("test_pressure_scenario", "the scenario skipped (reason above)");
    CHECK_MSG(code == 0, "scenario exit %d", code);
    return t_done("test_pressure_scenario");
}
