// cuda::set_sync_debug_mode on a CUDA device: the blocking copies between
// host and GPU are the operations counted (non_blocking ones and kernels are
// not), and a training step on the GPU (tests/sync_debug_recipes.h, the same
// recipes tests/test_sync_debug.cpp runs on the test device) makes the host
// wait nowhere, so CUDA-only code paths (cuDNN, cuBLAS, the norm and
// optimizer kernels) are held to issue 14's promise too.
//
// Passed on an H100 (2026-11-27 18:39, scripts/gpu-check.sh all). Needs a CUDA
// device: without one it prints "skipped: no CUDA device (<reason>)" and exits 77.
#include "minidl/core/cuda.h"
#include "minidl/core/sync_debug.h"
#include "minidl/minidl.h"
#include "tests/cuda_test.h"
#include "tests/sync_debug_recipes.h"
#include "tests/test_util.h"

using namespace minidl;
using minidl::testing::SyncDebugScope;
using minidl::testing::syncs_of;

MINIDL_CUDA_TEST_REQUIRES_DEVICE();

namespace {
const Device kGpu(DeviceType::CUDA, 0);
}

TEST_CASE("sync debug mode on CUDA: blocking copies between host and GPU synchronize, kernels do not") {
  const Tensor d = randn({64, 32}).to(kGpu);
  CHECK(syncs_of([&] { (void)d.sum().item<float>(); }) == 1);
  CHECK(syncs_of([&] { (void)d.to(kCPU); }) == 1);
  const Tensor h = randn({64, 32});
  CHECK(syncs_of([&] { (void)h.to(kGpu); }) == 1);
  CHECK(syncs_of([&] { (void)h.pin_memory().to(kGpu, /*non_blocking=*/true); }) == 0);
  CHECK(syncs_of([&] { (void)matmul(d, d.t()).relu().sum(); }) == 0);

  SyncDebugScope error("error");
  CHECK_THROWS_WITH_AS((void)d.sum().item<float>(),
                       doctest::Contains("called a synchronizing CUDA operation (a copy to host memory"), Error);
}

TEST_CASE("sync debug mode on CUDA: a training step on the GPU makes the host wait nowhere") {
  minidl::testing::check_training_steps_make_no_sync(kGpu);
}
