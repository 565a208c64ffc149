# check_includes.cmake — the include wall by path: asks the compiler which
# files each source really includes (-MM -MG: user headers, transitively,
# with the target's own include dirs, definitions and options) and fails if
# any lies inside the repo but outside the allowed folders. The cli_wall
# probes prove a layer header is not *found* by name; this catches the other
# road in, `#include "../cache/okv_cache.h"`, which the compiler resolves
# against the including file's folder whatever -I says.
#   cmake -DCC=<compiler> -DROOT=<repo> -DBIN=<build dir> -DALLOW="include|src/cli"
#         -DSOURCES="a.c|b.c" -DINCS=<dirs> -DDEFS=<defs> -DOPTS=<options>
#         -DCFLAGS=<CMAKE_C_FLAGS> [-DSTAMP=<file touched on success>] -P check_includes.cmake
# Lists are "|"-separated (";" would split them on the way through CMake).
# Allowed: files outside ROOT (system, pkg-config), under BIN (generated),
# and under ROOT/<each of ALLOW>.
cmake_minimum_required(VERSION 3.20)
foreach(v ALLOW SOURCES INCS DEFS OPTS)
  string(REPLACE "|" ";" ${v} "${${v}}")
  list(REMOVE_ITEM ${v} "")
endforeach()
separate_arguments(cflags NATIVE_COMMAND "${CFLAGS}")
set(flags ${cflags})
foreach(d IN LISTS INCS)
  list(APPEND flags "-I${d}")
endforeach()
foreach(d IN LISTS DEFS)
  list(APPEND flags "-D${d}")
endforeach()
list(APPEND flags ${OPTS})
file(REAL_PATH "${ROOT}" root)
file(REAL_PATH "${BIN}" bin)
set(bad "")
foreach(src IN LISTS SOURCES)
  get_filename_component(src_dir "${src}" DIRECTORY)
  execute_process(COMMAND ${CC} ${flags} -MM -MG "${src}" WORKING_DIRECTORY "${src_dir}"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE deps ERROR_VARIABLE errs)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "check_includes: ${CC} -MM failed on ${src}:\n${errs}")
  endif()
  string(REPLACE "\\\n" " " deps "${deps}")
  string(REGEX REPLACE "^[^:]*:" "" deps "${deps}") # drop the "x.o:" target
  string(REGEX REPLACE "[ \t\r\n]+" ";" deps "${deps}")
  file(REAL_PATH "${src}" src_real)
  foreach(dep IN LISTS deps)
    if(dep STREQUAL "")
      continue()
    endif()
    get_filename_component(dep_abs "${dep}" ABSOLUTE BASE_DIR "${src_dir}")
    if(NOT EXISTS "${dep_abs}") # -MG: a header not found; the compile reports it
      continue()
    endif()
    file(REAL_PATH "${dep_abs}" real)
    if(real STREQUAL src_real) # -MM lists the source itself first
      continue()
    endif()
    string(FIND "${real}/" "${root}/" in_root)
    string(FIND "${real}/" "${bin}/" in_bin)
    if(NOT in_root EQUAL 0 OR in_bin EQUAL 0)
      continue()
    endif()
    set(ok FALSE)
    foreach(a IN LISTS ALLOW)
      string(FIND "${real}" "${root}/${a}/" in_a)
      if(in_a EQUAL 0)
        set(ok TRUE)
      endif()
    endforeach()
    if(NOT ok)
      file(RELATIVE_PATH rel_src "${root}" "${src}")
      file(RELATIVE_PATH rel_dep "${root}" "${real}")
      list(APPEND bad "${rel_src} includes ${rel_dep}")
    endif()
  endforeach()
endforeach()
if(bad)
  list(REMOVE_DUPLICATES bad)
  string(REPLACE ";" "\n  " bad "${bad}")
  string(REPLACE ";" ", " allow "${ALLOW}")
  message(FATAL_ERROR "include wall: only ${allow} and system headers may be included here:\n  ${bad}")
endif()
list(LENGTH SOURCES n)
string(REPLACE ";" ", " allow "${ALLOW}")
message(STATUS "include wall: ${n} sources include only ${allow} and system headers")
if(STAMP)
  file(TOUCH "${STAMP}")
endif()
