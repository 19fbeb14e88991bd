// Move-only owner of one descriptor of cuDNN's graph ("backend") API, with
// typed attribute setters. The destructor never throws. CUDA build only.
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <utility>

#include "minidl/core/cuda/library_handles.h"  // MINIDL_CUDNN_CHECK

namespace minidl::cudnn_conv {

class BackendDescriptor {
 public:
  BackendDescriptor() = default;
  explicit BackendDescriptor(cudnnBackendDescriptorType_t type) {
    MINIDL_CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &d_));
  }
  ~BackendDescriptor() {
    if (d_ != nullptr) (void)cudnnBackendDestroyDescriptor(d_);
  }
  BackendDescriptor(BackendDescriptor&& o) noexcept : d_(std::exchange(o.d_, nullptr)) {}
  BackendDescriptor& operator=(BackendDescriptor&& o) noexcept {
    if (this != &o) {
      if (d_ != nullptr) (void)cudnnBackendDestroyDescriptor(d_);
      d_ = std::exchange(o.d_, nullptr);
    }
    return *this;
  }
  BackendDescriptor(const BackendDescriptor&) = delete;
  BackendDescriptor& operator=(const BackendDescriptor&) = delete;

  cudnnBackendDescriptor_t get() const { return d_; }

  // Sets `count` values of `type` (cuDNN reads them during the call).
  template <class T>
  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, const T* values, int64_t count = 1) {
    MINIDL_CUDNN_CHECK(cudnnBackendSetAttribute(d_, name, type, count, values));
  }
  void set_descriptor(cudnnBackendAttributeName_t name, const BackendDescriptor& value) {
    const cudnnBackendDescriptor_t v = value.get();
    set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, &v);
  }
  // Not checked: an engine configuration that does not apply fails here, and
  // the caller moves on to the next.
  cudnnStatus_t finalize() { return cudnnBackendFinalize(d_); }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

}  // namespace minidl::cudnn_conv
