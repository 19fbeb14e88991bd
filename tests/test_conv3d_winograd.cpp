// conv3d by Winograd in the plane over depth taps (ops/cpu/conv3d_winograd.h):
// forward and grad input against a direct float64 loop, F(2x2) and F(4x4),
// depth kernels 1-3, depth padding 0-2, depth stride and dilation 2, plane
// padding 0-2, planes that are not whole tiles, more than 256 channels (the
// GEMMs' channel blocks), channels not a multiple of the micro-tile, one
// image (depth ranges on the threads, each warming its own ring of planes)
// and two; float32 within Winograd's rounding; and that conv3d itself takes
// this path where it should (the op's results against the direct loop).
#include <cmath>
#include <cstdlib>
#include <limits>
#include <vector>

#include "minidl/ops/conv3d.h"
#include "minidl/ops/cpu/conv3d_winograd.h"
#include "tests/test_util.h"

using namespace minidl;

namespace {

struct Case {
  const char* name;
  int64_t N, C, K, D, H, W, kD, stride_d, pad_d, dilation_d, pad;
};

const Case kCases[] = {
    {"3x3x3 pad 1, ragged 9x11 planes", 2, 5, 7, 5, 9, 11, 3, 1, 1, 1, 1},
    {"1x3x3, no depth padding", 1, 4, 6, 4, 8, 8, 1, 1, 0, 1, 1},
    {"3x3x3 valid (no padding)", 1, 3, 4, 6, 10, 7, 3, 1, 0, 1, 0},
    {"depth and plane padding 2", 2, 3, 5, 4, 6, 9, 3, 1, 2, 1, 2},
    {"depth dilation 2, pad 2", 1, 4, 3, 7, 8, 6, 3, 1, 2, 2, 1},
    {"depth stride 2 (forward only)", 2, 3, 4, 7, 8, 8, 3, 2, 1, 1, 1},
    {"260 channels (two channel blocks), 13 outputs", 1, 260, 13, 3, 6, 6, 2, 1, 1, 1, 1},
};

Conv3dGeometry geometry(const Case& c) {
  Conv3dGeometry g;
  g.hw.batch = c.N, g.hw.in_channels = c.C, g.hw.out_channels = c.K, g.hw.in_h = c.H, g.hw.in_w = c.W;
  g.hw.kernel_h = g.hw.kernel_w = 3, g.hw.pad_h = g.hw.pad_w = c.pad;
  g.in_d = c.D, g.kernel_d = c.kD, g.stride_d = c.stride_d, g.pad_d = c.pad_d, g.dilation_d = c.dilation_d;
  conv3d_set_output_size(g);
  return g;
}

// f(y index, x index, w index) for every product of the direct conv3d sums.
template <class F>
void for_each_product(const Conv3dGeometry& g, F f) {
  const int64_t C = g.hw.in_channels, K = g.hw.out_channels, kD = g.kernel_d;
  int64_t o = 0;
  for (int64_t n = 0; n < g.hw.batch; ++n)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t od = 0; od < g.out_d; ++od)
        for (int64_t oh = 0; oh < g.hw.out_h; ++oh)
          for (int64_t ow = 0; ow < g.hw.out_w; ++ow, ++o)
            for (int64_t c = 0; c < C; ++c)
              for (int64_t kd = 0; kd < kD; ++kd)
                for (int64_t a = 0; a < 3; ++a)
                  for (int64_t b = 0; b < 3; ++b) {
                    const int64_t id = od * g.stride_d - g.pad_d + kd * g.dilation_d;
                    const int64_t ih = oh - g.hw.pad_h + a, iw = ow - g.hw.pad_w + b;
                    if (id < 0 || id >= g.in_d || ih < 0 || ih >= g.hw.in_h || iw < 0 || iw >= g.hw.in_w) continue;
                    f(o, (((n * C + c) * g.in_d + id) * g.hw.in_h + ih) * g.hw.in_w + iw,
                      (((k * C + c) * kD + kd) * 3 + a) * 3 + b);
                  }
}

