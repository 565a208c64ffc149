# check_labels.cmake — the ctest ctest_labels: asks ctest which tests carry
# none of the labels unit, e2e, slow and fails naming them.
#   cmake -DBIN=<build dir> -DCTEST=<ctest> -P check_labels.cmake
execute_process(COMMAND ${CTEST} -N -LE "^(unit|e2e|slow)$" WORKING_DIRECTORY ${BIN}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0 OR NOT out MATCHES "Total Tests: 0")
  message(FATAL_ERROR "tests without a unit/e2e/slow label (ctest -N -LE):\n${out}")
endif()
execute_process(COMMAND ${CTEST} -N WORKING_DIRECTORY ${BIN} OUTPUT_VARIABLE all)
string(REGEX MATCH "Total Tests: [0-9]+" n "${all}")
message(STATUS "every test labelled (${n})")
