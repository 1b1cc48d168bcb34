# Issue 20: `-o LINK` writes through the symlink to its target (the link stays a link), and
# `-o DIR` fails with exit 2 naming the folder instead of replacing it.
set(work "${PW_WORKDIR}/output_symlink")
file(REMOVE_RECURSE "${work}")
file(MAKE_DIRECTORY "${work}/out")
file(WRITE "${work}/out/schedule.csv" "old contents\n")
file(CREATE_LINK "out/schedule.csv" "${work}/LINK" SYMBOLIC)

execute_process(COMMAND ${PW_BIN} schedule 1F1B --pp 2 --microbatches 2 -o LINK
  WORKING_DIRECTORY "${work}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "schedule -o LINK: exit ${rc}\n${out}${err}")
endif()
if(NOT IS_SYMLINK "${work}/LINK")
  message(FATAL_ERROR "LINK is no longer a symlink")
endif()
file(READ "${work}/out/schedule.csv" target)
if(target MATCHES "old contents" OR NOT target MATCHES "0F0")
  message(FATAL_ERROR "the link's target was not rewritten with the schedule:\n${target}")
endif()
file(GLOB left "${work}/*" "${work}/out/*")
list(LENGTH left n)
if(NOT n EQUAL 3)
  message(FATAL_ERROR "unexpected files left behind: ${left}")
endif()

execute_process(COMMAND ${PW_BIN} schedule 1F1B --pp 2 --microbatches 2 -o out
  WORKING_DIRECTORY "${work}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 2 OR NOT "${out}${err}" MATCHES "'out': it is a directory")
  message(FATAL_ERROR "schedule -o DIR: exit ${rc}\n${out}${err}")
endif()
if(NOT IS_DIRECTORY "${work}/out")
  message(FATAL_ERROR "the folder was replaced")
endif()
