// See running_metrics.h.
#include "examples/common/running_metrics.h"

#include "minidl/core/autograd/grad_mode.h"
#include "minidl/core/check.h"
#include "minidl/ops/binary.h"

namespace minidl::examples {

RunningMetrics::RunningMetrics(int64_t every) : every_(every) {
  MINIDL_CHECK(every >= 1, "--log-every: expected a positive number of steps, got ", every);
}

void RunningMetrics::add(const Tensor& loss, const Tensor& logits, const Tensor& targets) {
  accumulate(loss, logits, targets);
  count(targets.numel());
}

void RunningMetrics::accumulate(const Tensor& loss, const Tensor& logits, const Tensor& targets) {
  NoGradGuard no_grad;
  const int64_t n = targets.numel();
  const Tensor pred = logits.argmax(1);
  MINIDL_CHECK(pred.numel() == n, "RunningMetrics: ", pred.numel(), " predictions but ", n, " targets");
  // float32 loss -> float64, times n, summed in float64: the same arithmetic
  // as summing loss.item() * n on the host, in the same order (0 + x is x).
  const Tensor l = loss.detach().to(kFloat64) * static_cast<double>(n);
  const Tensor c = eq(pred, targets.reshape(pred.shape())).sum();
  if (!device_loss_sum_.defined()) {
    device_loss_sum_ = zeros_like(l);
    device_correct_ = zeros_like(c);
  }
  device_loss_sum_.add_(l);
  device_correct_.add_(c);
}

void RunningMetrics::count(int64_t n) {
  seen_on_device_ += n;
  fresh_ = ++pending_ >= every_;
  if (fresh_) read();
}

void RunningMetrics::read() {
  if (device_loss_sum_.defined()) {
    loss_sum_ = device_loss_sum_.item<double>();
    correct_ = device_correct_.item<int64_t>();
  }
  seen_ = seen_on_device_;
  pending_ = 0;
}

void RunningMetrics::reset() {
  if (device_loss_sum_.defined()) {
    NoGradGuard no_grad;
    device_loss_sum_.zero_();
    device_correct_.zero_();
  }
  pending_ = seen_ = seen_on_device_ = correct_ = 0;
  loss_sum_ = 0;
  fresh_ = false;
}

}  // namespace minidl::examples
