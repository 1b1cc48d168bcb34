# Warnings are errors on pipewright's own targets only (never on third-party code).
function(pw_set_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Werror)
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
