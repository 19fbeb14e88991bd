# Resume equivalence of examples/train_cifar10: a run of 4 epochs must equal,
# bit for bit, a run stopped after epoch 2 (--stop-after 2, as if interrupted)
# and resumed from its checkpoint for epochs 3-4. One compute thread, so the
# kernels' reductions run in a fixed order.
#   cmake -DTRAIN=path/to/train_cifar10 -DDATA=cifar10-subset -DWORK=dir
#         -DEXTRA="--optimizer;adamw;..." -P train_resume.cmake
include(${CMAKE_CURRENT_LIST_DIR}/train_common.cmake)

set(common --data ${DATA} --limit-train 256 --limit-test 64 --width 0.125 --batch-size 32
           --epochs 4 --threads 1 ${EXTRA})

run_train(straight --log-dir ${WORK}/straight --save-final ${WORK}/straight.safetensors)
run_train(first_half --log-dir ${WORK}/resumed --checkpoint-dir ${WORK}/ckpt --stop-after 2)
if(NOT EXISTS ${WORK}/ckpt/checkpoint.json OR NOT EXISTS ${WORK}/ckpt/model_epoch2.safetensors)
  message(FATAL_ERROR "no epoch-2 checkpoint in ${WORK}/ckpt")
endif()
run_train(second_half --log-dir ${WORK}/resumed --checkpoint-dir ${WORK}/ckpt --resume ${WORK}/ckpt
          --save-final ${WORK}/resumed.safetensors)

execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${WORK}/straight.safetensors ${WORK}/resumed.safetensors
                RESULT_VARIABLE differ)
if(differ)
  message(FATAL_ERROR "4 epochs and 2 + resume + 2 epochs gave different models: "
                      "${WORK}/straight.safetensors vs ${WORK}/resumed.safetensors")
endif()
message(STATUS "resume equivalence: ${WORK}/straight.safetensors == ${WORK}/resumed.safetensors (bit for bit)")
