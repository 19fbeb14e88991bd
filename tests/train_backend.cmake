# train_cifar10 --backend on the CPU (examples/common/backend_choice.h): under
# minidl-launch with 2 ranks the default (auto) joins a gloo group and says so
# in its first lines; --backend nccl is refused before any group or data
# exists, distributed or not, with the reason (no NCCL in a CPU build; in a
# CUDA build without a GPU the device is the CPU, which NCCL cannot serve);
# an unknown backend names the accepted ones.
#   cmake -DTRAIN=train_cifar10 -DLAUNCH=minidl-launch -DDATA=cifar10-subset -DWORK=dir -P train_backend.cmake
include(${CMAKE_CURRENT_LIST_DIR}/train_common.cmake)
set(common --data ${DATA} --limit-train 64 --limit-test 32 --width 0.125 --batch-size 16 --epochs 1 --threads 1
           --workers 0 --log-dir ${WORK}/logs)

# Runs COMMAND...; expects exit code 0 (want_ok) or not, and output matching `pattern`.
function(expect what want_ok pattern)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  set(all "${out}${err}")
  if(want_ok AND NOT rc EQUAL 0)
    message(FATAL_ERROR "${what}: failed (${rc}):\n${all}")
  elseif(NOT want_ok AND rc EQUAL 0)
    message(FATAL_ERROR "${what}: succeeded, expected an error:\n${all}")
  endif()
  if(NOT all MATCHES "${pattern}")
    message(FATAL_ERROR "${what}: the output does not match '${pattern}':\n${all}")
  endif()
endfunction()

set(no_nccl "--backend nccl: (this build of minidl has no NCCL: configure with -DMINIDL_CUDA=ON|NCCL communicates CUDA tensors only, and this run trains on cpu)")
expect("2 ranks, --backend auto" TRUE "ddp:   2 processes, backend gloo \\(auto: cpu tensors\\)"
       ${LAUNCH} --nproc-per-node 2 ${TRAIN} ${common})
expect("2 ranks, --backend nccl" FALSE "${no_nccl}" ${LAUNCH} --nproc-per-node 2 ${TRAIN} ${common} --backend nccl)
expect("1 process, --backend nccl" FALSE "${no_nccl}" ${TRAIN} ${common} --backend nccl)
expect("--backend mpi" FALSE "--backend: expected auto, gloo or nccl, got 'mpi'" ${TRAIN} ${common} --backend mpi)
message(STATUS "train_cifar10 --backend: auto picks gloo on the CPU; nccl and unknown backends refused clearly")
