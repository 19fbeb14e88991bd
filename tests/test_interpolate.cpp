// interpolate and nn::Upsample: values against the source-coordinate formulas
// written out here, corner and identity properties, gradient checks for every
// mode on odd shapes, float32 on the parallel path, PyTorch's error messages,
// and a UNet skip connection (pool -> upsample -> cat along channels).
#include <cmath>

#include "tests/test_util.h"

using namespace minidl;
using minidl::testing::allclose;
using minidl::testing::check_gradients;

namespace {

Tensor random_input(const Shape& shape, uint64_t seed) {
  manual_seed(seed);
  return randn(shape, kFloat64).requires_grad_();
}

// Source coordinate of output o along one dim (PyTorch's documented formulas).
struct Src {
  int64_t i0, i1;
  double l1;
};

Src linear_src(int64_t o, int64_t in, int64_t out, bool align_corners, double scale_factor) {
  if (in == out) return {o, o, 0.0};
  double src;
  if (align_corners) {
    src = out > 1 ? static_cast<double>(o) * static_cast<double>(in - 1) / static_cast<double>(out - 1) : 0.0;
  } else {
    const double ratio = scale_factor > 0 ? 1.0 / scale_factor : static_cast<double>(in) / static_cast<double>(out);
    src = std::max(0.0, (static_cast<double>(o) + 0.5) * ratio - 0.5);
  }
  const int64_t i0 = std::min(static_cast<int64_t>(std::floor(src)), in - 1);
  return {i0, std::min(i0 + 1, in - 1), std::min(src - static_cast<double>(i0), 1.0)};
}

// PyTorch computes the nearest scale in float; so does this reference.
int64_t nearest_src(int64_t o, int64_t in, int64_t out, bool exact) {
  const float scale = static_cast<float>(in) / static_cast<float>(out);
  const float at = exact ? (static_cast<float>(o) + 0.5f) * scale : static_cast<float>(o) * scale;
  return std::min(static_cast<int64_t>(std::floor(at)), in - 1);
}

// Resamples planes x (D, H, W) to out by the formulas above; size-given (no scale factor).
std::vector<double> ref_resample(const std::vector<double>& x, int64_t planes, Size3 in, Size3 out,
                                 const std::string& mode, bool align_corners) {
  std::vector<double> y;
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t d = 0; d < out[0]; ++d)
      for (int64_t h = 0; h < out[1]; ++h)
        for (int64_t w = 0; w < out[2]; ++w) {
          const int64_t o[3] = {d, h, w};
          auto at = [&](int64_t a, int64_t b, int64_t c) {
            return x[static_cast<size_t>(((p * in[0] + a) * in[1] + b) * in[2] + c)];
          };
          if (mode == "nearest" || mode == "nearest-exact") {
            int64_t s[3];
            for (int i = 0; i < 3; ++i) s[i] = nearest_src(o[i], in[i], out[i], mode == "nearest-exact");
            y.push_back(at(s[0], s[1], s[2]));
            continue;
          }
          Src s[3];
          for (int i = 0; i < 3; ++i) s[i] = linear_src(o[i], in[i], out[i], align_corners, 0.0);
          double v = 0;
          for (int a = 0; a < 2; ++a)
            for (int b = 0; b < 2; ++b)
              for (int c = 0; c < 2; ++c) {
                const double wgt = (a ? s[0].l1 : 1 - s[0].l1) * (b ? s[1].l1 : 1 - s[1].l1) *
                                   (c ? s[2].l1 : 1 - s[2].l1);
                v += wgt * at(a ? s[0].i1 : s[0].i0, b ? s[1].i1 : s[1].i0, c ? s[2].i1 : s[2].i0);
              }
          y.push_back(v);
        }
  return y;
}

