# Runs the same `pipewright simulate` twice and checks that metrics, trace and SVG timeline are
# byte-identical (PW_BIN, PW_WORKDIR, PW_ARGS as in tests/tools/run_cli.cmake).
foreach(run a b)
  execute_process(COMMAND ${PW_BIN} ${PW_ARGS} --metrics ${PW_WORKDIR}/ident_${run}.json
                          --trace ${PW_WORKDIR}/ident_${run}.trace.json
                          --timeline ${PW_WORKDIR}/ident_${run}.svg
    RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET TIMEOUT 120)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "pipewright simulate failed (exit ${rc})")
  endif()
endforeach()
foreach(ext json trace.json svg)
  execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${PW_WORKDIR}/ident_a.${ext}
                          ${PW_WORKDIR}/ident_b.${ext} RESULT_VARIABLE diff)
  if(NOT diff EQUAL 0)
    message(FATAL_ERROR "ident_a.${ext} and ident_b.${ext} differ")
  endif()
endforeach()
