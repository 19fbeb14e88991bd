# examples/predict_unet3d on a train_unet3d --smoke checkpoint:
#  - one window covering each whole 24^3 validation volume is the training
#    run's own validation pass: the mean Dice and IoU must equal the last
#    row of its metrics.csv (printed to 6 decimals by both);
#  - overlapping 16^3 windows (Gaussian blending) must still beat the smoke's
#    Dice bar, and --save mask on the test device writes a uint8 mask.
#   cmake -DTRAIN=... -DPREDICT=... -DWORK=dir -P unet_predict.cmake
cmake_minimum_required(VERSION 3.20)
file(REMOVE_RECURSE ${WORK})
function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
  endif()
  message(STATUS "${what}:\n${out}")
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

run(train ${TRAIN} --smoke --threads 1 --log-dir ${WORK}/log --checkpoint-dir ${WORK}/ckpt)
file(STRINGS ${WORK}/log/metrics.csv rows)
list(GET rows -1 last)
string(REPLACE "," ";" fields "${last}")
list(GET fields 4 val_dice)
list(GET fields 5 val_iou)
set(val ${WORK}/log/data/val)

run(whole_volumes ${PREDICT} --checkpoint ${WORK}/ckpt --images ${val}/images --labels ${val}/labels
    --out ${WORK}/whole --roi 24 --threads 1)
if(NOT last_output MATCHES "mean over 2 volumes: Dice ([0-9.e-]+), IoU ([0-9.e-]+)")
  message(FATAL_ERROR "no mean Dice line")
endif()
set(dice ${CMAKE_MATCH_1})
set(iou ${CMAKE_MATCH_2})
# Both print %.6g: equal as text.
if(NOT dice STREQUAL val_dice OR NOT iou STREQUAL val_iou)
  message(FATAL_ERROR "whole volumes gave Dice ${dice}, IoU ${iou}; the training run's validation ${val_dice}, ${val_iou}")
endif()
message(STATUS "whole volumes: Dice ${dice} IoU ${iou}, as the training run's validation (${val_dice}, ${val_iou})")

run(windows ${PREDICT} --checkpoint ${WORK}/ckpt --images ${val}/images --labels ${val}/labels
    --out ${WORK}/windows --mode gaussian --overlap 0.5 --expect-dice 0.5 --threads 1)
run(mask ${PREDICT} --checkpoint ${WORK}/ckpt --images ${val}/images/000.npy --out ${WORK}/mask --save mask
    --device test --threads 1)
file(READ ${WORK}/mask/000.npy header OFFSET 10 LIMIT 70)  # the header dict of a version 1.0 file
if(NOT header MATCHES "'descr': '\\|u1'" OR NOT header MATCHES "'shape': \\(24, 24, 24\\)")
  message(FATAL_ERROR "the mask file is not a (24, 24, 24) uint8 .npy: ${header}")
endif()
