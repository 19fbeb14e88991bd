// --device and --deterministic of the training examples.
//   --device auto (the default): cuda when a CUDA device is usable, else cpu,
//   with the reason in the note the example prints in its first lines. A
//   distributed run (minidl-launch) stays on the CPU unless --device cuda is
//   given; then --backend auto (examples/common/backend_choice.h) picks NCCL
//   when each local rank has its own GPU, else Gloo, which stages CUDA
//   tensors through host memory so several ranks can share one GPU.
//   `cuda` without an index in a distributed run is cuda:(LOCAL_RANK mod the
//   device count).
#pragma once

#include <string>

#include "minidl/core/device.h"

namespace minidl::examples {

struct ChosenDevice {
  Device device;
  std::string note;  // " (...)" after the device's name, or empty
};

// spec: auto, cpu, cuda[:N] or test. Refuses cuda without a usable device,
// with the reason.
ChosenDevice choose_device(const std::string& spec, bool distributed);

// cuDNN for a training run on `device` (nothing elsewhere): the benchmark
// search on (a training run repeats its shapes, so timing the algorithms
// once pays back), unless `deterministic`, which turns the search off and
// keeps only deterministic algorithms. Returns a note for the first lines.
std::string configure_backends(Device device, bool deterministic);

}  // namespace minidl::examples
