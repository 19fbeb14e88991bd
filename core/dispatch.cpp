#include "minidl/core/dispatch.h"

#include "minidl/core/cuda.h"

namespace minidl {

namespace {

// Function-local so that stubs constructed during static initialization, in
// any order across files, find it constructed.
std::vector<DispatchStubBase*>& registry() {
  static std::vector<DispatchStubBase*> stubs;
  return stubs;
}

}  // namespace

DispatchStubBase::DispatchStubBase(const char* op) : op_(op) { registry().push_back(this); }

const std::vector<DispatchStubBase*>& dispatch_stubs() { return registry(); }

void DispatchStubBase::fail_missing(Device device) const {
  if (device.is_cuda()) {
    if (cuda::is_built()) MINIDL_FAIL(op_, " has no CUDA kernel yet; move the input to the CPU");
    MINIDL_FAIL(op_, " has no CUDA kernel: configure with -DMINIDL_CUDA=ON");
  }
  MINIDL_FAIL(op_, " has no ", device_type_name(device.type), " kernel");
}

void DispatchStubBase::fail_device(Device device, Device got, int argument) const {
  MINIDL_FAIL(op_, ": expected all tensors to be on the same device, but the ", device.str(),
              " kernel got a tensor on ", got.str(), " (argument ", argument, ")");
}

}  // namespace minidl
