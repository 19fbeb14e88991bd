// How ProcessGroupGloo moves a tensor that is not in CPU memory through host
// memory (Gloo reads and writes host memory only), as PyTorch's Gloo backend
// stages CUDA tensors (ProcessGroupGloo.cpp, AsyncAllreduceCUDAWork).
//
//   issue (caller's thread)   stage_for_gloo(t, value): a host tensor for t;
//                             with value, t's current value is being copied in
//   worker, before Gloo       wait_ready(): that copy has finished
//   worker, after Gloo        copy_back(): the host result is in t when it returns
//
// Contiguous CPU tensors are used in place (no copies); strided ones (any
// device but CUDA) through a contiguous host copy. Other devices default to
// synchronous copies (the test device: the copy in is done on return from
// stage_for_gloo). CUDA builds register a stream-ordered staging for CUDA
// tensors (dist/cuda/gloo_staging_cuda.cpp): pinned host buffers, the copy in
// queued on the caller's current stream with an event the worker waits for
// (the caller is not blocked), the copy back queued on that same stream and
// finished before the collective's Work completes, so wait() keeps meaning
// "the result is in the tensor" for every stream. The CUDA staging ran on an
// H100 (tests/test_cuda_dist_oracles, 2026-11-27).
#pragma once

#include <memory>

#include "minidl/core/device.h"
#include "minidl/core/tensor.h"

namespace minidl::dist {

class StagedTensor {
 public:
  virtual ~StagedTensor() = default;
  const Tensor& host() const { return host_; }  // what Gloo reads and writes
  virtual void wait_ready() {}
  virtual void copy_back() {}

 protected:
  Tensor host_;
};

// value: an input or in-place tensor (its value is staged); else an output
// whose host buffer Gloo fills. A CUDA t must be contiguous (ProcessGroupGloo checks).
std::shared_ptr<StagedTensor> stage_for_gloo(const Tensor& t, bool value);

using GlooStagingFactory = std::shared_ptr<StagedTensor> (*)(const Tensor& t, bool value);
void register_gloo_staging(DeviceType type, GlooStagingFactory factory);

// Registers the CUDA staging (defined in CUDA builds only; ProcessGroupGloo's
// constructor calls it there).
void register_gloo_cuda_staging();

}  // namespace minidl::dist
