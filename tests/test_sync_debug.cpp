// cuda::set_sync_debug_mode (core/sync_debug.h) on the test device: which
// operations make the host wait, and issue 14's promise that a training step
// makes none (forward, loss, backward, optimizer step, gradient clipping, lr
// schedule), checked by running whole steps with the mode at "error".
#include "minidl/core/sync_debug.h"
#include "minidl/minidl.h"
#include "tests/sync_debug_recipes.h"
#include "tests/test_util.h"

using namespace minidl;

using minidl::testing::SyncDebugScope;
using minidl::testing::syncs_of;

TEST_CASE("sync debug mode: PyTorch's values, names and errors") {
  CHECK(cuda::get_sync_debug_mode() == 0);
  cuda::set_sync_debug_mode("warn");
  CHECK(cuda::get_sync_debug_mode() == 1);
  cuda::set_sync_debug_mode(2);
  CHECK(cuda::get_sync_debug_mode() == 2);
  cuda::set_sync_debug_mode("default");
  CHECK(cuda::get_sync_debug_mode() == 0);
  CHECK_THROWS_WITH_AS(cuda::set_sync_debug_mode("loud"), doctest::Contains("expected one of `default`, `warn`, `error`"),
                       Error);
  CHECK_THROWS_WITH_AS(cuda::set_sync_debug_mode(3), doctest::Contains("invalid value of debug_mode"), Error);
  CHECK(cuda::get_sync_debug_mode() == 0);
}

TEST_CASE("sync debug mode: blocking copies between host and device synchronize, the rest does not") {
  const Tensor d = randn({4, 3}).to(kTestDevice);
  // Each way the host reads a device tensor is one synchronizing copy.
  CHECK(syncs_of([&] { (void)d.sum().item<float>(); }) == 1);
  CHECK(syncs_of([&] { (void)d.to(kCPU); }) == 1);
  CHECK(syncs_of([&] { (void)d.to_vector<float>(); }) == 1);
  CHECK(syncs_of([&] { (void)empty({4, 3}).copy_(d); }) == 1);
  // Blocking copies to the device too; non_blocking ones and device work not.
  const Tensor h = randn({4, 3});
  CHECK(syncs_of([&] { (void)h.to(kTestDevice); }) == 1);
  CHECK(syncs_of([&] { (void)h.to(kTestDevice, /*non_blocking=*/true); }) == 0);
  CHECK(syncs_of([&] { (void)d.to(kCPU, /*non_blocking=*/true); }) == 0);
  CHECK(syncs_of([&] { (void)matmul(d, d.t()).relu().sum(); }) == 0);
  CHECK(syncs_of([&] { (void)d.to(Device(DeviceType::Test, 1)); }) == 0);  // device to device
  CHECK(syncs_of([&] { (void)h.sum().item<float>(); }) == 0);               // all on the CPU

  SyncDebugScope error("error");
  CHECK_THROWS_WITH_AS((void)d.sum().item<float>(),
                       doctest::Contains("called a synchronizing test:0 operation (a copy to host memory"), Error);
  CHECK_THROWS_WITH_AS((void)h.to(kTestDevice), doctest::Contains("a blocking copy from host memory"), Error);
  CHECK_NOTHROW((void)h.to(kTestDevice, /*non_blocking=*/true));
}

TEST_CASE("sync debug mode: a training step on the device makes the host wait nowhere") {
  minidl::testing::check_training_steps_make_no_sync(kTestDevice);
}
