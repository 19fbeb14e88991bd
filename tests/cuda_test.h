// Skip logic of the GPU tests (tests/test_cuda_*.cpp: ctest label `cuda`,
// SKIP_RETURN_CODE 77, tests/CMakeLists.txt). Put one line at namespace scope:
//   MINIDL_CUDA_TEST_REQUIRES_DEVICE();
// Before doctest's main runs, without a usable device it prints
//   skipped: no CUDA device (<cuda::unavailable_reason()>)
// and exits 77, so ctest reports the test skipped, never passed. In a build
// without CUDA the reason is "minidl was built without CUDA: ...".
//
// It runs no tensor code: anything before main must not touch the kernel
// tables (globals of other translation units, constructed in an unspecified
// order). A file that checks the no-device behaviour first writes its own
// main (tests/test_cuda_runtime.cpp).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <exception>

#include "minidl/core/cuda.h"

namespace minidl::testing {

struct CudaDeviceRequirement {
  CudaDeviceRequirement() {
    if (cuda::is_available()) return;
    std::printf("skipped: no CUDA device (%s)\n", cuda::unavailable_reason().c_str());
    std::fflush(stdout);
    std::exit(77);
  }
};

}  // namespace minidl::testing

#define MINIDL_CUDA_TEST_REQUIRES_DEVICE() \
  static const ::minidl::testing::CudaDeviceRequirement minidl_cuda_test_requirement_
