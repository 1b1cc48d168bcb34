# One job, one plan (issue 19): for the same job flags, `run --dry-run --plan-out A` and
# `simulate --plan-out B` write the same bytes, for GPipe, 1F1B, Interleaved1F1B and
# InterleavedZeroBubble at pp 2-4 with dp 2 under ddp and slowmo. The dry run starts no
# rendezvous (no master address or port is given).
set(work "${PW_WORKDIR}/plan_out")
file(REMOVE_RECURSE "${work}")
file(MAKE_DIRECTORY "${work}")
execute_process(COMMAND ${PW_BIN} --log-level warn dataset gpt sonnets --seq 16 --layers 8
                        --hidden 16 --heads 2 -o "${work}/model.json"
  RESULT_VARIABLE rc ERROR_VARIABLE err TIMEOUT 60)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "dataset gpt failed: ${err}")
endif()
set(cases 0)
foreach(schedule GPipe 1F1B Interleaved1F1B InterleavedZeroBubble)
  set(v 1)
  if(schedule MATCHES "^Interleaved")
    set(v 2)
  endif()
  foreach(pp 2 3 4)
    math(EXPR m "2 * ${pp}")
    math(EXPR batch "2 * ${m}")
    foreach(algo ddp slowmo)
      set(job --model "${work}/model.json" --schedule ${schedule} --pp ${pp} --dp 2
              --stages-per-rank ${v} --microbatches ${m} --batch-size ${batch} --steps 3
              --dp-algorithm ${algo})
      set(a "${work}/${schedule}_${pp}_${algo}.run.json")
      set(b "${work}/${schedule}_${pp}_${algo}.sim.json")
      execute_process(COMMAND ${PW_BIN} --log-level warn run ${job} --dataset sonnets --loss cross-entropy --dry-run
                              --plan-out "${a}"
        RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
      if(NOT rc EQUAL 0 OR NOT out MATCHES "validated, no deadlock")
        message(FATAL_ERROR "run --dry-run ${job}: exit ${rc}\n${out}${err}")
      endif()
      execute_process(COMMAND ${PW_BIN} --log-level warn simulate ${job} --plan-out "${b}"
        RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
      if(NOT rc EQUAL 0)
        message(FATAL_ERROR "simulate ${job}: exit ${rc}\n${out}${err}")
      endif()
      execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files "${a}" "${b}" RESULT_VARIABLE same)
      if(NOT same EQUAL 0)
        message(FATAL_ERROR "${a} and ${b} differ")
      endif()
      file(READ "${a}" text)
      if(NOT text MATCHES "\"dp_algorithm\": \"${algo}\"" OR NOT text MATCHES "OPTIM")
        message(FATAL_ERROR "${a} lacks the job or the lowered plan:\n${text}")
      endif()
      math(EXPR cases "${cases} + 1")
    endforeach()
  endforeach()
endforeach()
message("${cases} jobs: run --dry-run and simulate wrote identical --plan-out files")
