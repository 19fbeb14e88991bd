// Helpers of the tests that run on the test device (core/test_device.h).
#pragma once

#include <functional>
#include <vector>

#include "minidl/core/storage.h"
#include "minidl/core/tensor.h"

namespace minidl::testing {

// CPU storages created so far; a device computation must not add any.
inline int64_t cpu_storages() { return Storage::created(DeviceType::CPU); }

// CPU storages f() creates.
inline int64_t cpu_storages_made(const std::function<void()>& f) {
  const int64_t before = cpu_storages();
  f();
  return cpu_storages() - before;
}

// Copies of `inputs` on `device` as fresh leaves (requires_grad kept).
inline std::vector<Tensor> leaves_on(const std::vector<Tensor>& inputs, Device device) {
  std::vector<Tensor> out;
  for (const Tensor& t : inputs) {
    Tensor c = t.to(device).clone().detach();
    if (t.requires_grad()) c.requires_grad_(true);
    out.push_back(c);
  }
  return out;
}

}  // namespace minidl::testing
