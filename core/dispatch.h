// Per-op kernel table: one function pointer per device type, filled by
// explicit registration calls (ops/register_kernels.cpp for CPU, the CUDA
// backend's own call for CUDA), never by static initializers a linker can drop.
//
//   // ops/conv2d.h (the family's kernel interface)
//   using Conv2dForwardFn = void(const Conv2dGeometry&, const Tensor& x, ...);
//   extern DispatchStub<Conv2dForwardFn> conv2d_forward_stub;
//   // ops/cpu/conv2d.cpp
//   void register_conv2d_cpu_kernels() { conv2d_forward_stub.set(DeviceType::CPU, conv2d_forward_cpu); }
//   // ops/conv2d.cpp
//   conv2d_forward_stub(x.device())(g, x, w, ...);
//
// Every stub adds itself to a registry at construction (dispatch_stubs()), so
// a test can enumerate all kernels, and the test device (core/test_device.h)
// can mirror every CPU kernel into its own slot.
//
// Calling through stub(device) checks that every Tensor argument is undefined
// or on `device` (argument structs opt in with a for_each_tensor member), so a
// kernel never receives memory from another device. copy, which moves data
// between devices by design, asks for the raw kernel with stub.kernel(device).
#pragma once

#include <concepts>
#include <vector>

#include "minidl/core/check.h"
#include "minidl/core/device.h"
#include "minidl/core/tensor.h"

namespace minidl {

// Registers every built-in kernel once; every stub lookup calls it first, so a
// program that only links the library still has its kernels.
void ensure_kernels_registered();

class DispatchStubBase {
 public:
  explicit DispatchStubBase(const char* op);
  DispatchStubBase(const DispatchStubBase&) = delete;
  DispatchStubBase& operator=(const DispatchStubBase&) = delete;

  const char* op() const { return op_; }
  virtual bool has_kernel(DeviceType type) const = 0;
  // Installs the kernel registered for `from` as the kernel for `to`.
  virtual void mirror(DeviceType from, DeviceType to) = 0;

 protected:
  ~DispatchStubBase() = default;
  [[noreturn]] void fail_missing(Device device) const;
  [[noreturn]] void fail_device(Device device, Device got, int argument) const;

 private:
  const char* op_;
};

// Every stub of the program, in construction order.
const std::vector<DispatchStubBase*>& dispatch_stubs();

namespace detail {

template <class T>
concept HasTensors = requires(const T& t) { t.for_each_tensor([](const Tensor&) {}); };

template <class T>
void visit_tensors(const T& arg, auto&& visit) {
  using U = std::remove_cvref_t<T>;
  if constexpr (std::same_as<U, Tensor>) {
    visit(arg);
  } else if constexpr (HasTensors<U>) {
    arg.for_each_tensor(visit);
  }
}

}  // namespace detail

template <class Fn>
class DispatchStub;

template <class R, class... Args>
class DispatchStub<R(Args...)> final : public DispatchStubBase {
 public:
  using Fn = R(Args...);
  explicit DispatchStub(const char* op) : DispatchStubBase(op) {}

  void set(DeviceType type, Fn* kernel) { table_[static_cast<int>(type)] = kernel; }
  bool has_kernel(DeviceType type) const override { return table_[static_cast<int>(type)] != nullptr; }
  void mirror(DeviceType from, DeviceType to) override {
    table_[static_cast<int>(to)] = table_[static_cast<int>(from)];
  }

  // The kernel for `device`, unchecked; throws if none is registered.
  Fn* kernel(Device device) const {
    ensure_kernels_registered();
    Fn* k = table_[static_cast<int>(device.type)];
    if (k == nullptr) fail_missing(device);
    return k;
  }

  // The kernel for `device`, as a callable that checks its tensor arguments.
  class Checked {
   public:
    Checked(const DispatchStub* stub, Fn* fn, Device device) : stub_(stub), fn_(fn), device_(device) {}
    R operator()(Args... args) const {
      int position = 0;
      auto check = [&](const Tensor& t) {
        if (t.defined() && t.device() != device_) stub_->fail_device(device_, t.device(), position);
      };
      ((detail::visit_tensors(args, check), ++position), ...);
      return fn_(static_cast<Args>(args)...);
    }

   private:
    const DispatchStub* stub_;
    Fn* fn_;
    Device device_;
  };
  Checked operator()(Device device) const { return Checked(this, kernel(device), device); }

 private:
  Fn* table_[kNumDeviceTypes] = {};
};

}  // namespace minidl
