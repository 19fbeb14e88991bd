// The default staging of ProcessGroupGloo (see gloo_staging.h): in place on
// the CPU, synchronous copies elsewhere (and for strided tensors) unless a
// backend registered better.
#include "minidl/dist/gloo_staging.h"

#include <atomic>

#include "minidl/core/autograd/grad_mode.h"
#include "minidl/core/check.h"

namespace minidl::dist {

namespace {

class InPlace final : public StagedTensor {
 public:
  explicit InPlace(const Tensor& t) { host_ = t; }
};

// Copies on the calling thread: in when staged, back in copy_back (no
// autograd: a parameter being broadcast may require grad).
class Synchronous final : public StagedTensor {
 public:
  Synchronous(const Tensor& t, bool value) : target_(t) {
    host_ = value ? t.detach().to(kCPU).contiguous() : empty(t.shape(), t.dtype());
  }
  void copy_back() override {
    NoGradGuard no_grad;
    Tensor(target_).copy_(host_);
  }

 private:
  Tensor target_;
};

std::atomic<GlooStagingFactory> g_factories[kNumDeviceTypes];

}  // namespace

std::shared_ptr<StagedTensor> stage_for_gloo(const Tensor& t, bool value) {
  // A strided tensor (a transposed view, channels-last) goes through a
  // contiguous copy, so every rank sends its elements in logical order.
  if (!t.is_contiguous()) return std::make_shared<Synchronous>(t, value);
  if (t.device().is_cpu()) return std::make_shared<InPlace>(t);
  if (GlooStagingFactory f = g_factories[static_cast<int>(t.device().type)].load()) return f(t, value);
  return std::make_shared<Synchronous>(t, value);
}

void register_gloo_staging(DeviceType type, GlooStagingFactory factory) {
  MINIDL_CHECK(type != DeviceType::CPU, "register_gloo_staging: CPU tensors are used in place");
  g_factories[static_cast<int>(type)].store(factory);
}

}  // namespace minidl::dist
