# Warnings on pipewright's own targets only (never on third-party code). They are errors only
# with PIPEWRIGHT_WARNINGS_AS_ERRORS (ON in CI and tools/test): a newer compiler or newer torch
# headers must never break a user's build on a warning.
option(PIPEWRIGHT_WARNINGS_AS_ERRORS "Treat warnings in pipewright's own code as errors" OFF)
function(pw_set_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic)
  # GCC 12's -Wrestrict reports false positives inside libstdc++'s std::string under C++20 (GCC
  # bug 105329), which the torch 2.x build uses (torch's headers need C++20).
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
    target_compile_options(${target} PRIVATE -Wno-restrict)
  endif()
  if(PIPEWRIGHT_WARNINGS_AS_ERRORS)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()

# The offline libraries the `pipewright` CLI links (graph, sched, sim). As shared libraries every
# call between their own functions would go through the PLT and forgo inlining, because ELF lets
# another library interpose any exported symbol; pipewright's symbols are not meant to be
# interposed, so say so. Measured (docs/performance.md, bench/compare_binaries.py): `simulate` of
# Interleaved1F1B p 32 v 4 m 1024 takes 0.88-0.90x the time of the default shared build.
function(pw_library_options target)
  if(BUILD_SHARED_LIBS AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    target_compile_options(${target} PRIVATE -fno-semantic-interposition)
  endif()
endfunction()
