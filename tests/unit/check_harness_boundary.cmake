# Programs in app/ and bench/ reach the engine through include/mzcache.h
# (and mzcache_experimental.h) or through the one not-public harness header,
# src/harness/harness.h; never through the headers that define struct mz_ctx,
# the KV cache or the memory manager. Fails naming each offending include.
# Run: cmake -DSRC=<repo root> -P check_harness_boundary.cmake
file(GLOB_RECURSE progs ${SRC}/app/*.c ${SRC}/app/*.h ${SRC}/bench/*.c ${SRC}/bench/*.h)
set(bad "")
foreach(f ${progs})
  file(STRINGS ${f} lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
  foreach(l ${lines})
    if(l MATCHES "(engine/engine\\.h|kv/kv_cache\\.h|harness/kv_fill\\.h|mem/manager[a-z_]*\\.h|mem/unit\\.h|mem/weights\\.h|baseline/baseline\\.h)")
      string(APPEND bad "  ${f}: ${l}\n")
    endif()
  endforeach()
endforeach()
if(bad)
  message(FATAL_ERROR "engine internals included outside the harness header (use src/harness/harness.h):\n${bad}")
endif()
