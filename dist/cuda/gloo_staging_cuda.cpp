// ProcessGroupGloo's staging of CUDA tensors (see dist/gloo_staging.h), as
// PyTorch's AsyncAllreduceCUDAWork: pinned host buffers; the copy to the host
// queued on the caller's current stream when the collective is issued, with
// an event the worker thread waits on before Gloo reads the buffer; the copy
// back queued on the same stream by the worker, which waits for it before the
// Work completes. The copies are the CUDA copy kernel's non_blocking ones
// (ops/cuda/copy.cu), which keep a pinned buffer alive until its copy has run
// (record_pinned_host_use). Ran on an H100 (2026-11-27): Gloo with CUDA
// tensors, 4 and 2 processes sharing the GPU (tests/test_cuda_dist_oracles),
// and train_cifar10 with SyncBatchNorm under minidl-launch (scripts/gpu-check.sh).
#include <memory>

#include "minidl/core/autograd/grad_mode.h"
#include "minidl/core/cuda/handles.h"
#include "minidl/core/cuda/runtime.h"
#include "minidl/dist/gloo_staging.h"
#include "minidl/ops/copy.h"

namespace minidl::dist {

namespace {

class CudaStaged final : public StagedTensor {
 public:
  CudaStaged(const Tensor& t, bool value) : target_(t.detach()), index_(t.device().index) {
    cuda::DeviceGuard device(index_);
    stream_ = cuda::current_stream(index_);
    host_ = empty(t.shape(), TensorOptions(t.dtype()).pinned_memory(true));
    event_ = cuda::CudaEvent::create();
    if (value) {
      copy_stub.kernel(t.device())(host_, target_, /*non_blocking=*/true);  // D2H queued on stream_
      event_.record(stream_);
      copied_in_ = true;
    }
  }
  void wait_ready() override {
    if (copied_in_) event_.synchronize();  // the value as of the issue, in host memory
  }
  void copy_back() override {
    cuda::DeviceGuard device(index_);
    cuda::StreamGuard stream(index_, stream_);  // the copy kernel queues on the current stream
    NoGradGuard no_grad;
    copy_stub.kernel(target_.device())(target_, host_, /*non_blocking=*/true);  // H2D queued on stream_
    event_.record(stream_);
    event_.synchronize();  // the Work completes once the result is on the device
  }

 private:
  Tensor target_;
  int index_;
  cudaStream_t stream_ = nullptr;
  cuda::CudaEvent event_;
  bool copied_in_ = false;
};

std::shared_ptr<StagedTensor> stage_cuda(const Tensor& t, bool value) { return std::make_shared<CudaStaged>(t, value); }

}  // namespace

void register_gloo_cuda_staging() { register_gloo_staging(DeviceType::CUDA, &stage_cuda); }

}  // namespace minidl::dist
