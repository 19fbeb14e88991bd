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

# --log-every only changes when the sums come back to the host: reading them
# after every step must give the same metrics as the default (every 10), and
# --device auto (the default) must say which device it chose and why.
function(train_columns csv out)  # metrics.csv without its two timing columns
  file(STRINGS ${csv} lines)
  set(rows)
  foreach(line IN LISTS lines)
    string(REGEX REPLACE ",[^,]*,[^,]*$" "" line "${line}")
    list(APPEND rows "${line}")
  endforeach()
  set(${out} "${rows}" PARENT_SCOPE)
endfunction()
run_train(log_every_1 --log-every 1 --log-dir ${WORK}/log_every_1)
train_columns(${WORK}/cpu/metrics.csv every_10)
train_columns(${WORK}/log_every_1/metrics.csv every_1)
if(NOT every_10 STREQUAL every_1)
  message(FATAL_ERROR "--log-every 1 changed the metrics:\n${every_1}\nvs the default's\n${every_10}")
endif()
file(READ ${WORK}/log_every_1.log log)
if(NOT log MATCHES "device: (cpu \\(auto: no CUDA: [^\n]+\\)|cuda:0 \\(auto: a CUDA device is usable\\))")
  message(FATAL_ERROR "train_cifar10 --device auto did not say what it chose and why:\n${log}")
endif()
# --memory-format: auto keeps NCHW off CUDA and says so; channels-last runs
# on the test device (NHWC images, activations, conv weights, no CPU tensor).
if(NOT log MATCHES "device: cpu[^\n]*, NCHW \\(contiguous\\) \\(--memory-format auto\\)")
  message(FATAL_ERROR "train_cifar10 --memory-format auto did not keep NCHW on the CPU:\n${log}")
endif()
run_train(channels_last --device test --memory-format channels-last --stop-after 1 --log-dir ${WORK}/channels_last)
file(READ ${WORK}/channels_last.log log)
if(NOT log MATCHES "device: test:0[^\n]*, channels-last activations and conv weights\n")
  message(FATAL_ERROR "train_cifar10 --memory-format channels-last did not say so:\n${log}")
endif()
message(STATUS "train_cifar10: CPU == test device == test device + resume on CPU (bit for bit); "
               "--log-every 1 == default; --device auto explained; --memory-format auto and channels-last")