// y = conv3d(x, w) + bias, directly, in double.
std::vector<double> direct_forward(const Conv3dGeometry& g, const std::vector<double>& x, const std::vector<double>& w,
                                   const std::vector<double>& bias) {
  const int64_t K = g.hw.out_channels, plane = g.out_d * g.hw.out_h * g.hw.out_w;
  std::vector<double> y(static_cast<size_t>(g.hw.batch * K * plane));
  for (size_t i = 0; i < y.size(); ++i) y[i] = bias.empty() ? 0.0 : bias[i / static_cast<size_t>(plane) % K];
  for_each_product(g, [&](int64_t yi, int64_t xi, int64_t wi) {
    y[static_cast<size_t>(yi)] += w[static_cast<size_t>(wi)] * x[static_cast<size_t>(xi)];
  });
  return y;
}

// dx of y = conv3d(x, w) given dy, directly (a scatter), in double.
std::vector<double> direct_input_grad(const Conv3dGeometry& g, const std::vector<double>& dy,
                                      const std::vector<double>& w) {
  std::vector<double> dx(static_cast<size_t>(g.hw.batch * g.hw.in_channels * g.in_d * g.hw.in_h * g.hw.in_w), 0.0);
  for_each_product(g, [&](int64_t yi, int64_t xi, int64_t wi) {
    dx[static_cast<size_t>(xi)] += w[static_cast<size_t>(wi)] * dy[static_cast<size_t>(yi)];
  });
  return dx;
}

std::vector<double> values(int64_t n) { return randn({n}).to(kFloat64).to_vector<double>(); }

template <class T, class S>
std::vector<T> as(const std::vector<S>& v) {
  return std::vector<T>(v.begin(), v.end());
}

// max |got - want| / (1 + max |want|).
template <class T>
double rel_error(const std::vector<T>& got, const std::vector<double>& want) {
  double err = 0, mag = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    err = std::max(err, std::abs(static_cast<double>(got[i]) - want[i]));
    mag = std::max(mag, std::abs(want[i]));
  }
  return err / (1.0 + mag);
}

template <class T>
void check_case(const Case& c, int tile, double tol) {
  INFO(c.name, ", F(", tile, "x", tile, "), ", sizeof(T) == 8 ? "float64" : "float32");
  manual_seed(41);
  const Conv3dGeometry g = geometry(c);
  REQUIRE(conv3d_winograd_applies(g));
  const std::vector<double> x = values(c.N * c.C * c.D * c.H * c.W), w = values(c.K * c.C * c.kD * 9),
                            bias = values(c.K);
  const std::vector<double> y_want = direct_forward(g, x, w, bias);
  std::vector<T> y(y_want.size());
  const std::vector<T> xt = as<T>(x), wt = as<T>(w), bt = as<T>(bias);
  conv3d_winograd_forward(g, xt.data(), wt.data(), bt.data(), y.data(), tile);
  CHECK(rel_error(y, y_want) < tol);
  conv3d_winograd_forward(g, xt.data(), wt.data(), static_cast<const T*>(nullptr), y.data(), tile);
  CHECK(rel_error(y, direct_forward(g, x, w, {})) < tol);

  CHECK(conv3d_winograd_input_applies(g) == (c.stride_d == 1));
  if (!conv3d_winograd_input_applies(g)) return;
  const std::vector<double> dy = values(static_cast<int64_t>(y_want.size()));
  std::vector<T> dx(x.size());
  const std::vector<T> dyt = as<T>(dy);
  conv3d_winograd_backward_input(g, dyt.data(), wt.data(), dx.data(), tile);
  CHECK(rel_error(dx, direct_input_grad(g, dy, w)) < tol);
}

}  // namespace

TEST_CASE("conv3d Winograd over depth taps: forward and grad input equal the direct sums") {
  for (const Case& c : kCases)
    for (int tile : {2, 4}) {
      check_case<double>(c, tile, 1e-12);
      check_case<float>(c, tile, tile == 4 ? 2e-5 : 2e-6);
    }
}

TEST_CASE("conv3d Winograd: not for groups, strided or dilated planes, or the grad input of a strided depth") {
  Conv3dGeometry g = geometry(kCases[0]);
  CHECK(conv3d_winograd_input_applies(g));
  Conv3dGeometry grouped = g;
  grouped.hw.groups = 5, grouped.hw.out_channels = 5;
  CHECK_FALSE(conv3d_winograd_applies(grouped));
  Conv3dGeometry strided = g;
  strided.hw.stride_h = 2;
  CHECK_FALSE(conv3d_winograd_applies(strided));
  Conv3dGeometry dilated = g;
  dilated.hw.dilation_w = 2;
  CHECK_FALSE(conv3d_winograd_applies(dilated));
  Conv3dGeometry deep_pad = g;
  deep_pad.pad_d = 3;  // more than (kD - 1) dd: the flipped correlation would need negative padding
  CHECK(conv3d_winograd_applies(deep_pad));
  CHECK_FALSE(conv3d_winograd_input_applies(deep_pad));
  CHECK_THROWS_CONTAINS(conv3d_winograd_forward<float>(strided, nullptr, nullptr, nullptr, nullptr, 4),
                        "conv3d_winograd_forward: expected groups 1");
}

