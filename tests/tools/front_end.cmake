# The `pipewright` front end (docs/architecture.md, "Two binaries, one command"):
# - it links none of libtorch, MPI, Gloo, NCCL or CUDA (ldd lists every library it loads);
# - its --help lists the executor's subcommands;
# - `pipewright run --help` reaches pipewright-exec (with PW_EXEC=ON) or says the build has no
#   executor (exit 2);
# - a PIPEWRIGHT_EXEC_BINARY that is not an executable is named (exit 2).
function(expect_run rc_want regex)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
    TIMEOUT 60)
  message("$ ${ARGN}\nexit=${rc}\n${out}${err}")
  if(NOT "${rc}" STREQUAL "${rc_want}")
    message(FATAL_ERROR "expected exit ${rc_want}, got ${rc}")
  endif()
  if(NOT "${out}${err}" MATCHES "${regex}")
    message(FATAL_ERROR "output does not match /${regex}/")
  endif()
endfunction()

execute_process(COMMAND ldd ${PW_BIN} RESULT_VARIABLE rc OUTPUT_VARIABLE libs)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "ldd ${PW_BIN} failed")
endif()
message("ldd ${PW_BIN}:\n${libs}")
foreach(heavy libtorch libc10 libmpi libopen-pal libgloo libnccl libcuda libcudart libcublas)
  if(libs MATCHES "${heavy}")
    message(FATAL_ERROR "the front end loads ${heavy}; offline subcommands must not")
  endif()
endforeach()

expect_run(0 "run +Train a model.*calibrate +Measure.*dataset +The bundled" ${PW_BIN} --help)
if(PW_EXEC)
  expect_run(0 "Usage: pipewright run \\[OPTIONS\\].*--model" ${PW_BIN} run --help)
  expect_run(0 "Usage: pipewright dataset" ${PW_BIN} --log-level warn dataset --help)
  expect_run(2 "PIPEWRIGHT_EXEC_BINARY='/nonexistent/pipewright-exec' is not an executable"
    ${CMAKE_COMMAND} -E env PIPEWRIGHT_EXEC_BINARY=/nonexistent/pipewright-exec
    ${PW_BIN} run --help)
else()
  expect_run(2 "'run' needs the executor.*PIPEWRIGHT_WITH_EXEC=OFF" ${PW_BIN} run --help)
endif()
