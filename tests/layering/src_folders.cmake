# The folder order inside a module's src/ (exec/: issue 34; sched/ and sim/: issue 42): a folder
# includes private headers only from itself and from the folders listed before it in the
# module's src/README.md ("The folders, bottom up").
#   cmake -DREADME=exec/src/README.md -DSRC=exec/src [-DMODULE=exec] [-DMAX_FILES=16]
#         -P src_folders.cmake
# MODULE (default: the name of SRC's parent folder) names the tree lines of -DDOC below.
# The README's numbered list is the one statement of the order; this script fails
#   - when the list is missing or names a folder twice or a folder that does not exist,
#   - when exec/src/ has a folder the list does not name, or a source file outside any folder
#     (either would skip the check),
#   - on every #include "F/..." of a folder F listed after the including file's folder;
#   - with -DDOC=docs/architecture.md, when that page's tree (lines "<MODULE>/src/F/ ...") does
#     not name the same folders in the same order;
#   - with -DMAX_FILES=N, when a folder holds more than N source files (split it by concept).
# All violations are reported, one per line, with file and line number.
cmake_minimum_required(VERSION 3.22)
foreach(var README SRC)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "src_folders.cmake: -D${var}=... is required")
  endif()
endforeach()
get_filename_component(README "${README}" ABSOLUTE)
get_filename_component(SRC "${SRC}" ABSOLUTE)
if(NOT DEFINED MODULE)
  get_filename_component(parent "${SRC}" DIRECTORY)
  get_filename_component(MODULE "${parent}" NAME)
endif()
if(NOT EXISTS "${README}")
  message(FATAL_ERROR "${README}: no such file (it holds the folder order of ${SRC})")
endif()

# "1. **`report/`**: ..." -> report, in file order.
file(STRINGS "${README}" items REGEX "^[0-9]+\\. \\*\\*`[A-Za-z0-9_]+/`\\*\\*")
set(order "")
foreach(item IN LISTS items)
  string(REGEX REPLACE "^[0-9]+\\. \\*\\*`([A-Za-z0-9_]+)/`.*" "\\1" folder "${item}")
  if(folder IN_LIST order)
    message(FATAL_ERROR "${README}: folder '${folder}/' is listed twice")
  endif()
  list(APPEND order "${folder}")
endforeach()
list(LENGTH order levels)
if(levels EQUAL 0)
  message(FATAL_ERROR "${README}: no folder list found (numbered items such as "
                      "\"1. **`report/`**: ...\", bottom up)")
endif()

set(problems "")
foreach(folder IN LISTS order)
  if(NOT IS_DIRECTORY "${SRC}/${folder}")
    string(APPEND problems "${README}: lists '${folder}/', which is not a folder of ${SRC}\n")
  endif()
endforeach()
file(GLOB entries RELATIVE "${SRC}" "${SRC}/*")
foreach(entry IN LISTS entries)
  if(IS_DIRECTORY "${SRC}/${entry}")
    if(NOT entry IN_LIST order)
      string(APPEND problems "${SRC}/${entry}/: a folder that ${README} does not list "
                             "(add it to the list, in dependency order)\n")
    endif()
  elseif(entry MATCHES "\\.(cpp|hpp|h|cc)$")
    string(APPEND problems "${SRC}/${entry}: a source file outside the folders of ${README}\n")
  endif()
endforeach()

set(files 0)
set(edges 0)
foreach(folder IN LISTS order)
  list(FIND order "${folder}" level)
  file(GLOB_RECURSE sources RELATIVE "${SRC}" "${SRC}/${folder}/*.cpp" "${SRC}/${folder}/*.hpp"
       "${SRC}/${folder}/*.h" "${SRC}/${folder}/*.cc")
  list(SORT sources)
  list(LENGTH sources in_folder)
  if(DEFINED MAX_FILES AND in_folder GREATER MAX_FILES)
    string(APPEND problems "${SRC}/${folder}/: ${in_folder} source files, over ${MAX_FILES} "
                           "(split it into folders by concept)\n")
  endif()
  foreach(source IN LISTS sources)
    math(EXPR files "${files} + 1")
    file(STRINGS "${SRC}/${source}" lines)
    set(n 0)
    foreach(line IN LISTS lines)
      math(EXPR n "${n} + 1")
      if(NOT line MATCHES "^[ \t]*#[ \t]*include[ \t]*\"([A-Za-z0-9_]+)/")
        continue()
      endif()
      set(target "${CMAKE_MATCH_1}")
      list(FIND order "${target}" target_level)
      if(target_level LESS 0 OR target STREQUAL folder)
        continue()  # pipewright/... (public headers, other modules) or its own folder
      endif()
      math(EXPR edges "${edges} + 1")
      if(target_level GREATER level)
        string(STRIP "${line}" text)
        string(APPEND problems "${SRC}/${source}:${n}: ${folder}/ includes ${target}/, which "
                               "comes after it in ${README}: ${text}\n")
      endif()
    endforeach()
  endforeach()
endforeach()

if(DEFINED DOC)
  get_filename_component(DOC "${DOC}" ABSOLUTE)
  file(STRINGS "${DOC}" drawn REGEX "^${MODULE}/src/[A-Za-z0-9_]+/ ")
  list(TRANSFORM drawn REPLACE "^${MODULE}/src/([A-Za-z0-9_]+)/ .*" "\\1")
  if(NOT drawn STREQUAL order)
    string(REPLACE ";" " < " want "${order}")
    string(REPLACE ";" " < " got "${drawn}")
    string(APPEND problems "${DOC}: its ${MODULE}/src/ tree reads ${got}; ${README} lists ${want}\n")
  endif()
endif()

if(NOT problems STREQUAL "")
  # NOTICE prints the lines as they are (FATAL_ERROR would re-wrap them).
  message(NOTICE "${problems}")
  message(FATAL_ERROR "${MODULE}/src folder order violated (above)")
endif()
string(REPLACE ";" " < " chain "${order}")
message(STATUS "${MODULE}/src folder order holds: ${chain} "
               "(${files} files, ${edges} includes across folders)")
