// Devices: availability (never throws, never crashes), the current device,
// DeviceGuard, synchronize, and the error check every CUDA call goes through.
#include <cuda_profiler_api.h>

#include <cstring>
#include <mutex>

#include "minidl/core/cuda/runtime.h"

namespace minidl::cuda {

void throw_cuda_error(cudaError_t err, const char* call, const char* op, const char* file, int line) {
  // A sticky error (a kernel fault) stays; any other is cleared so that the
  // next call does not report it again.
  (void)cudaGetLastError();
  const char* base = std::strrchr(file, '/');
  MINIDL_FAIL("CUDA error: ", cudaGetErrorString(err), " (", cudaGetErrorName(err), ") in ", call,
              op ? " while running " : "", op ? op : "", " at ", base ? base + 1 : file, ":", line);
}

namespace {

struct Availability {
  int count = 0;
  std::string reason;  // empty when count > 0
};

// PyTorch's device_count_impl: without a driver cudaGetDeviceCount returns
// cudaErrorInsufficientDriver (35) and may leave the count unset; without a
// GPU cudaErrorNoDevice (100). Either way: 0 devices, error cleared, reason kept.
const Availability& availability() {
  static const Availability a = [] {
    Availability r;
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    (void)cudaGetLastError();
    if (err != cudaSuccess) {
      const char* what = err == cudaErrorInsufficientDriver ? "no CUDA driver"
                         : err == cudaErrorNoDevice         ? "no CUDA device"
                                                            : "CUDA initialization failed";
      r.reason = std::string(what) + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")";
    } else if (count <= 0) {
      r.reason = "no CUDA device: cudaGetDeviceCount found 0 devices";
    } else {
      r.count = count;
    }
    return r;
  }();
  return a;
}

void check_index(int index, const char* op) {
  const Availability& a = availability();
  MINIDL_CHECK(a.count > 0, op, ": CUDA is not available: ", a.reason);
  MINIDL_CHECK(index >= 0 && index < a.count, op, ": invalid device ordinal ", index, " (device_count() is ",
               a.count, ")");
}

}  // namespace

bool is_built() { return true; }

bool is_available() { return availability().count > 0; }
std::string unavailable_reason() { return availability().reason; }
int device_count() { return availability().count; }

int current_device() {
  check_index(0, "cuda::current_device");
  int index = 0;
  MINIDL_CUDA_CHECK(cudaGetDevice(&index));
  return index;
}

void set_device(int index) {
  check_index(index, "cuda::set_device");
  MINIDL_CUDA_CHECK(cudaSetDevice(index));
}

void synchronize(int index) {
  DeviceGuard guard(index < 0 ? current_device() : index);
  MINIDL_CUDA_CHECK_OP(cudaDeviceSynchronize(), "cuda::synchronize");
}

void profiler_start() { MINIDL_CUDA_CHECK_OP(cudaProfilerStart(), "cuda::profiler_start"); }
void profiler_stop() { MINIDL_CUDA_CHECK_OP(cudaProfilerStop(), "cuda::profiler_stop"); }

DeviceGuard::DeviceGuard(Device device) : DeviceGuard(device.is_cuda() ? device.index : -1) {}

DeviceGuard::DeviceGuard(int index) {
  if (index < 0) return;  // not a CUDA device: nothing to change or restore
  check_index(index, "DeviceGuard");
  int previous = 0;
  MINIDL_CUDA_CHECK(cudaGetDevice(&previous));
  if (previous != index) MINIDL_CUDA_CHECK(cudaSetDevice(index));
  previous_ = previous;
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) (void)cudaSetDevice(previous_);  // cheap when unchanged; never throws
}

}  // namespace minidl::cuda