void check_values(const Tensor& got, const std::vector<double>& want, double tol = 1e-12) {
  const std::vector<double> v = got.to_vector<double>();
  REQUIRE(v.size() == want.size());
  for (size_t i = 0; i < v.size(); ++i)
    CHECK_MESSAGE(std::abs(v[i] - want[i]) <= tol * (1 + std::abs(want[i])), "element ", i, ": ", v[i], " vs ",
                  want[i]);
}

InterpolateOptions by_size(std::vector<int64_t> size, std::string mode, std::optional<bool> align = std::nullopt) {
  return {.size = std::move(size), .mode = std::move(mode), .align_corners = align};
}

InterpolateOptions by_scale(std::vector<double> scale, std::string mode, std::optional<bool> align = std::nullopt) {
  return {.scale_factor = std::move(scale), .mode = std::move(mode), .align_corners = align};
}

}  // namespace

TEST_CASE("interpolate matches the source-coordinate formulas for every mode and rank") {
  struct Case {
    Shape x;
    std::vector<int64_t> size;
    std::string mode;
  };
  const Case cases[] = {
      {{2, 3, 5}, {9}, "nearest"},           {{2, 3, 7}, {3}, "nearest"},        {{2, 3, 5, 6}, {7, 4}, "nearest"},
      {{2, 2, 3, 4, 5}, {5, 3, 7}, "nearest"}, {{2, 3, 5, 6}, {7, 4}, "nearest-exact"},
      {{2, 2, 3, 4, 5}, {6, 8, 3}, "nearest-exact"}, {{2, 3, 5}, {9}, "linear"}, {{2, 3, 9}, {4}, "linear"},
      {{2, 3, 5, 6}, {7, 4}, "bilinear"},    {{2, 3, 5, 6}, {1, 11}, "bilinear"},
      {{2, 2, 3, 4, 5}, {5, 3, 7}, "trilinear"}, {{1, 2, 3, 4, 5}, {3, 8, 2}, "trilinear"},
  };
  for (const Case& c : cases) {
    const std::string what = c.mode + " " + shape_str(c.x) + " -> " + shape_str(c.size);
    CAPTURE(what);
    const Tensor x = random_input(c.x, 1);
    Size3 in{1, 1, 1}, out{1, 1, 1};
    const size_t nd = c.size.size();
    for (size_t i = 0; i < nd; ++i) {
      in[3 - nd + i] = c.x[2 + i];
      out[3 - nd + i] = c.size[i];
    }
    const std::vector<bool> aligns = c.mode.rfind("nearest", 0) == 0 ? std::vector<bool>{false}
                                                                      : std::vector<bool>{false, true};
    for (bool align : aligns) {
      CAPTURE(align);
      const std::optional<bool> ac = c.mode.rfind("nearest", 0) == 0 ? std::nullopt : std::optional<bool>(align);
      const Tensor y = interpolate(x, by_size(c.size, c.mode, ac));
      Shape want_shape{c.x[0], c.x[1]};
      for (int64_t s : c.size) want_shape.push_back(s);
      CHECK(y.shape() == want_shape);
      check_values(y, ref_resample(x.to_vector<double>(), c.x[0] * c.x[1], in, out, c.mode, align));
    }
  }
}

