# examples/train_cifar10 on the test device (core/test_device.h) must train
# exactly as on the CPU: the same kernels run, so 4 epochs on --device test
# give the CPU's model bit for bit, and a checkpoint written on the test
# device after epoch 2 resumes on the CPU to the same model. Any tensor left
# on the CPU stops the run with a device-mismatch error.
#   cmake -DTRAIN=path/to/train_cifar10 -DDATA=cifar10-subset -DWORK=dir -P train_device.cmake
include(${CMAKE_CURRENT_LIST_DIR}/train_common.cmake)

set(common --data ${DATA} --limit-train 256 --limit-test 64 --width 0.125 --batch-size 32
           --epochs 4 --threads 1 --workers 1)

function(expect_same a b what)
  execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${a} ${b} RESULT_VARIABLE differ)
  if(differ)
    message(FATAL_ERROR "${what}: ${a} and ${b} differ")
  endif()
endfunction()

run_train(cpu --device cpu --log-dir ${WORK}/cpu --save-final ${WORK}/cpu.safetensors)
run_train(test --device test --log-dir ${WORK}/test --save-final ${WORK}/test.safetensors)
file(READ ${WORK}/test.log log)
if(NOT log MATCHES "device: test:0")
  message(FATAL_ERROR "train_cifar10 --device test did not say it runs on test:0:\n${log}")
endif()
expect_same(${WORK}/cpu.safetensors ${WORK}/test.safetensors "4 epochs on the CPU and on the test device")

run_train(first_half --device test --log-dir ${WORK}/resumed --checkpoint-dir ${WORK}/ckpt --stop-after 2)
run_train(second_half --device cpu --log-dir ${WORK}/resumed --checkpoint-dir ${WORK}/ckpt --resume ${WORK}/ckpt
          --save-final ${WORK}/resumed.safetensors)
expect_same(${WORK}/cpu.safetensors ${WORK}/resumed.safetensors "2 epochs on the test device + resume on the CPU")
message(STATUS "train_cifar10: CPU == test device == test device + resume on CPU (bit for bit)")
