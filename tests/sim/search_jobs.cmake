# Runs `pipewright search PW_ARGS` (a ;-list; @DATA@ and @EXAMPLES@ substituted) with --jobs 1 and
# --jobs 4, as JSON and as the text table with --explain, and fails unless each pair is byte for
# byte the same (Note [Parallel search]: the output does not depend on the thread count).
string(REPLACE "@DATA@" "${PW_DATA}" args "${PW_ARGS}")
string(REPLACE "@EXAMPLES@" "${PW_EXAMPLES}" args "${args}")
foreach(form "--format;json" "--explain;--pareto")
  string(REPLACE ";" " " shown "${form}")
  foreach(jobs 1 4)
    execute_process(COMMAND ${PW_BIN} search ${args} ${form} --no-progress --jobs ${jobs}
      WORKING_DIRECTORY ${PW_WORKDIR}
      RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 300)
    if(NOT "${rc}" STREQUAL "0")
      message(FATAL_ERROR "search ${shown} --jobs ${jobs}: exit ${rc}\n${out}\n${err}")
    endif()
    if(NOT "${out}" MATCHES "simulated")
      message(FATAL_ERROR "search ${shown} --jobs ${jobs}: no counts in\n${out}")
    endif()
    set(out_${jobs} "${out}")  # not a list: the output has semicolons
  endforeach()
  set(serial "${out_1}")
  set(parallel "${out_4}")
  if(NOT "${serial}" STREQUAL "${parallel}")
    file(WRITE ${PW_WORKDIR}/search_jobs_1.out "${serial}")
    file(WRITE ${PW_WORKDIR}/search_jobs_4.out "${parallel}")
    message(FATAL_ERROR "search ${shown}: --jobs 1 and --jobs 4 differ (see "
                        "${PW_WORKDIR}/search_jobs_{1,4}.out)")
  endif()
  string(LENGTH "${serial}" n)
  message("search ${shown}: --jobs 1 and --jobs 4 the same (${n} bytes)")
endforeach()