TEST_CASE("interpolate: scale_factor feeds PyTorch's source scale, identity and corners") {
  const Tensor x = random_input({2, 3, 5, 6}, 2);
  // scale_factor 2 with no align: the same as size 2x (1/scale == in/out).
  CHECK(allclose(interpolate(x, by_scale({2.0}, "bilinear")), interpolate(x, by_size({10, 12}, "bilinear")), 0, 1e-14));
  // A non-exact scale uses 1/scale, not in/out: output size floor(5 * 1.5) = 7 but ratio 1/1.5.
  const Tensor y = interpolate(x, by_scale({1.5, 1.0}, "bilinear"));
  REQUIRE(y.shape() == Shape{2, 3, 7, 6});
  const std::vector<double> xv = x.to_vector<double>(), yv = y.to_vector<double>();
  for (int64_t oh = 0; oh < 7; ++oh) {
    const Src s = linear_src(oh, 5, 7, false, 1.5);
    const double want = (1 - s.l1) * xv[static_cast<size_t>(s.i0 * 6 + 2)] + s.l1 * xv[static_cast<size_t>(s.i1 * 6 + 2)];
    CHECK(yv[static_cast<size_t>(oh * 6 + 2)] == doctest::Approx(want).epsilon(1e-13));
  }
  // recompute_scale_factor: the same as asking for the size.
  InterpolateOptions r = by_scale({1.5, 1.0}, "bilinear");
  r.recompute_scale_factor = true;
  CHECK(allclose(interpolate(x, r), interpolate(x, by_size({7, 6}, "bilinear")), 0, 0));
  // Same size: identity, every mode.
  for (const std::string mode : {"nearest", "nearest-exact"}) CHECK(allclose(interpolate(x, by_scale({1.0}, mode)), x, 0, 0));
  CHECK(allclose(interpolate(x, by_size({5, 6}, "bilinear", true)), x, 0, 0));
  // align_corners keeps the corner values.
  const Tensor a = interpolate(x, by_size({9, 13}, "bilinear", true));
  for (auto [h, w, oh, ow] : {std::array<int64_t, 4>{0, 0, 0, 0}, {4, 5, 8, 12}, {0, 5, 0, 12}, {4, 0, 8, 0}})
    CHECK(a.select(0, 1).select(0, 2).select(0, oh).select(0, ow).item<double>() ==
          doctest::Approx(x.select(0, 1).select(0, 2).select(0, h).select(0, w).item<double>()).epsilon(1e-14));
  // Nearest x2 repeats each element twice along each dim.
  const Tensor n = interpolate(x, by_scale({2.0}, "nearest"));
  CHECK(allclose(n.narrow(2, 0, 1).narrow(3, 0, 2), x.narrow(2, 0, 1).narrow(3, 0, 1).expand({2, 3, 1, 2}), 0, 0));
}

TEST_CASE("interpolate gradients match finite differences") {
  struct Case {
    Shape x;
    InterpolateOptions o;
  };
  const Case cases[] = {
      {{2, 2, 5}, by_size({8}, "nearest")},
      {{2, 2, 7}, by_scale({0.6}, "nearest")},
      {{1, 2, 4, 5}, by_size({7, 3}, "nearest")},
      {{1, 2, 4, 5}, by_size({7, 3}, "nearest-exact")},
      {{1, 2, 3, 4, 3}, by_scale({2.0}, "nearest")},
      {{2, 2, 5}, by_size({8}, "linear", false)},
      {{2, 2, 5}, by_size({3}, "linear", true)},
      {{1, 2, 4, 5}, by_scale({2.0}, "bilinear", false)},
      {{1, 2, 4, 5}, by_size({7, 3}, "bilinear", true)},
      {{1, 2, 4, 5}, by_scale({1.5, 0.7}, "bilinear", false)},
      {{1, 2, 3, 4, 3}, by_scale({2.0}, "trilinear", false)},
      {{1, 2, 3, 4, 3}, by_size({4, 3, 5}, "trilinear", true)},
      {{1, 1, 3, 4, 3}, by_size({1, 6, 2}, "trilinear", false)},
  };
  for (const Case& c : cases) {
    const std::string what = c.o.mode + " " + shape_str(c.x);
    CAPTURE(what);
    check_gradients([&](const std::vector<Tensor>& in) { return interpolate(in[0], c.o); }, {random_input(c.x, 3)});
  }
}