TEST_CASE("conv3d takes the Winograd path on planes of 16 tiles or more, and its results equal the direct sums") {
  // 16 channels on 20x20 planes: conv2d would run F(4x4) on the 48 stacked
  // channels, 25 tiles a plane. The op (autograd) in float32 against the
  // loops (float64 convs take conv2d's exact paths, not Winograd).
  manual_seed(43);
  const Case c{"op", 2, 16, 16, 4, 20, 20, 3, 1, 1, 1, 1};
  const Conv3dGeometry g = geometry(c);
  // Values that float32 holds exactly.
  const std::vector<double> xv = as<double>(as<float>(values(c.N * c.C * c.D * c.H * c.W)));
  const std::vector<double> wv = as<double>(as<float>(values(c.K * c.C * 27))), bv = as<double>(as<float>(values(c.K)));
  const Tensor x = tensor(xv, {c.N, c.C, c.D, c.H, c.W}).to(kFloat32).requires_grad_();
  const Tensor w = tensor(wv, {c.K, c.C, 3, 3, 3}).to(kFloat32).requires_grad_(), b = tensor(bv, {c.K}).to(kFloat32);
  const int64_t before = conv3d_winograd_calls();
  const Tensor y = conv3d(x, w, b, Conv3dParams{.padding = {1, 1, 1}});
  CHECK(conv3d_winograd_calls() == before + 1);
  CHECK(rel_error(y.contiguous().to_vector<float>(), direct_forward(g, xv, wv, bv)) < 2e-5);
  const std::vector<double> dyv = as<double>(as<float>(values(y.numel())));
  y.backward(tensor(dyv, y.shape()).to(kFloat32));
  CHECK(rel_error(x.grad().contiguous().to_vector<float>(), direct_input_grad(g, dyv, wv)) < 2e-5);
  CHECK(conv3d_winograd_calls() == before + 2);
  // 12x12 planes: 9 F(4x4) tiles, the stacked path.
  const Tensor small = tensor(values(2 * 16 * 4 * 12 * 12), {2, 16, 4, 12, 12}).to(kFloat32);
  conv3d(small, w.detach(), Tensor(), Conv3dParams{.padding = {1, 1, 1}});
  CHECK(conv3d_winograd_calls() == before + 2);
}

TEST_CASE("conv3d Winograd with an inf input voxel: only the outputs that read it are not finite") {
  // As conv2d's: the plane transforms spread NaN over whole tiles; such a call takes the stacked direct path.
  manual_seed(44);
  const Case c{"op", 1, 16, 16, 3, 20, 20, 3, 1, 1, 1, 1};
  const Conv3dGeometry g = geometry(c);
  std::vector<double> xv = as<double>(as<float>(values(c.N * c.C * c.D * c.H * c.W)));
  const std::vector<double> wv = as<double>(as<float>(values(c.K * c.C * 27))), bv(c.K, 0.0);
  xv[static_cast<size_t>(((3 * c.D + 1) * c.H + 7) * c.W + 9)] = std::numeric_limits<double>::infinity();
  const std::vector<double> want = direct_forward(g, xv, wv, bv);
  const Tensor x = tensor(xv, {c.N, c.C, c.D, c.H, c.W}).to(kFloat32);
  const Tensor w = tensor(wv, {c.K, c.C, 3, 3, 3}).to(kFloat32);
  const Tensor y = conv3d(x, w, Tensor(), Conv3dParams{.padding = {1, 1, 1}});
  const std::vector<float> got = y.contiguous().to_vector<float>();
  int not_finite = 0, mismatched = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    not_finite += !std::isfinite(want[i]);
    mismatched += std::isfinite(want[i]) != std::isfinite(got[i]);
  }
  CHECK(not_finite == 16 * 27);  // every output channel at the 3x3x3 outputs around the voxel
  CHECK(mismatched == 0);
}
