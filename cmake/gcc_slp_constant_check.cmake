# minidl_check_slp_constants(<flags>): sets MINIDL_SLP_WORKAROUND to
# -fno-tree-slp-vectorize where the compiler, with <flags>, miscompiles small
# vector constants (cmake/gcc_slp_constant_check.cpp says which compilers and
# how); empty elsewhere. Runs the check program, so it is skipped (no
# workaround) when cross-compiling.
function(minidl_check_slp_constants flags)
  set(MINIDL_SLP_WORKAROUND "" PARENT_SCOPE)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "GNU" OR CMAKE_CROSSCOMPILING)
    return()
  endif()
  try_run(run_result compile_ok ${CMAKE_BINARY_DIR}/slp_constant_check
          ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/gcc_slp_constant_check.cpp
          COMPILE_DEFINITIONS -O2 ${flags} CXX_STANDARD 20)
  if(compile_ok AND NOT run_result EQUAL 0)
    message(STATUS "${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION} with '${flags}' miscompiles vector "
                   "constants such as {4, 4, 0, 0} (cmake/gcc_slp_constant_check.cpp): building with "
                   "-fno-tree-slp-vectorize")
    set(MINIDL_SLP_WORKAROUND -fno-tree-slp-vectorize PARENT_SCOPE)
  endif()
endfunction()