TEST_CASE("float32 trilinear agrees with float64, also on the parallel path") {
  const Tensor x64 = random_input({2, 4, 6, 8, 8}, 4);
  const Tensor x32 = x64.to(kFloat32);
  for (const std::string mode : {"nearest", "trilinear"}) {
    CAPTURE(mode);
    const InterpolateOptions o = by_scale({2.0}, mode, mode == "nearest" ? std::nullopt : std::optional<bool>(false));
    const Tensor y64 = interpolate(x64, o), y32 = interpolate(x32, o);
    CHECK(y32.dtype() == kFloat32);
    CHECK(allclose(y32, y64, 1e-5, 1e-5));
    // Backward: every input's gradient is the sum of its weights, the same for both precisions.
    Tensor a = x64.detach().requires_grad_(), b = x32.detach().requires_grad_();
    interpolate(a, o).sum().backward();
    interpolate(b, o).sum().backward();
    CHECK(allclose(b.grad(), a.grad(), 1e-5, 1e-5));
    double total = 0;
    for (double g : a.grad().to_vector<double>()) total += g;
    CHECK(total == doctest::Approx(static_cast<double>(y64.numel())).epsilon(1e-12));  // weights sum to 1
  }
}

TEST_CASE("interpolate errors use PyTorch's wording") {
  const Tensor x4 = zeros({2, 3, 5, 5}), x5 = zeros({2, 3, 4, 5, 5});
  CHECK_THROWS_CONTAINS(interpolate(x4, by_scale({2.0}, "nearest", true)),
                        "align_corners option can only be set with the interpolating modes: linear | bilinear | "
                        "bicubic | trilinear");
  CHECK_THROWS_CONTAINS(interpolate(x4, {.size = {3}, .scale_factor = {2.0}}),
                        "only one of size or scale_factor should be defined");
  CHECK_THROWS_CONTAINS(interpolate(x4, {}), "either size or scale_factor should be defined");
  CHECK_THROWS_CONTAINS(interpolate(x4, by_size({3, 3, 3}, "nearest")),
                        "Input and output must have the same number of spatial dimensions, but got input with spatial "
                        "dimensions of [5, 5] and output size of (3, 3, 3).");
  CHECK_THROWS_CONTAINS(interpolate(x4, by_scale({2, 2, 2}, "nearest")),
                        "Input and scale_factor must have the same number of spatial dimensions");
  CHECK_THROWS_CONTAINS(interpolate(zeros({1, 2, 3}), by_scale({2.0}, "bilinear")),
                        "Got 3D input, but bilinear mode needs 4D input");
  CHECK_THROWS_CONTAINS(interpolate(x5, by_scale({2.0}, "bilinear")), "Got 5D input, but bilinear mode needs 4D input");
  CHECK_THROWS_CONTAINS(interpolate(x4, by_scale({2.0}, "trilinear")), "Got 4D input, but trilinear mode needs 5D input");
  CHECK_THROWS_CONTAINS(interpolate(x4, by_scale({2.0}, "linear")), "Got 4D input, but linear mode needs 3D input");
  CHECK_THROWS_CONTAINS(interpolate(zeros({2, 3}), by_scale({2.0}, "nearest")),
                        "Input Error: Only 3D, 4D and 5D input Tensors supported (got 2D) for the modes: nearest | "
                        "linear | bilinear | bicubic | trilinear | lanczos | area | nearest-exact (got nearest)");
  CHECK_THROWS_CONTAINS(interpolate(x4, by_scale({2.0}, "nearst")), "(got 4D) for the modes");
  CHECK_THROWS_CONTAINS(interpolate(x4, by_scale({2.0}, "bicubic")), "mode 'bicubic' is not implemented in minidl");
  CHECK_THROWS_CONTAINS(interpolate(x4, by_size({0, 3}, "nearest")),
                        "Input and output sizes should be greater than 0, but got input (H: 5, W: 5) output (H: 0, W: 3)");
  CHECK_THROWS_CONTAINS(interpolate(x5, by_size({0, 3, 3}, "trilinear")),
                        "but got input (D: 4, H: 5, W: 5) output (D: 0, H: 3, W: 3)");
  CHECK_THROWS_CONTAINS(interpolate(zeros({1, 2, 3}), by_size({0}, "linear")),
                        "but got input (W: 3) and output (W: 0)");
  CHECK_THROWS_CONTAINS(interpolate(x4, by_scale({0.1}, "nearest")), "output (H: 0, W: 0)");
  CHECK_THROWS_CONTAINS(interpolate(zeros({1, 2, 0, 3}), by_size({2, 2}, "bilinear")), "input (H: 0, W: 3)");
  InterpolateOptions r = by_size({3, 3}, "nearest");
  r.recompute_scale_factor = true;
  CHECK_THROWS_CONTAINS(interpolate(x4, r), "recompute_scale_factor is not meaningful with an explicit size.");
  CHECK_THROWS_CONTAINS(interpolate(zeros({1, 2, 3, 3}, kInt64), by_size({2, 2}, "bilinear")),
                        "expected a floating point input, got int64");
  // An empty batch is fine, as in PyTorch.
  CHECK(interpolate(zeros({0, 2, 3, 3}), by_size({2, 2}, "bilinear")).shape() == Shape{0, 2, 2, 2});
}

