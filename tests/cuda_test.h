// Skip logic of the GPU tests (tests/test_cuda_*.cpp: ctest label `cuda`,
// SKIP_RETURN_CODE 77, tests/CMakeLists.txt). Put one line at namespace scope:
//   MINIDL_CUDA_TEST_REQUIRES_DEVICE();
// Before doctest's main runs, without a usable device it prints
//   skipped: no CUDA device (<cuda::unavailable_reason()>)
// and exits 77, so ctest reports the test skipped, never passed. In a build
// without CUDA the reason is "minidl was built without CUDA: ...".
//
// A test file that also checks the CPU-only behaviour writes instead
//   MINIDL_CUDA_TEST_REQUIRES_DEVICE_OR_CPU_BUILD(checks);
// where `checks` (a void() function, may be nullptr) runs where there is no
// device, before the skip: its failure (an exception) exits 1. In a build
// without CUDA the file then runs normally: its GPU cases sit under
// #ifdef MINIDL_WITH_CUDA (defined for test_cuda_* targets of CUDA builds).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <exception>

#include "minidl/core/cuda.h"

namespace minidl::testing {

struct CudaDeviceRequirement {
  using Checks = void (*)();
  explicit CudaDeviceRequirement(bool run_in_cpu_build, Checks checks_without_device = nullptr) {
    if (cuda::is_available()) return;
    if (checks_without_device != nullptr) {
      try {
        checks_without_device();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "FAILED before skipping (checks without a CUDA device): %s\n", e.what());
        std::exit(1);
      }
    }
    if (run_in_cpu_build && !cuda::is_built()) return;
    std::printf("skipped: no CUDA device (%s)\n", cuda::unavailable_reason().c_str());
    std::fflush(stdout);
    std::exit(77);
  }
};

}  // namespace minidl::testing

#define MINIDL_CUDA_TEST_REQUIRES_DEVICE() \
  static const ::minidl::testing::CudaDeviceRequirement minidl_cuda_test_requirement_(false)
#define MINIDL_CUDA_TEST_REQUIRES_DEVICE_OR_CPU_BUILD(checks) \
  static const ::minidl::testing::CudaDeviceRequirement minidl_cuda_test_requirement_(true, checks)
