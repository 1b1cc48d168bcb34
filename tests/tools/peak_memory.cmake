# One memory model, one number (issue 34): for the same job, `run --dry-run` and `simulate
# --model` print the same peak memory for every pipeline rank (both from sched::peak_memory,
# Note [Memory model] in sched/memory.hpp). The grid: GPipe, 1F1B, Interleaved1F1B and
# InterleavedZeroBubble at pp 2 and 4 on examples/gpt-small.json, with SGD, with Adam, full
# activation recompute and dp 2, and with AdamW in bf16 (issue 33, Note [Precision bytes]); and the job of the issue (1F1B p=4 m=8 b=16: rank 0 10.9 GiB,
# where the dry run used to say 11.2 GiB).
set(model "${PW_EXAMPLES}/gpt-small.json")

# peak_lines(TEXT OUT): "0=10.9 GiB;1=8.1 GiB;..." from the "  rank R: ..., peak memory X" lines.
function(peak_lines text out)
  string(REGEX MATCHALL "rank [0-9]+: [^\n]*peak memory [0-9.]+ [KMGT]?i?B" lines "${text}")
  set(pairs "")
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "^rank ([0-9]+): .*peak memory (.*)$" "\\1=\\2" pair "${line}")
    list(APPEND pairs "${pair}")
  endforeach()
  set(${out} "${pairs}" PARENT_SCOPE)
endfunction()

set(cases 0)
foreach(schedule GPipe 1F1B Interleaved1F1B InterleavedZeroBubble)
  set(v 1)
  if(schedule MATCHES "^Interleaved")
    set(v 2)
  endif()
  foreach(pp 2 4)
    foreach(variant "--optimizer;sgd" "--optimizer;adam;--recompute;full;--dp;2"
                    "--optimizer;adamw;--precision;bf16;--dp;2")
      set(job --model "${model}" --schedule ${schedule} --pp ${pp} --stages-per-rank ${v}
              --microbatches 8 --batch-size 16 ${variant})
      execute_process(COMMAND ${PW_BIN} --log-level warn run ${job} --dataset sonnets
                              --loss cross-entropy --dry-run
        RESULT_VARIABLE rc OUTPUT_VARIABLE dry ERROR_VARIABLE err TIMEOUT 120)
      if(NOT rc EQUAL 0)
        message(FATAL_ERROR "run --dry-run ${job}: exit ${rc}\n${dry}${err}")
      endif()
      execute_process(COMMAND ${PW_BIN} --log-level warn simulate ${job}
        RESULT_VARIABLE rc OUTPUT_VARIABLE sim ERROR_VARIABLE err TIMEOUT 60)
      if(NOT rc EQUAL 0)
        message(FATAL_ERROR "simulate ${job}: exit ${rc}\n${sim}${err}")
      endif()
      peak_lines("${dry}" a)
      peak_lines("${sim}" b)
      list(LENGTH a n)
      if(NOT n EQUAL pp OR NOT a STREQUAL b)
        message(FATAL_ERROR "${job}: per-rank peak memory differs (or is missing):\n"
                            "  run --dry-run: ${a}\n  simulate:      ${b}\n${dry}\n${sim}")
      endif()
      if(schedule STREQUAL "1F1B" AND pp EQUAL 4 AND variant STREQUAL "--optimizer;sgd" AND
         NOT a MATCHES "^0=10\\.9 GiB;")
        message(FATAL_ERROR "1F1B p=4 m=8 b=16: rank 0 should peak at 10.9 GiB, got ${a}")
      endif()
      math(EXPR cases "${cases} + 1")
    endforeach()
  endforeach()
endforeach()
message("${cases} jobs: run --dry-run and simulate printed the same peak memory per rank")
