# The layering of src/ and app/ (docs/ARCHITECTURE.md, "Layers"): a folder
# includes only folders below it in MZ_LAYERS, and its own files; folders on
# one line are peers and include none of each other. Includes are followed
# transitively ("../x/y.h" from the file's folder, "x/y.h" from src/, the
# public headers of include/ are open to all), so a header that pulls in a
# higher folder is caught in every file that includes it. Fails naming each
# file and what it reaches; fails too when a known exception below is no
# longer needed, so that list can only shrink.
# Run: cmake -DSRC=<repo root> -P check_layers.cmake

# Lowest first.
set(MZ_LAYERS
  "core"
  "io kernels gguf"
  "tokenizer"
  "model"
  "kv codec sched"
  "mem"
  "profile baseline"
  "engine"
  "store"
  "pressure"
  "grammar"
  "server"
  "harness"
  "app")

# Known violations, as "<including file> -> <reached file>" regular
# expressions. Each names the issue that removes it.
set(MZ_LAYER_EXCEPTIONS)

set(rank 0)
foreach(line ${MZ_LAYERS})
  string(REPLACE " " ";" dirs "${line}")
  foreach(d ${dirs})
    set(RANK_${d} ${rank})
  endforeach()
  math(EXPR rank "${rank} + 1")
endforeach()

function(folder_of path out)
  if(path MATCHES "^app/")
    set(${out} app PARENT_SCOPE)
  elseif(path MATCHES "^src/([^/]+)/")
    set(${out} ${CMAKE_MATCH_1} PARENT_SCOPE)
  else()
    set(${out} "" PARENT_SCOPE)
  endif()
endfunction()

# Direct includes of a file (paths relative to SRC), memoized in DEPS_<id>.
function(direct_includes path out)
  string(MAKE_C_IDENTIFIER "${path}" id)
  if(DEFINED DEPS_${id})
    set(${out} "${DEPS_${id}}" PARENT_SCOPE)
    return()
  endif()
  get_filename_component(dir "${path}" DIRECTORY)
  file(STRINGS "${SRC}/${path}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
  set(found "")
  foreach(l ${lines})
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]+)\".*" "\\1" name "${l}")
    set(hit "")
    foreach(base "${dir}" "src" "include")
      get_filename_component(abs "${SRC}/${base}/${name}" ABSOLUTE)
      if(EXISTS "${abs}" AND NOT IS_DIRECTORY "${abs}")
        file(RELATIVE_PATH hit "${SRC}" "${abs}")
        break()
      endif()
    endforeach()
    if(hit)
      list(APPEND found "${hit}")
    endif()
  endforeach()
  set(DEPS_${id} "${found}" PARENT_SCOPE)
  set(${out} "${found}" PARENT_SCOPE)
endfunction()

file(GLOB_RECURSE all RELATIVE ${SRC} ${SRC}/src/*.c ${SRC}/src/*.h ${SRC}/app/*.c ${SRC}/app/*.h)
list(SORT all)
set(bad "")
set(used_exceptions "")
foreach(f ${all})
  folder_of("${f}" from)
  if(NOT DEFINED RANK_${from})
    string(APPEND bad "  ${f}: folder ${from} has no place in the layer order (add it to MZ_LAYERS and docs/ARCHITECTURE.md)\n")
    continue()
  endif()
  # Everything f reaches, breadth first.
  set(seen "")
  set(queue "${f}")
  while(queue)
    list(POP_FRONT queue cur)
    direct_includes("${cur}" ds)
    foreach(d ${ds})
      list(FIND seen "${d}" at)
      if(at EQUAL -1)
        list(APPEND seen "${d}")
        list(APPEND queue "${d}")
      endif()
    endforeach()
  endwhile()
  foreach(d ${seen})
    folder_of("${d}" to)
    if(to STREQUAL "" OR to STREQUAL from)
      continue()
    endif()
    if(NOT DEFINED RANK_${to})
      continue() # reported as its own file
    endif()
    if(RANK_${to} LESS RANK_${from})
      continue()
    endif()
    set(edge "${f} -> ${d}")
    set(excused FALSE)
    foreach(x ${MZ_LAYER_EXCEPTIONS})
      if(edge MATCHES "${x}")
        set(excused TRUE)
        list(APPEND used_exceptions "${x}")
      endif()
    endforeach()
    if(NOT excused)
      string(APPEND bad "  ${edge} (${from} may not include ${to})\n")
    endif()
  endforeach()
endforeach()

foreach(x ${MZ_LAYER_EXCEPTIONS})
  list(FIND used_exceptions "${x}" at)
  if(at EQUAL -1)
    string(APPEND bad "  known exception no longer needed, remove it: ${x}\n")
  endif()
endforeach()

if(bad)
  message(FATAL_ERROR "layering (docs/ARCHITECTURE.md, \"Layers\"):\n${bad}")
endif()
