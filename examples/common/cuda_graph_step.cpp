// See cuda_graph_step.h. Ran on an H100 (train_cifar10 --cuda-graph, 2026-11-27).
#include "examples/common/cuda_graph_step.h"

#include <utility>

#include "minidl/core/autograd/grad_mode.h"
#include "minidl/core/check.h"
#include "minidl/core/shape.h"

namespace minidl::examples {

void check_cuda_graph_supported(Device device, const std::string& amp, bool distributed, nn::Module& model,
                                const optim::Optimizer& opt) {
  MINIDL_CHECK(device.is_cuda(), "--cuda-graph needs --device cuda (a CUDA graph holds GPU work), got ", device.str());
  MINIDL_CHECK(amp != "fp16", "--cuda-graph does not support --amp fp16: the GradScaler skips a step with inf/NaN "
               "gradients after reading found_inf on the host, a synchronization a graph cannot hold (bf16 needs "
               "no scaler)");
  MINIDL_CHECK(!distributed, "--cuda-graph does not support distributed training: DDP's buckets are reduced from "
               "autograd hooks with host-side bookkeeping, and Gloo stages CUDA tensors through the host");
  for (const auto& [name, m] : model.named_modules())
    MINIDL_CHECK(m->name() != "Dropout", "--cuda-graph does not support dropout (", name, "): its CUDA kernel takes "
                 "a seed drawn on the host at each call, so every replay would repeat the capture's mask");
  for (const optim::ParamGroup& g : opt.param_groups())
    MINIDL_CHECK(g.options->capturable, "--cuda-graph needs a capturable optimizer (", opt.name(), " with "
                 "capturable = true): a replay reuses the kernel arguments of the capture, so the lr must be read "
                 "from device memory");
}

GraphedStep::GraphedStep(StepFn step, optim::Optimizer& opt, Device device, int64_t warmup)
    : step_(std::move(step)), opt_(opt), device_(device), warmup_(warmup) {
  MINIDL_CHECK(warmup >= 1, "GraphedStep: expected at least one warm-up step (lazy state must not be made inside "
               "the capture), got ", warmup);
}

void GraphedStep::copy_inputs(const Tensor& x, const Tensor& y) {
  NoGradGuard no_grad;
  if (!static_x_.defined()) {
    static_x_ = empty(x.shape(), TensorOptions(x.dtype()).device(device_));
    static_y_ = empty(y.shape(), TensorOptions(y.dtype()).device(device_));
  }
  MINIDL_CHECK(x.shape() == static_x_.shape() && y.shape() == static_y_.shape() && x.dtype() == static_x_.dtype() &&
                   y.dtype() == static_y_.dtype(),
               "GraphedStep: the captured step takes inputs of shape ", shape_str(static_x_.shape()), " and targets ",
               shape_str(static_y_.shape()), ", got ", shape_str(x.shape()), " and ", shape_str(y.shape()),
               "; run other batches eagerly");
  // To the device first (asynchronous from pinned memory), then into the
  // static tensors, which the graph reads at their capture-time addresses.
  static_x_.copy_(x.device() == device_ ? x : x.to(device_, /*non_blocking=*/true));
  static_y_.copy_(y.device() == device_ ? y : y.to(device_, /*non_blocking=*/true));
}

void GraphedStep::run(const Tensor& x, const Tensor& y) {
  if (warmed_ < warmup_) {
    // On the capture stream: per-stream lazy state (the cuBLAS workspace) is
    // then the capture's own.
    cuda::CaptureStreamGuard side;
    copy_inputs(x, y);
    step_(static_x_, static_y_);
    ++warmed_;
    return;
  }
  copy_inputs(x, y);
  opt_.write_device_lr();  // the capture stream waits for these (GraphCapture's guard) and the replays follow them
  if (!graph_.has_graph()) {
    // ThreadLocal: the DataLoader's threads keep working meanwhile; Global
    // would fail the capture if one of them made a CUDA call (pinning memory).
    cuda::GraphCapture capture(graph_, 0, cuda::CaptureErrorMode::ThreadLocal);
    step_(static_x_, static_y_);
    capture.end();
  }
  graph_.replay();  // the capture ran nothing: the first replay is this batch's step
  ++replays_;
}

}  // namespace minidl::examples
