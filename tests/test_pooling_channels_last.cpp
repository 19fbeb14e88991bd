// Pooling on channels-last (NHWC) inputs (ops/cpu/pooling_channels_last.cpp):
// every 2-D pool (tests/pooling_channels_last_cases.h) on a channels-last
// input gives the NCHW input's values, argmax indices and input gradients bit
// for bit (global averages of float64 to rounding), in float32, float64,
// float16 and bfloat16, with channel counts below, at and past one 64-channel
// block; its output, indices and gradient stay channels-last; NaN, -inf and
// ties pick the planar kernels' index. A float64 gradient check, the test
// device, and the layouts that stay NCHW.

#include "minidl/core/test_device.h"
#include "minidl/minidl.h"
#include "tests/device_test_util.h"
#include "tests/pooling_channels_last_cases.h"
#include "tests/test_util.h"

using namespace minidl;
using minidl::testing::same_values;

namespace {
constexpr MemoryFormat kCL = MemoryFormat::ChannelsLast;
}  // namespace

TEST_CASE("channels-last pooling equals NCHW pooling: values, indices, gradients, every dtype") {
  for (DType dtype : {kFloat32, kFloat64, kFloat16, kBFloat16})
    for (int64_t channels : {3, 64, 70}) minidl::testing::check_pool_cases(dtype, channels, kCPU, 0.0);
}

TEST_CASE("channels-last pooling on the test device: the same, and no tensor drops to the CPU") {
  register_test_device();
  const Device dev(DeviceType::Test, 0);
  minidl::testing::check_pool_cases(kFloat32, 5, dev, 0.0);
  const Tensor x = randn({2, 6, 8, 8}).to(dev).contiguous(kCL);
  const int64_t made = minidl::testing::cpu_storages_made([&] {
    (max_pool2d(x, {3, 3}, {2, 2}, {1, 1}) + adaptive_avg_pool2d(x, {4, 4})).sum().item<float>();
  });
  CHECK(made == 1);  // the item() copy only
}

TEST_CASE("gradient check (float64) through channels-last max, avg and adaptive pooling") {
  manual_seed(41);
  const Tensor x = randn({2, 3, 6, 5}, TensorOptions(kFloat64).requires_grad());
  minidl::testing::check_gradients(
      [](const std::vector<Tensor>& in) {
        const Tensor xc = in[0].contiguous(kCL);
        const Tensor m = max_pool2d(xc, {3, 3}, {2, 2}, {1, 1});
        const Tensor a = avg_pool2d(xc, {2, 3}, {1, 2}, {1, 1}, false, false);
        const Tensor g = adaptive_avg_pool2d(xc, {2, 2}) + adaptive_max_pool2d(xc, {2, 2});
        REQUIRE(m.is_contiguous(kCL));
        REQUIRE(a.is_contiguous(kCL));
        return m.sum({2, 3}) + a.mean({2, 3}) * 2.0 + g.sum({2, 3});
      },
      {x});
}

TEST_CASE("pooling keeps NCHW where channels-last does not apply") {
  const Tensor x = randn({2, 3, 6, 6});
  CHECK(max_pool2d(x, {2, 2}).is_contiguous());
  CHECK(max_pool2d(x[0], {2, 2}).is_contiguous());  // unbatched (C, H, W)
  // One channel: both layouts at once; PyTorch's suggestion (and ours) is NCHW.
  const Tensor one = randn({2, 1, 6, 6}).contiguous(kCL);
  CHECK(one.suggest_memory_format() == MemoryFormat::Contiguous);
  CHECK(same_values(avg_pool2d(one, {2, 2}), avg_pool2d(one.contiguous(), {2, 2})));
  // A channels-last view that is not dense (columns 2..9 of 12) still pools as NHWC, from a copy.
  const Tensor wide = randn({2, 4, 6, 12}).contiguous(kCL);
  const Tensor narrowed = wide.narrow(3, 2, 8);
  REQUIRE(narrowed.suggest_memory_format() == kCL);
  const Tensor y = max_pool2d(narrowed, {2, 2});
  CHECK(y.is_contiguous(kCL));
  CHECK(same_values(y, max_pool2d(narrowed.contiguous(), {2, 2})));
}
