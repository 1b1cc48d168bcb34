# Shows that src_folders.cmake can fail: it runs the checker on small trees written here, some
# correct and several broken (an upward include, a folder missing from the list, a source file
# outside the folders, a list naming a folder that does not exist, no list at all, a folder
# listed twice, an architecture page drawing another order, a folder with too many files), and expects it to pass on the
# correct ones and to fail, naming the problem, on each of the others.
#   cmake -DCHECKER=src_folders.cmake -DWORK=<scratch dir> -P src_folders_selftest.cmake
cmake_minimum_required(VERSION 3.22)
file(REMOVE_RECURSE "${WORK}")

set(readme_low_high "# test\n\n1. **`low/`**: the bottom.\n\n2. **`high/`**: uses low/.\n")

# write_tree(NAME README_TEXT path=text ...): a tree under ${WORK}/NAME.
function(write_tree name readme)
  file(WRITE "${WORK}/${name}/README.md" "${readme}")
  foreach(entry IN LISTS ARGN)
    string(REGEX REPLACE "=.*" "" path "${entry}")
    string(REGEX REPLACE "^[^=]*=" "" text "${entry}")
    file(WRITE "${WORK}/${name}/${path}" "${text}\n")
  endforeach()
endfunction()

# expect(NAME PASS|FAIL [REGEX]): runs the checker on ${WORK}/NAME (with its arch.md, if any).
set(cases 0)
function(expect name outcome)
  set(doc "")
  if(EXISTS "${WORK}/${name}/arch.md")
    set(doc "-DDOC=${WORK}/${name}/arch.md")
  endif()
  execute_process(COMMAND ${CMAKE_COMMAND} -DREADME=${WORK}/${name}/README.md
                          -DSRC=${WORK}/${name} -DMODULE=exec -DMAX_FILES=3 ${doc} -P ${CHECKER}
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(outcome STREQUAL "PASS" AND NOT rc EQUAL 0)
    message(FATAL_ERROR "${name}: the checker failed on a correct tree:\n${out}${err}")
  endif()
  if(outcome STREQUAL "FAIL")
    if(rc EQUAL 0)
      message(FATAL_ERROR "${name}: the checker passed a broken tree:\n${out}${err}")
    endif()
    # CMake wraps messages at a width, where depends on the path: match with spaces joined.
    string(REGEX REPLACE "[ \n]+" " " flat "${err}")
    if(ARGC GREATER 2 AND NOT flat MATCHES "${ARGV2}")
      message(FATAL_ERROR "${name}: the checker failed without saying '${ARGV2}':\n${err}")
    endif()
  endif()
  math(EXPR n "${cases} + 1")
  set(cases ${n} PARENT_SCOPE)
endfunction()

write_tree(ok "${readme_low_high}"
  "low/l.hpp=#pragma once"
  "low/l.cpp=#include \"low/l.hpp\""
  "high/h.cpp=#include \"low/l.hpp\"\n#include \"pipewright/exec/run.hpp\"\n#include <vector>")
expect(ok PASS)

write_tree(upward "${readme_low_high}"
  "low/l.cpp=// a lower folder reaching up\n#include \"high/h.hpp\""
  "high/h.hpp=#pragma once")
expect(upward FAIL "low/l.cpp:2: low/ includes high/, which comes after it")

write_tree(upward_indented "${readme_low_high}"
  "low/l.cpp=#if X\n#  include \"high/h.hpp\"\n#endif"
  "high/h.hpp=#pragma once")
expect(upward_indented FAIL "low/l.cpp:2: low/ includes high/")

write_tree(unlisted "${readme_low_high}"
  "low/l.hpp=#pragma once"
  "high/h.cpp=#include \"low/l.hpp\""
  "extra/e.cpp=#include \"high/h.hpp\"")
expect(unlisted FAIL "extra/: a folder that .* does not list")

write_tree(stray "${readme_low_high}"
  "low/l.hpp=#pragma once"
  "high/h.cpp=#include \"low/l.hpp\""
  "loose.cpp=#include \"high/h.hpp\"")
expect(stray FAIL "loose.cpp: a source file outside the folders")

write_tree(missing "${readme_low_high}3. **`gone/`**: listed, never made.\n"
  "low/l.hpp=#pragma once"
  "high/h.cpp=#include \"low/l.hpp\"")
expect(missing FAIL "lists 'gone/', which is not a folder")

write_tree(no_list "# no numbered list here\n" "low/l.hpp=#pragma once")
expect(no_list FAIL "no folder list found")

write_tree(twice "${readme_low_high}3. **`low/`**: again.\n" "low/l.hpp=#pragma once"
  "high/h.cpp=")
expect(twice FAIL "'low/' is listed twice")

write_tree(drawn "${readme_low_high}"
  "low/l.hpp=#pragma once"
  "high/h.cpp=#include \"low/l.hpp\""
  "arch.md=```\nexec/src/low/   the bottom\nexec/src/high/  uses low\n```")
expect(drawn PASS)

write_tree(drawn_stale "${readme_low_high}"
  "low/l.hpp=#pragma once"
  "high/h.cpp=#include \"low/l.hpp\""
  "arch.md=```\nexec/src/high/  drawn first\nexec/src/low/   the bottom\n```")
expect(drawn_stale FAIL "its exec/src/ tree reads high < low")

write_tree(crowded "${readme_low_high}"
  "low/a.hpp=#pragma once" "low/a.cpp=" "low/b.cpp=" "low/c.cpp="
  "high/h.cpp=#include \"low/a.hpp\"")
expect(crowded FAIL "low/: 4 source files, over 3")

write_tree(full "${readme_low_high}"
  "low/a.hpp=#pragma once" "low/a.cpp=" "low/b.cpp="
  "high/h.cpp=#include \"low/a.hpp\"")
expect(full PASS)

file(REMOVE_RECURSE "${WORK}")
message("src_folders.cmake: ${cases} trees, each judged as expected")
