# Resume equivalence of examples/train_unet3d (--smoke sizes): 2 epochs
# straight must equal, bit for bit, 1 epoch (--stop-after 1, as if
# interrupted) + resume from its checkpoint for epoch 2: the model and the
# optimizer files of epoch 2. One compute thread, so reductions run in a fixed order.
#   cmake -DTRAIN=path/to/train_unet3d -DWORK=dir -P unet_resume.cmake
file(REMOVE_RECURSE ${WORK}/straight ${WORK}/resumed)
set(common --smoke --data ${WORK}/data --threads 1 --expect-dice 0)

function(run_unet what)
  execute_process(COMMAND ${TRAIN} ${common} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
  endif()
  message(STATUS "${what}:\n${out}")
endfunction()

run_unet(straight --log-dir ${WORK}/straight --checkpoint-dir ${WORK}/straight/ckpt)
run_unet(first_half --log-dir ${WORK}/resumed --checkpoint-dir ${WORK}/resumed/ckpt --stop-after 1)
if(NOT EXISTS ${WORK}/resumed/ckpt/model_epoch1.safetensors)
  message(FATAL_ERROR "no epoch-1 checkpoint in ${WORK}/resumed/ckpt")
endif()
run_unet(second_half --log-dir ${WORK}/resumed --checkpoint-dir ${WORK}/resumed/ckpt --resume ${WORK}/resumed/ckpt)

foreach(f model_epoch2.safetensors optimizer_epoch2.safetensors)
  execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${WORK}/straight/ckpt/${f} ${WORK}/resumed/ckpt/${f}
                  RESULT_VARIABLE differ)
  if(differ)
    message(FATAL_ERROR "2 epochs and 1 + resume + 1 epochs gave different ${f}")
  endif()
endforeach()
message(STATUS "resume equivalence: epoch-2 model and optimizer identical (bit for bit)")
