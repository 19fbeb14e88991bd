// nn::sliding_window_inference against MONAI's (tests/goldens/sliding_window.json,
// from scripts/make_sliding_window_goldens.py): window starts, Gaussian
// importance maps and whole results with a predictor that depends on the
// window's position; plus properties that need no fixture.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "minidl/core/test_device.h"
#include "minidl/minidl.h"
#include "tests/test_util.h"

using namespace minidl;
using nlohmann::json;
using minidl::testing::allclose;

namespace {

json goldens() {
  std::ifstream in(std::string(MINIDL_GOLDENS_DIR) + "/sliding_window.json");
  REQUIRE(in.good());
  return json::parse(in);
}

// x[i] = sin(0.37 i + 0.1 c) over the flat index, c the channel (as the script).
Tensor golden_input(const std::vector<int64_t>& shape) {
  Tensor x = empty(shape, kFloat32);
  float* v = x.data_ptr<float>();
  int64_t inner = 1;
  for (size_t k = 2; k < shape.size(); ++k) inner *= shape[k];
  for (int64_t i = 0; i < x.numel(); ++i)
    v[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i) + 0.1 * static_cast<double>(i / inner % shape[1])));
  return x;
}

// 2 w + the window's mean (over channels and space): depends on where the window is.
Tensor window_predictor(const Tensor& w) {
  std::vector<int64_t> dims;
  for (int64_t d = 1; d < w.dim(); ++d) dims.push_back(d);
  return w * 2.0 + mean(w, dims, true);
}

double max_abs_diff_to(const Tensor& a, const std::vector<double>& b) {
  const Tensor c = a.to(kCPU).contiguous().to(kFloat64);
  REQUIRE(c.numel() == static_cast<int64_t>(b.size()));
  double m = 0;
  for (int64_t i = 0; i < c.numel(); ++i) m = std::max(m, std::abs(c.data_ptr<double>()[i] - b[static_cast<size_t>(i)]));
  return m;
}

}  // namespace

TEST_CASE("window starts are MONAI's dense_patch_slices") {
  const json g = goldens();  // kept alive for the loop
  for (const json& c : g.at("starts")) {
    CAPTURE(c.dump());
    CHECK(nn::window_starts(c.at("size"), c.at("roi"), c.at("overlap")) == c.at("starts").get<std::vector<int64_t>>());
  }
}

TEST_CASE("Gaussian importance maps are MONAI's compute_importance_map") {
  const json g = goldens();  // kept alive for the loop
  for (const json& m : g.at("importance_maps")) {
    CAPTURE(m.at("patch").dump());
    const Tensor map = nn::importance_map(m.at("patch"), nn::BlendMode::kGaussian, m.at("sigma_scale"));
    CHECK(map.shape() == m.at("patch").get<std::vector<int64_t>>());
    CHECK(max_abs_diff_to(map, m.at("values")) < 1e-6);
  }
  CHECK(allclose(nn::importance_map({3, 4}, nn::BlendMode::kConstant), ones({3, 4}), 0, 0));
}

TEST_CASE("sliding_window_inference equals MONAI's (placement, padding, blending, batching of windows)") {
  const json g = goldens();  // kept alive for the loop
  for (const json& c : g.at("cases")) {
    CAPTURE(c.at("shape").dump());
    CAPTURE(c.at("roi").dump());
    nn::SlidingWindowOptions o;
    o.roi_size = c.at("roi").get<std::vector<int64_t>>();
    o.overlap = c.at("overlap");
    o.mode = c.at("mode") == "gaussian" ? nn::BlendMode::kGaussian : nn::BlendMode::kConstant;
    o.sw_batch_size = c.at("sw_batch_size");
    o.cval = c.at("cval");
    const Tensor x = golden_input(c.at("shape"));
    const Tensor y = nn::sliding_window_inference(x, o, window_predictor);
    CHECK(y.shape() == x.shape());
    CHECK(max_abs_diff_to(y, c.at("output")) < 2e-6);
    // The same windows one at a time, and on the test device.
    o.sw_batch_size = 1;
    CHECK(max_abs_diff_to(nn::sliding_window_inference(x, o, window_predictor), c.at("output")) < 2e-6);
    const Tensor yt = nn::sliding_window_inference(x.to(kTestDevice), o, window_predictor);
    CHECK(yt.device() == kTestDevice);
    CHECK(max_abs_diff_to(yt, c.at("output")) < 2e-6);
  }
}

