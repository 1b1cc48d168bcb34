# Runs the pipewright CLI with PW_ARGS (a ;-list; @DATA@ and @EXAMPLES@ and @WORK@ are
# substituted), checks the exit code equals PW_EXPECT and stdout+stderr match PW_REGEX.
string(REPLACE "@DATA@" "${PW_DATA}" args "${PW_ARGS}")
string(REPLACE "@EXAMPLES@" "${PW_EXAMPLES}" args "${args}")
string(REPLACE "@WORK@" "${PW_WORKDIR}" args "${args}")
execute_process(COMMAND ${PW_BIN} ${args}
  WORKING_DIRECTORY ${PW_WORKDIR}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
message("exit=${rc}\n--- stdout\n${out}\n--- stderr\n${err}")
if(NOT "${rc}" STREQUAL "${PW_EXPECT}")
  message(FATAL_ERROR "expected exit ${PW_EXPECT}, got ${rc}")
endif()
if(NOT "${out}${err}" MATCHES "${PW_REGEX}")
  message(FATAL_ERROR "output does not match /${PW_REGEX}/")
endif()
