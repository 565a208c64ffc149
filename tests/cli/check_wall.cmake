# check_wall.cmake — the ctest cli_wall: builds every probe target named in
# PROBES ("target=header;..."), compiled with the CLI's flags, in one build
# of ALL_PROBES (a target depending on them all) that keeps going past
# failures, and requires each header to be reported
# as not found; then builds PUBLIC_PROBE (a public header), which must
# compile. A probe that compiled leaves its object file, so it is named too.
#   cmake -DBIN=<build dir> -DGEN=<generator> -DPROBES=... -DALL_PROBES=<target> -DPUBLIC_PROBE=<target> -P check_wall.cmake
if(GEN MATCHES "Ninja")
  set(keep_going -k 0)
else()
  set(keep_going -k)
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BIN} --target ${ALL_PROBES} -- ${keep_going}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
set(open "")
foreach(p IN LISTS PROBES)
  string(REPLACE "=" ";" pair "${p}")
  list(GET pair 1 header)
  string(REPLACE "." "\\." header_re "${header}")
  if(NOT out MATCHES "${header_re}'?:? (No such file|file not found)")
    list(APPEND open "${header}")
  endif()
endforeach()
if(open)
  string(REPLACE ";" "\n  " open "${open}")
  message(FATAL_ERROR "a CLI source compiles (or fails otherwise) with these internal headers:\n  ${open}\n${out}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BIN} --target ${PUBLIC_PROBE}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the public probe ${PUBLIC_PROBE} does not compile with the CLI's flags:\n${out}")
endif()
list(LENGTH PROBES n)
message(STATUS "cli_wall: ${n} internal headers refused, the public one compiles")
