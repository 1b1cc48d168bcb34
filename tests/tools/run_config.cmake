# `run --config FILE` (issue 20): the file's keys fill the flags, the command line wins,
# `--dry-run` prints the merged configuration, and bad files exit 2 naming file, line and key.
# One case per PW_MODE (tests/tools/CMakeLists.txt); PW_MODE=setup writes the model the others
# use (a fixture). No case starts a rendezvous: every run is a --dry-run or fails before one.
# Inputs: PW_BIN, PW_WORKDIR, PW_MODE, PW_DOC (docs/executor.md).
set(dir "${PW_WORKDIR}/run_config")
set(model "${dir}/model.json")
set(work "${dir}/${PW_MODE}")

function(pw_run expect)
  execute_process(COMMAND ${PW_BIN} --log-level warn ${ARGN} WORKING_DIRECTORY ${work}
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
  if(NOT "${rc}" STREQUAL "${expect}")
    message(FATAL_ERROR "pipewright ${ARGN}: expected exit ${expect}, got ${rc}\n${out}\n${err}")
  endif()
  set(last_out "${out}" PARENT_SCOPE)
  set(last_output "${out}${err}" PARENT_SCOPE)
endfunction()

# Fails unless the last output matches every regex.
function(pw_expect)
  foreach(regex ${ARGN})
    if(NOT "${last_output}" MATCHES "${regex}")
      message(FATAL_ERROR "output does not match /${regex}/:\n${last_output}")
    endif()
  endforeach()
endfunction()

# `text` as `name` in the case's folder; `expect` is the exit code of run --config name
# --dry-run with the remaining arguments; the output must match `regex`.
function(pw_config_case name text expect regex)
  file(WRITE "${work}/${name}" "${text}")
  pw_run(${expect} run --config ${name} --dry-run ${ARGN})
  pw_expect("${regex}")
  set(last_out "${last_out}" PARENT_SCOPE)
  set(last_output "${last_output}" PARENT_SCOPE)
endfunction()

if(PW_MODE STREQUAL "setup")
  file(REMOVE_RECURSE "${dir}")
  file(MAKE_DIRECTORY "${dir}")
  set(work "${dir}")
  pw_run(0 dataset gpt sonnets --seq 16 --layers 2 --hidden 16 --heads 2 -o "${model}")
  return()
endif()

file(REMOVE_RECURSE "${work}")
file(MAKE_DIRECTORY "${work}")

set(job "[job]
model = \"${model}\"
schedule = \"GPipe\"

[parallelism]
pp = 2
microbatches = 4

[training]
batch_size = 8
steps = 3
dataset = \"sonnets\"
loss = \"cross-entropy\"
shuffle = false

[optimizer]
name = \"adam\"
lr = 0.003

[data_parallel]
ddp_overlap = false

[comm]
timeout = 12.5

[metrics]
log_every = 5
")

if(PW_MODE STREQUAL "merged")
  # Every key of the file shows in the merged configuration and in the resolved job.
  pw_config_case(job.toml "${job}" 0
    "\\[job\\].*schedule = \"GPipe\".*\\[parallelism\\].pp = 2.dp = 1.stages_per_rank = 1.microbatches = 4.*batch_size = 8.steps = 3.loss = \"cross-entropy\".*dataset = \"sonnets\".shuffle = false.*\\[optimizer\\].name = \"adam\".lr = 0.003.*ddp_overlap = false.*timeout = 12.5.*log_every = 5.*ranks: pp 2 x dp 1 = 2, 2 stages \\(1 per rank\\), 4 microbatches, batch 8.*validated, no deadlock"
    --plan-out job.json)
  file(READ "${work}/job.json" resolved)
  if(NOT resolved MATCHES "\"schedule\": \"GPipe\"" OR NOT resolved MATCHES "\"pp\": 2"
     OR NOT resolved MATCHES "\"microbatches\": 4" OR NOT resolved MATCHES "\"optimizer\": \"adam\"")
    message(FATAL_ERROR "--plan-out does not hold the file's job:\n${resolved}")
  endif()

elseif(PW_MODE STREQUAL "override")
  # Flags on the command line win over the file, under any of their names (-p is --pp); a switch
  # the file turned off comes back with --no-shuffle=false.
  pw_config_case(job.toml "${job}" 0
    "schedule = \"1F1B\".*pp = 1.dp = 1.stages_per_rank = 1.microbatches = 2.*batch_size = 8.*shuffle = true.*name = \"adam\".lr = 0.5.*ranks: pp 1 x dp 1 = 1, 1 stages \\(1 per rank\\), 2 microbatches, batch 8"
    -p 1 --microbatches 2 --schedule 1F1B --lr 0.5 --no-shuffle=false)

elseif(PW_MODE STREQUAL "round_trip")
  # Every flag is settable: the printed configuration (every key) read back prints the same.
  pw_config_case(job.toml "${job}" 0 "validated, no deadlock")
  string(FIND "${last_out}" "dry run:" end)
  string(SUBSTRING "${last_out}" 0 ${end} printed)
  file(WRITE "${work}/printed.toml" "${printed}")
  pw_run(0 run --config printed.toml --dry-run)
  string(FIND "${last_out}" "dry run:" end)
  string(SUBSTRING "${last_out}" 0 ${end} printed2)
  if(NOT printed2 STREQUAL printed)
    message(FATAL_ERROR "the printed configuration reads back differently:\n${printed}\n---\n${printed2}")
  endif()
  # The keys also work at the top level under their long flag names (the earlier form).
  pw_config_case(flags.toml "model = \"${model}\"
pp = 2
microbatches = 4
batch-size = 8
dataset = \"sonnets\"
loss = \"cross-entropy\"
no_shuffle = true
" 0 "pp = 2.*microbatches = 4.*batch_size = 8.*shuffle = false.*validated, no deadlock")

elseif(PW_MODE STREQUAL "json")
  # JSON: the earlier top-level form and the sections.
  pw_config_case(flags.json "{\"model\": \"${model}\", \"pp\": 2, \"microbatches\": 4,
 \"batch-size\": 8, \"dataset\": \"sonnets\", \"loss\": \"cross-entropy\", \"no_shuffle\": true}"
    0 "pp = 2.*microbatches = 4.*batch_size = 8.*shuffle = false.*validated, no deadlock")
  pw_config_case(sections.json "{\"job\": {\"model\": \"${model}\"},
 \"parallelism\": {\"pp\": 2, \"microbatches\": 4},
 \"training\": {\"batch_size\": 8, \"dataset\": \"sonnets\", \"loss\": \"cross-entropy\"}}"
    0 "pp = 2.*microbatches = 4.*batch_size = 8.*validated, no deadlock" --steps 2)
  pw_config_case(wrong.json "{\"parallelism\": {
  \"pp\": \"2\"}}" 2
    "wrong.json:2:9: at /parallelism/pp: expected an integer, got a string")
  pw_config_case(unknown.json "{\"training\": {\"stepz\": 3}}" 2
    "unknown.json:1:[0-9]+: at /training/stepz: unknown key 'stepz' in \\[training\\]")

elseif(PW_MODE STREQUAL "unknown_key")
  pw_config_case(unknown.toml "[training]\nsteps = 3\nstepz = 3\n" 2
    "unknown.toml:3:1: training.stepz: unknown key 'stepz' in \\[training\\]; keys: batch_size, steps")
  pw_config_case(unknown_flag.toml "stepz = 3\n" 2
    "unknown_flag.toml:1:1: stepz: unknown key 'stepz'")
  pw_config_case(config.toml "config = \"other.toml\"\n" 2
    "config.toml:1:1: config: unknown key 'config'")
  pw_config_case(section.toml "[jobs]\nmodel = \"m.json\"\n" 2
    "section.toml:1:2: jobs: unknown section \\[jobs\\]; sections: \\[job\\], \\[parallelism\\]")

elseif(PW_MODE STREQUAL "wrong_type")
  pw_config_case(string.toml "[parallelism]\npp = \"2\"\n" 2
    "string.toml:2:1: parallelism.pp: expected an integer, got a string")
  pw_config_case(float.toml "[parallelism]\n\nmicrobatches = 2.0\n" 2
    "float.toml:3:1: parallelism.microbatches: expected an integer, got a floating-point number")
  pw_config_case(table.toml "[training]\nsteps = { n = 3 }\n" 2
    "table.toml:2:1: training.steps: expected an integer, got a table")
  pw_config_case(bool.toml "[training]\nshuffle = \"no\"\n" 2
    "bool.toml:2:1: training.shuffle: expected a boolean \\(true or false\\), got a string")
  pw_config_case(section.toml "job = 3\n" 2
    "section.toml:1:1: job: expected a table \\(the \\[job\\] section\\), got an integer")
  # A value of the right type that the flag rejects: the flag's own message, at the key.
  pw_config_case(value.toml "[job]\nschedule = \"Foo\"\n" 2
    "value.toml:2:1: job.schedule: unknown schedule 'Foo'")
  pw_config_case(twice.toml "save = \"a.safetensors\"\noutput = \"b.safetensors\"\n" 2
    "twice.toml:[12]:1: (save|output): set twice \\(also at twice.toml:[12]:1: (save|output)\\)")
  pw_config_case(invalid.toml "[parallelism]\npp = = 2\n" 2 "invalid.toml:2:[0-9]+: invalid TOML")

elseif(PW_MODE STREQUAL "missing_file")
  pw_run(2 run --config no/such/job.toml --dry-run)
  pw_expect("no/such/job.toml: cannot open the config file")

elseif(PW_MODE STREQUAL "docs_example")
  # The full example file in docs/executor.md ("Config files") is valid and sets every key.
  file(READ "${PW_DOC}" doc)
  string(FIND "${doc}" "```toml\n" start)
  if(start LESS 0)
    message(FATAL_ERROR "${PW_DOC} has no ```toml example")
  endif()
  math(EXPR start "${start} + 8")
  string(SUBSTRING "${doc}" ${start} -1 example)
  string(FIND "${example}" "```" end)
  string(SUBSTRING "${example}" 0 ${end} example)
  pw_config_case(example.toml "${example}" 0
    "schedule = \"1F1B\".*pp = 2.*microbatches = 4.*batch_size = 16.*steps = 100.*name = \"adamw\".lr = 0.003.*validated, no deadlock"
    --model "${model}")

elseif(PW_MODE STREQUAL "no_toml")
  # A build without toml++ reads JSON only and says so for a TOML file.
  pw_config_case(job.toml "${job}" 2 "job.toml: TOML config files need toml\\+\\+")

else()
  message(FATAL_ERROR "unknown PW_MODE '${PW_MODE}'")
endif()
