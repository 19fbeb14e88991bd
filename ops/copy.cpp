// copy_, clone, contiguous and to(dtype/device).
//   y = x (converted)      backward: dx = dy (converted back to x's dtype/device)
// Saves nothing for backward.
#include "ops/copy.h"

#include "core/autograd/function.h"
#include "ops/cpu/convert_half.h"
#include "ops/cpu/strided_loop.h"

namespace minidl {

DispatchStub<CopyFn> copy_stub("copy_");

namespace {

template <class D, class S>
void copy_cpu_typed(const Tensor& dst, const Tensor& src) {
  D* out = static_cast<D*>(dst.raw_data());
  const S* in = static_cast<const S*>(src.raw_data());
  for_each_row<2>(dst.shape(), {dst.strides(), src.strides()},
                  [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& step) {
                    D* o = out + off[0];
                    const S* i = in + off[1];
                    if (step[0] == 1 && step[1] == 1) {
                      for (int64_t k = 0; k < n; ++k) o[k] = static_cast<D>(i[k]);
                    } else {
                      for (int64_t k = 0; k < n; ++k) o[k * step[0]] = static_cast<D>(i[k * step[1]]);
                    }
                  });
}

void copy_cpu(const Tensor& dst, const Tensor& src) {
  if (is_reduced_floating(dst.dtype()) || is_reduced_floating(src.dtype())) return copy_half_cpu(dst, src);
  MINIDL_DISPATCH_ALL(dst.dtype(), "copy_", [&] {
    using D = scalar_t;
    MINIDL_DISPATCH_ALL(src.dtype(), "copy_", [&] { copy_cpu_typed<D, scalar_t>(dst, src); });
  });
}

// The device whose copy kernel moves data between `a` and `b`: the one that is
// not the CPU (a CUDA copy kernel handles host<->device and device<->device).
Device copy_runner(Device a, Device b) { return a.is_cpu() ? b : a; }

// Copy into a fresh contiguous tensor of `dtype` on `device`.
Tensor copy_to(const Tensor& x, DType dtype, Device device) {
  Tensor out = empty(x.shape(), TensorOptions(dtype).device(device));
  copy_stub.kernel(copy_runner(x.device(), device))(out, x);
  return out;
}

struct ToCopy : autograd::Function<ToCopy> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, DType dtype, Device device) {
    ctx->saved_data["dtype"] = static_cast<int64_t>(x.dtype());
    ctx->saved_data["device_type"] = static_cast<int64_t>(x.device().type);
    ctx->saved_data["device_index"] = static_cast<int64_t>(x.device().index);
    return copy_to(x, dtype, device);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto dtype = static_cast<DType>(ctx->saved_data["dtype"].to_int());
    const Device device(static_cast<DeviceType>(ctx->saved_data["device_type"].to_int()),
                        static_cast<int>(ctx->saved_data["device_index"].to_int()));
    return {copy_to(grads[0], dtype, device), Tensor(), Tensor()};
  }
};

}  // namespace

void register_copy_cpu_kernels() { copy_stub.set(DeviceType::CPU, copy_cpu); }

Tensor& Tensor::copy_(const Tensor& src) {
  MINIDL_CHECK(src.defined(), "copy_: the source tensor is undefined");
  MINIDL_CHECK(!(autograd::GradMode::is_enabled() && requires_grad()),
               is_leaf() ? "a leaf Variable that requires grad is being used in an in-place operation."
                         : "copy_: in-place operations on tensors that require grad are not supported "
                           "by minidl's autograd; use an out-of-place op");
  Tensor s = src.shape() == shape() ? src : src.expand(shape());
  copy_stub.kernel(copy_runner(s.device(), device()))(*this, s);
  bump_version();
  return *this;
}

Tensor Tensor::clone() const { return ToCopy::apply(*this, dtype(), device()); }

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

Tensor Tensor::to(DType dtype) const {
  return dtype == this->dtype() ? *this : ToCopy::apply(*this, dtype, device());
}

// Copies in this build are synchronous on every device, so non_blocking only
// states that the caller does not need them to be; the CUDA copy kernel will
// honour it for pinned host memory.
Tensor Tensor::to(Device device, bool non_blocking) const {
  (void)non_blocking;
  return device == this->device() ? *this : ToCopy::apply(*this, dtype(), device);
}

Tensor Tensor::pin_memory() const {
  MINIDL_CHECK(device().is_cpu(), "cannot pin '", device().str(), "' memory: only dense CPU tensors can be pinned");
  Allocator* pinned = pinned_host_allocator();
  if (pinned == nullptr || is_pinned()) return *this;  // no backend that pins: plain host memory serves
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = shape();
  impl->strides = contiguous_strides(shape());
  impl->dtype = dtype();
  impl->storage = std::make_shared<Storage>(nbytes(), kCPU, pinned);
  Tensor out(std::move(impl));
  copy_stub.kernel(kCPU)(out, *this);
  return out;
}

bool Tensor::is_pinned() const {
  const Allocator* pinned = pinned_host_allocator();
  return pinned != nullptr && checked_storage()->allocator() == pinned;
}

}  // namespace minidl
