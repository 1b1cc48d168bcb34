# Warnings are errors on pipewright's own targets only (never on third-party code).
function(pw_set_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Werror)
endfunction()
