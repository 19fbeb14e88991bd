// GradScaler's CUDA kernels (ops/cuda/amp.cu) against the CPU ones, bit for
// bit, and the torch.amp.GradScaler golden replayed on the GPU. Without a
// device: "skipped: no CUDA device (...)", exit 77 (tests/cuda_test.h).
#include <limits>
#include <vector>

#include "minidl/core/cuda.h"
#include "minidl/ops/amp.h"
#include "tests/cuda_test.h"
#include "tests/grad_scaler_replay.h"
#include "tests/test_util.h"

using namespace minidl;
using namespace minidl::testing;

MINIDL_CUDA_TEST_REQUIRES_DEVICE();

// The CUDA kernels (ops/cuda/amp.cu) against the CPU ones, bit for bit, and
// the golden replay on the GPU. Reports itself skipped without a device.
TEST_CASE("GradScaler and its kernels on CUDA equal the CPU") {
  const Device gpu("cuda");
  for (DType dtype : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    CAPTURE(dtype_name(dtype));
    manual_seed(3);
    std::vector<double> v = (randn({100003}, kFloat64) * 1000.0).to_vector<double>();
    v[77] = std::numeric_limits<double>::infinity();
    v[100000] = std::numeric_limits<double>::quiet_NaN();
    for (bool poisoned : {false, true}) {
      CAPTURE(poisoned);
      std::vector<double> values = v;
      if (!poisoned) values[77] = values[100000] = 1.0;
      const Tensor host = tensor(values).to(dtype), small = randn({5, 3}).to(dtype);
      Tensor dev = host.to(gpu), dev_small = small.to(gpu);
      const Tensor inv = full({}, 1.0 / 3.0), found = zeros({});
      const Tensor dev_found = zeros({}, TensorOptions(kFloat32).device(gpu));
      amp_foreach_non_finite_check_and_unscale_({host, small}, found, inv);
      amp_foreach_non_finite_check_and_unscale_({dev, dev_small}, dev_found, inv.to(gpu));
      CHECK(dev_found.item<double>() == found.item<double>());
      CHECK(found.item<double>() == (poisoned ? 1.0 : 0.0));
      CHECK(same(dev.to_vector<double>(), host.to_vector<double>()));
      CHECK(same(dev_small.to_vector<double>(), small.to_vector<double>()));
    }
  }
  for (float found_inf : {0.0f, 1.0f}) {
    for (int64_t start : {0, 1}) {
      Tensor scale = full({}, 3000.0), tracker = full({}, static_cast<double>(start), kInt64);
      Tensor dev_scale = scale.to(gpu), dev_tracker = tracker.to(gpu);
      amp_update_scale_(scale, tracker, full({}, found_inf), 3.0, 0.3, 2);
      amp_update_scale_(dev_scale, dev_tracker, full({}, found_inf).to(gpu), 3.0, 0.3, 2);
      CHECK(dev_scale.item<double>() == scale.item<double>());
      CHECK(dev_tracker.item<int64_t>() == tracker.item<int64_t>());
    }
  }
  for (const json& c : goldens().at("cases")) replay(c, gpu);
}
