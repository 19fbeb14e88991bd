# Shared by the train_cifar10 scripts (train_resume.cmake, train_device.cmake):
# the required -D variables, a fresh WORK folder, and run_train(log ARGS...),
# which runs ${TRAIN} ${common} ARGS... and stops with its stderr on failure.
foreach(var TRAIN DATA WORK)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "${CMAKE_CURRENT_LIST_FILE}: -D${var}=... is required")
  endif()
endforeach()
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})

function(run_train log)
  execute_process(COMMAND ${TRAIN} ${common} ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_FILE ${WORK}/${log}.log ERROR_FILE ${WORK}/${log}.err)
  if(NOT rc EQUAL 0)
    file(READ ${WORK}/${log}.err err)
    message(FATAL_ERROR "train_cifar10 ${ARGN} failed (${rc}):\n${err}")
  endif()
endfunction()