TEST_CASE("nn::Upsample: PyTorch's defaults and repr") {
  const Tensor x = random_input({2, 3, 3, 4, 5}, 5);
  CHECK(allclose(nn::Upsample(nn::UpsampleOptions().scale_factor({2}))(x), interpolate(x, by_scale({2.0}, "nearest")),
                 0, 0));
  CHECK(allclose(nn::Upsample(nn::UpsampleOptions().scale_factor({2}).mode("trilinear").align_corners(true))(x),
                 interpolate(x, by_scale({2.0}, "trilinear", true)), 0, 0));
  auto repr = [](const nn::Module& m) { return m.name() + "(" + m.extra_repr() + ")"; };
  CHECK(repr(*nn::Upsample(nn::UpsampleOptions().scale_factor({2}))) == "Upsample(scale_factor=2.0, mode='nearest')");
  CHECK(repr(*nn::Upsample(nn::UpsampleOptions().size({3, 4}).mode("bilinear"))) ==
        "Upsample(size=(3, 4), mode='bilinear')");
  CHECK(repr(*nn::Upsample(nn::UpsampleOptions().scale_factor({2.5}).mode("trilinear").align_corners(true))) ==
        "Upsample(scale_factor=2.5, mode='trilinear')");
  CHECK(repr(*nn::Upsample(nn::UpsampleOptions().scale_factor({2, 3}))) == "Upsample(scale_factor=(2.0, 3.0), mode='nearest')");
  CHECK_THROWS_CONTAINS(nn::Upsample(nn::UpsampleOptions().scale_factor({2}).align_corners(true))(x),
                        "align_corners option can only be set with the interpolating modes");
}

TEST_CASE("UNet skip connection: pool, upsample and cat along channels, with gradients") {
  // decoder input = cat(upsample(pool(x)), x) along channels, in 3-D and 2-D.
  check_gradients(
      [](const std::vector<Tensor>& in) {
        const Tensor down = max_pool3d(in[0], {2, 2, 2});
        const Tensor up = interpolate(down, by_scale({2.0}, "trilinear", false));
        return cat({up, in[0] * in[1]}, 1);
      },
      {random_input({1, 2, 4, 4, 2}, 6), random_input({1, 2, 4, 4, 2}, 7)});
  check_gradients(
      [](const std::vector<Tensor>& in) {
        const Tensor up = interpolate(avg_pool2d(in[0], {2, 2}), by_scale({2.0}, "nearest"));
        return cat({in[0], up}, 1);
      },
      {random_input({2, 3, 4, 6}, 8)});
  const Tensor a = random_input({1, 2, 4, 4, 2}, 9), b = random_input({1, 3, 4, 4, 2}, 10);
  const Tensor c = cat({a, b}, 1);
  CHECK(c.shape() == Shape{1, 5, 4, 4, 2});
  CHECK(allclose(c.narrow(1, 2, 3), b, 0, 0));
}
