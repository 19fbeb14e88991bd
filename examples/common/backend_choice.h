// --backend of the training examples: which process group a distributed run
// (minidl-launch) joins.
//   auto (the default): nccl when the run is distributed on CUDA devices, the
//     build has NCCL (every CUDA build links it) and each local rank has its
//     own GPU; else gloo, with the reason in the note the example prints.
//   gloo: CPU tensors, and CUDA tensors staged through host memory (several
//     ranks may share one GPU).
//   nccl: CUDA tensors only, one GPU per rank. Refused with the reason and the
//     fix when the build has no NCCL, the run's device is not CUDA, or two
//     ranks of this node would share a GPU (NCCL itself refuses that with
//     "Duplicate GPU detected"), or --device cuda:N is not the GPU NCCL
//     drives in this process (cuda:LOCAL_RANK).
// A one-process run joins no group: the backend is checked, then unused.
#pragma once

#include <string>

#include "minidl/core/device.h"

namespace minidl::examples {

// What the choice depends on besides the flags, so tests can pose any machine.
struct BackendFacts {
  bool nccl_built = false;   // a CUDA build (NCCL is linked with it)
  int cuda_devices = 0;      // visible CUDA devices
  int local_world_size = 1;  // processes on this node (LOCAL_WORLD_SIZE, else WORLD_SIZE)
  int local_rank = 0;        // LOCAL_RANK: the GPU ProcessGroupNCCL drives (dist/nccl_host/nccl_checks.h)
};
// This build and machine.
BackendFacts backend_facts();

struct ChosenBackend {
  std::string name;  // "gloo" or "nccl"
  std::string note;  // " (...)" after the name, or empty
};

// spec: auto, gloo or nccl; device and device_spec: what choose_device picked
// from --device (an explicit "cuda:N" puts every local rank on that one GPU).
ChosenBackend choose_backend(const std::string& spec, bool distributed, Device device, const std::string& device_spec,
                             const BackendFacts& facts);

}  // namespace minidl::examples