TEST_CASE("a pointwise predictor gives the whole-input result whatever the windows") {
  manual_seed(3);
  const Tensor x = randn({2, 3, 9, 10, 7}, kFloat64);
  auto f = [](const Tensor& w) { return w * 3.0 - 1.0; };
  for (auto mode : {nn::BlendMode::kConstant, nn::BlendMode::kGaussian})
    for (std::vector<int64_t> roi : {std::vector<int64_t>{4, 4, 4}, {9, 10, 7}, {12, 3, 8}, {1, 1, 1}, {-1, 5, 0}}) {
      CAPTURE(roi[0]);
      nn::SlidingWindowOptions o;
      o.roi_size = roi;
      o.mode = mode;
      o.overlap = 0.5;
      o.sw_batch_size = 7;
      const Tensor y = nn::sliding_window_inference(x, o, f);
      CHECK(y.dtype() == kFloat64);
      CHECK(allclose(y, f(x), 1e-12, 1e-12));
    }
}

TEST_CASE("the output dtype: float32 for 16-bit predictions; no autograd") {
  const Tensor x = randn({1, 1, 6, 6}).requires_grad_(true);
  nn::SlidingWindowOptions o;
  o.roi_size = {4, 4};
  const Tensor y = nn::sliding_window_inference(x, o, [](const Tensor& w) { return w.to(kBFloat16); });
  CHECK(y.dtype() == kFloat32);
  CHECK_FALSE(y.requires_grad());
}

TEST_CASE("bad arguments are refused with what was expected") {
  const Tensor x = zeros({1, 1, 8, 8});
  auto id = [](const Tensor& w) { return w; };
  nn::SlidingWindowOptions o;
  o.roi_size = {4};
  CHECK_THROWS_WITH_AS(nn::sliding_window_inference(x, o, id),
                       doctest::Contains("expected roi_size with 2 entries (one per spatial dim of the input of shape [1, 1, 8, 8]), got [4]"),
                       Error);
  o.roi_size = {4, 4};
  o.overlap = 1.0;
  CHECK_THROWS_WITH_AS(nn::sliding_window_inference(x, o, id), doctest::Contains("expected overlap in [0, 1), got 1"),
                       Error);
  o.overlap = 0.25;
  o.sw_batch_size = 0;
  CHECK_THROWS_WITH_AS(nn::sliding_window_inference(x, o, id),
                       doctest::Contains("expected sw_batch_size >= 1, got 0"), Error);
  o.sw_batch_size = 1;
  CHECK_THROWS_WITH_AS(nn::sliding_window_inference(zeros({0, 1, 8, 8}), o, id),
                       doctest::Contains("expected at least one image in the batch, got shape [0, 1, 8, 8]"), Error);
  CHECK_THROWS_WITH_AS(nn::sliding_window_inference(zeros({8, 8}), o, id),
                       doctest::Contains("expected an (N, C, *spatial) input"), Error);
  CHECK_THROWS_WITH_AS(nn::sliding_window_inference(x, o, [](const Tensor& w) { return w.narrow(2, 0, 2); }),
                       doctest::Contains("expected the predictor to map windows of shape [1, 1, 4, 4] to (1, C_out, 4, 4], got [1, 1, 2, 4]"),
                       Error);
  o.mode = nn::BlendMode::kGaussian;
  o.sigma_scale = 0;
  CHECK_THROWS_WITH_AS(nn::sliding_window_inference(x, o, id), doctest::Contains("expected sigma_scale > 0, got 0"),
                       Error);
}

TEST_CASE("options by designated initializers, as in the README") {
  const Tensor v = ones({1, 1, 8, 8, 8});
  const Tensor y = nn::sliding_window_inference(
      v, {.roi_size = {4, 4, 4}, .overlap = 0.5, .mode = nn::BlendMode::kGaussian}, [](const Tensor& w) { return w; });
  CHECK(allclose(y, v, 1e-6, 1e-6));
}
