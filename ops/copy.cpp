// copy_, clone, contiguous and to(dtype/device).
//   y = x (converted)      backward: dx = dy (converted back to x's dtype/device)
// Saves nothing for backward.
#include "minidl/ops/copy.h"

#include "minidl/core/autograd/function.h"
#include "minidl/core/sync_debug.h"

namespace minidl {

DispatchStub<CopyFn> copy_stub("copy_");

namespace {

// The device whose copy kernel moves data between `a` and `b`: the one that is
// not the CPU (a CUDA copy kernel handles host<->device and device<->device).
Device copy_runner(Device a, Device b) { return a.is_cpu() ? b : a; }

// A copy the host waits for (core/sync_debug.h): a blocking one between host
// memory and a device. non_blocking copies are not flagged, as in PyTorch
// (from pageable memory the CUDA one still waits: pin the host memory).
void note_if_synchronizing(const Tensor& dst, const Tensor& src, bool non_blocking) {
  if (non_blocking || dst.device().is_cpu() == src.device().is_cpu()) return;
  const bool to_host = dst.device().is_cpu();
  warn_or_error_on_sync(to_host ? src.device() : dst.device(),
                        to_host ? "a copy to host memory: item(), to(kCPU), to_vector() or copy_"
                                : "a blocking copy from host memory: to(device) or copy_");
}

// Copy into a fresh tensor of `dtype` on `device`: contiguous, or laid out
// as x where `keep_format` and x is channels-last (to(dtype) and to(device),
// as PyTorch's preserve_format; autocast's casts: a channels-last network
// stays so). The views in memory order give the cross-device copies
// contiguous buffers on both sides.
Tensor copy_to(const Tensor& x, DType dtype, Device device, bool non_blocking, bool keep_format) {
  const MemoryFormat fmt = keep_format ? x.suggest_memory_format() : MemoryFormat::Contiguous;
  Tensor out = empty(x.shape(), TensorOptions(dtype).device(device), fmt);
  note_if_synchronizing(out, x, non_blocking);
  const std::vector<Tensor> v = in_memory_order(out, {x});
  copy_stub.kernel(copy_runner(x.device(), device))(v[0], v[1], non_blocking);
  return out;
}

struct ToCopy : autograd::Function<ToCopy> {
  // keep_format: false for clone() (contiguous()'s copy), true for to().
  static Tensor forward(AutogradContext* ctx, const Tensor& x, DType dtype, Device device, bool non_blocking,
                        bool keep_format) {
    ctx->saved_data["dtype"] = static_cast<int64_t>(x.dtype());
    ctx->saved_data["device_type"] = static_cast<int64_t>(x.device().type);
    ctx->saved_data["device_index"] = static_cast<int64_t>(x.device().index);
    return copy_to(x, dtype, device, non_blocking, keep_format);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto dtype = static_cast<DType>(ctx->saved_data["dtype"].to_int());
    const Device device(static_cast<DeviceType>(ctx->saved_data["device_type"].to_int()),
                        static_cast<int>(ctx->saved_data["device_index"].to_int()));
    return {copy_to(grads[0], dtype, device, false, true), Tensor(), Tensor(), Tensor(), Tensor()};
  }
};

}  // namespace


Tensor& Tensor::copy_(const Tensor& src) {
  MINIDL_CHECK(src.defined(), "copy_: the source tensor is undefined");
  MINIDL_CHECK(!(autograd::GradMode::is_enabled() && requires_grad()),
               is_leaf() ? "a leaf Variable that requires grad is being used in an in-place operation."
                         : "copy_: in-place operations on tensors that require grad are not supported "
                           "by minidl's autograd; use an out-of-place op");
  // PyTorch records the copy (self then requires grad); minidl cannot, and
  // dropping the source's history would give a silently wrong gradient.
  MINIDL_CHECK(!(autograd::GradMode::is_enabled() && src.requires_grad()),
               "copy_: the source requires grad, but minidl's autograd cannot record in-place operations; "
               "use clone() or to(), or run under NoGradGuard if no gradient should flow");
  for (int64_t d = 0; d < dim(); ++d)  // an expanded destination: which write would win?
    MINIDL_CHECK(strides()[d] != 0 || shape()[d] <= 1,
                 "copy_: unsupported operation: more than one element of the written-to tensor refers to a "
                 "single memory location. Please clone() the tensor before performing the operation.");
  Tensor s = src.shape() == shape() ? src : src.expand(shape());
  // Reading src while writing self is only safe when both walk the same
  // elements in the same order; any other overlap (t[:, 1:].copy_(t[:, :-1]),
  // which read elements already overwritten) reads from a copy, as the
  // in-place binary ops do.
  if (s.impl()->storage == impl()->storage &&
      !(s.storage_offset() == storage_offset() && s.strides() == strides()))
    s = s.detach().clone();
  note_if_synchronizing(*this, s, false);
  copy_stub.kernel(copy_runner(s.device(), device()))(*this, s, false);
  bump_version();
  return *this;
}

Tensor Tensor::clone() const { return ToCopy::apply(*this, dtype(), device(), false, false); }

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

// NHWC through differentiable views: the copy is the NHWC view's contiguous().
Tensor Tensor::contiguous(MemoryFormat fmt) const {
  MINIDL_CHECK(fmt != MemoryFormat::Preserve, "contiguous: memory format ", memory_format_name(fmt),
               " is not supported");
  if (fmt == MemoryFormat::Contiguous) return contiguous();
  channels_last_strides(shape());  // refuses a rank other than 4
  if (is_contiguous(fmt)) return *this;
  return permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2});
}

Tensor Tensor::to(DType dtype) const {
  return dtype == this->dtype() ? *this : ToCopy::apply(*this, dtype, device(), false, true);
}

// non_blocking reaches the copy kernel: the CUDA one leaves a copy from/to
// pinned host memory running (the CPU and test-device ones are synchronous).
Tensor Tensor::to(Device device, bool non_blocking) const {
  return device == this->device() ? *this : ToCopy::apply(*this, dtype(), device, non_blocking, true);
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
  copy_stub.kernel(kCPU)(out, *this, false);
  return out;
}

bool Tensor::is_pinned() const {
  const Allocator* pinned = pinned_host_allocator();
  return pinned != nullptr && checked_storage()->allocator() == pinned;
}

}  // namespace minidl
