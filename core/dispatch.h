// Per-op kernel table: one function pointer per device type, filled by
// explicit registration calls (ops/register_kernels.cpp for CPU, the CUDA
// backend's own call for CUDA), never by static initializers a linker can drop.
//
//   // ops/conv2d.cpp
//   DispatchStub<Conv2dForwardFn> conv2d_forward_stub("conv2d");
//   void register_conv2d_cpu_kernels() { conv2d_forward_stub.set(kCPU.type, conv2d_forward_cpu); }
//   ... conv2d_forward_stub(x.device())(x, w, ...);
#pragma once

#include "core/check.h"
#include "core/device.h"

namespace minidl {

// Registers every built-in kernel once; every stub lookup calls it first, so a
// program that only links the library still has its kernels.
void ensure_kernels_registered();

template <class Fn>
class DispatchStub {
 public:
  explicit DispatchStub(const char* op) : op_(op) {}
  DispatchStub(const DispatchStub&) = delete;
  DispatchStub& operator=(const DispatchStub&) = delete;

  void set(DeviceType type, Fn* kernel) { table_[static_cast<int>(type)] = kernel; }

  Fn* operator()(Device device) const {
    ensure_kernels_registered();
    Fn* kernel = table_[static_cast<int>(device.type)];
    if (kernel == nullptr) {
#ifdef MINIDL_WITH_CUDA
      if (device.is_cuda()) MINIDL_FAIL(op_, " has no CUDA kernel yet; move the input to the CPU");
#else
      if (device.is_cuda())
        MINIDL_FAIL(op_, " has no CUDA kernel: configure with -DMINIDL_CUDA=ON");
#endif
      MINIDL_FAIL(op_, " has no ", device_type_name(device.type), " kernel");
    }
    return kernel;
  }
  const char* op() const { return op_; }

 private:
  const char* op_;
  Fn* table_[kNumDeviceTypes] = {};
};

}  // namespace minidl
