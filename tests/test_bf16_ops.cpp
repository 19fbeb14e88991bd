// matmul, linear, conv2d and conv3d on bfloat16 tensors with the dot-product
// kernels (ops/cpu/bf16_kernels.h), forward and backward, against float64
// computation of the same bfloat16 values: transposed and broadcast batched
// matmul, conv2d and conv3d with stride, padding, dilation, groups, 1x1, one
// image and chunks of several images. The tolerance: half a bfloat16 ulp of the result (the one
// rounding) plus float32 summation error, scaled by the same op on |inputs|
// (the sum of |products|). Checks that the dot-product path ran on a CPU that has it,
// and that MINIDL_CPU_BF16_DOT=0 gives Float32Compute's path bit for bit.
#include <cmath>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "minidl/ops/cpu/bf16_gemm.h"
#include "minidl/ops/cpu/conv2d_bf16_taps.h"
#include "tests/test_util.h"

using namespace minidl;

namespace {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;
using V = const std::vector<Tensor>&;

struct Case {
  std::string name;
  std::vector<Shape> shapes;
  Fn f;
};

std::vector<Case> cases() {
  auto conv = [](Conv2dParams p, bool bias) {
    return [p, bias](V a) { return conv2d(a[0], a[1], bias ? a[2] : Tensor(), p); };
  };
  auto conv3 = [](Conv3dParams p, bool bias) {
    return [p, bias](V a) { return conv3d(a[0], a[1], bias ? a[2] : Tensor(), p); };
  };
  return {
      {"matmul 2-D odd", {{7, 13}, {13, 5}}, [](V a) { return matmul(a[0], a[1]); }},
      {"matmul K = 1", {{9, 1}, {1, 50}}, [](V a) { return matmul(a[0], a[1]); }},
      {"matmul of transposed views", {{40, 33}, {61, 40}},
       [](V a) { return matmul(a[0].transpose(0, 1), a[1].transpose(0, 1)); }},
      {"matmul batched", {{3, 17, 30}, {3, 30, 19}}, [](V a) { return matmul(a[0], a[1]); }},
      {"matmul batched, broadcast (dB sums the batch)", {{4, 9, 65}, {65, 20}}, [](V a) { return matmul(a[0], a[1]); }},
      {"matmul big enough to split over threads", {{130, 140}, {140, 150}}, [](V a) { return matmul(a[0], a[1]); }},
      {"linear with bias", {{6, 37}, {11, 37}, {11}}, [](V a) { return linear(a[0], a[1], a[2]); }},
      {"linear 3-D input, no bias", {{2, 5, 64}, {70, 64}}, [](V a) { return linear(a[0], a[1], Tensor()); }},
      {"conv2d 3x3 pad 1 bias", {{2, 3, 9, 8}, {5, 3, 3, 3}, {5}}, conv(Conv2dParams{.padding = {1, 1}}, true)},
      {"conv2d stride 2 pad (1, 2)", {{2, 4, 11, 10}, {6, 4, 3, 3}},
       conv(Conv2dParams{.stride = {2, 2}, .padding = {1, 2}}, false)},
      {"conv2d groups 2 dilation 2", {{3, 6, 9, 9}, {4, 3, 3, 2}, {4}},
       conv(Conv2dParams{.padding = {2, 1}, .dilation = {2, 2}, .groups = 2}, true)},
      {"conv2d depthwise 5x5", {{2, 4, 8, 8}, {4, 1, 5, 5}}, conv(Conv2dParams{.padding = {2, 2}, .groups = 4}, false)},
      {"conv2d 1x1", {{2, 16, 5, 7}, {24, 16, 1, 1}, {24}}, conv(Conv2dParams{}, true)},
      {"conv2d 1x1 stride 2", {{2, 8, 7, 7}, {8, 8, 1, 1}}, conv(Conv2dParams{.stride = {2, 2}}, false)},
      {"conv2d one image, 32 channels", {{1, 32, 12, 12}, {32, 32, 3, 3}, {32}},
       conv(Conv2dParams{.padding = {1, 1}}, true)},
      {"conv2d batch 8, 5x5 maps (chunks of several images)", {{8, 6, 5, 5}, {4, 6, 3, 3}, {4}},
       conv(Conv2dParams{.padding = {1, 1}}, true)},
      {"conv2d batch 8, stride 2, groups 2 (chunks; grad input by col2im)", {{8, 4, 6, 6}, {6, 2, 3, 3}},
       conv(Conv2dParams{.stride = {2, 2}, .padding = {1, 1}, .groups = 2}, false)},
      {"conv2d 1x1 padding 1 (stride 1, grad input by col2im)", {{3, 5, 4, 6}, {7, 5, 1, 1}, {7}},
       conv(Conv2dParams{.padding = {1, 1}}, true)},
      {"conv2d batch 6, 1x1 (chunks, no im2col per image)", {{6, 8, 3, 3}, {5, 8, 1, 1}}, conv(Conv2dParams{}, false)},
      {"conv2d stride 2, 10 output columns (im2col's 8-wide gathers)", {{2, 3, 17, 19}, {4, 3, 3, 3}},
       conv(Conv2dParams{.stride = {2, 2}, .padding = {1, 1}}, false)},
      {"conv2d 13 output columns (im2col's 8-, 4- and 1-wide copies)", {{2, 3, 5, 13}, {4, 3, 3, 3}, {4}},
       conv(Conv2dParams{.padding = {1, 1}}, true)},
      {"conv2d stride 3, dilation 2", {{2, 3, 13, 14}, {5, 3, 3, 3}},
       conv(Conv2dParams{.stride = {3, 3}, .padding = {2, 2}, .dilation = {2, 2}}, false)},
      {"conv2d kernel larger than the input with padding", {{2, 2, 3, 3}, {3, 2, 5, 5}},
       conv(Conv2dParams{.padding = {2, 2}}, false)},
      {"conv2d groups 2, 128 -> 120 channels (flipped weights transposed, grad weight rounded, on the threads)",
       {{1, 128, 5, 4}, {120, 64, 3, 3}}, conv(Conv2dParams{.padding = {1, 1}, .groups = 2}, false)},
      // Maps of at most 16 pixels with padding: a GEMM per kernel tap
      // (ops/cpu/conv2d_bf16_taps.h; the 5x5 case above too).
      {"conv2d 4x4 maps, 3x3 pad 1, bias (a GEMM per tap)", {{3, 16, 4, 4}, {8, 16, 3, 3}, {8}},
       conv(Conv2dParams{.padding = {1, 1}}, true)},
      {"conv2d 4x4 maps, 64 channels (per-tap gathers and scatters on the threads)", {{2, 64, 4, 4}, {64, 64, 3, 3}},
       conv(Conv2dParams{.padding = {1, 1}}, false)},
      {"conv2d 2x3 maps, padding (1, 0)", {{2, 5, 2, 3}, {4, 5, 3, 3}, {4}}, conv(Conv2dParams{.padding = {1, 0}}, true)},
      {"conv2d 1x1 map, 5x5 pad 3 (taps that read only padding)", {{2, 3, 1, 1}, {4, 3, 5, 5}},
       conv(Conv2dParams{.padding = {3, 3}}, false)},
      // conv3d (ops/cpu/conv3d.cpp): conv2d's dot products on bfloat16 stacked
      // depth slices; grad weight always, forward and grad input on planes of
      // at most 256 outputs or where conv2d would not take Winograd.
      {"conv3d 3x3x3 pad 1, bias", {{2, 4, 5, 6, 7}, {6, 4, 3, 3, 3}, {6}}, conv3(Conv3dParams{.padding = {1, 1, 1}}, true)},
      {"conv3d stride 2, pad (1, 0, 2)", {{1, 3, 7, 6, 9}, {5, 3, 3, 2, 3}},
       conv3(Conv3dParams{.stride = {2, 2, 2}, .padding = {1, 0, 2}}, false)},
      {"conv3d groups 2, dilation 2", {{2, 4, 6, 7, 7}, {4, 2, 2, 3, 3}, {4}},
       conv3(Conv3dParams{.padding = {1, 2, 2}, .dilation = {2, 2, 2}, .groups = 2}, true)},
      {"conv3d depth stride 3 > kernel depth 1 (depths no tap reaches)", {{2, 3, 7, 4, 4}, {2, 3, 1, 3, 3}},
       conv3(Conv3dParams{.stride = {3, 1, 1}, .padding = {0, 1, 1}}, false)},
      {"conv3d 8 channels on 20x20 planes (forward, grad input on float32 slices; grad weight dot products)",
       {{2, 8, 3, 20, 20}, {8, 8, 3, 3, 3}, {8}}, conv3(Conv3dParams{.padding = {1, 1, 1}}, true)},
      {"conv3d 24 -> 16 on 8x8 planes, 4 depths (items on the threads)", {{2, 24, 4, 8, 8}, {16, 24, 3, 3, 3}},
       conv3(Conv3dParams{.padding = {1, 1, 1}}, false)},
  };
}

// |got - want| <= 2^-8 |want| (one bfloat16 rounding) + 2^-14 * mag
// (float32 sums of up to ~1000 terms), elementwise.
int64_t count_bad(const Tensor& got, const Tensor& want, const Tensor& mag) {
  const Tensor g = got.to(kFloat64).contiguous(), w = want.contiguous(), m = mag.contiguous();
  const double *pg = g.data_ptr<double>(), *pw = w.data_ptr<double>(), *pm = m.data_ptr<double>();
  int64_t bad = 0;
  for (int64_t i = 0; i < g.numel(); ++i) {
    const double tol = std::ldexp(std::abs(pw[i]), -8) * 1.001 + std::ldexp(pm[i], -14) + 1e-30;
    if (!(std::abs(pg[i] - pw[i]) <= tol)) {
      if (bad < 3) MESSAGE("element ", i, ": ", pg[i], " want ", pw[i], " +- ", tol);
      ++bad;
    }
  }
  return bad;
}

// Runs c on bfloat16 leaves and checks the output and every input's gradient.
void check_case(const Case& c) {
  INFO(c.name);
  std::vector<Tensor> low, exact, absolute;
  for (const Shape& s : c.shapes) {
    low.push_back(randn(s).to(kBFloat16).requires_grad_());
    exact.push_back(low.back().detach().to(kFloat64).requires_grad_());
    absolute.push_back(exact.back().detach().abs().requires_grad_());
  }
  const Tensor y = c.f(low), y_exact = c.f(exact), y_abs = c.f(absolute);
  REQUIRE(y.dtype() == kBFloat16);
  CHECK(count_bad(y, y_exact, y_abs) == 0);
  const Tensor g = randn(y.shape()).to(kBFloat16);
  y.backward(g);
  y_exact.backward(g.to(kFloat64));
  y_abs.backward(g.to(kFloat64).abs());
  for (size_t i = 0; i < low.size(); ++i) {
    INFO("gradient of input ", i);
    REQUIRE(low[i].grad().defined());
    CHECK(low[i].grad().dtype() == kBFloat16);
    CHECK(count_bad(low[i].grad(), exact[i].grad(), absolute[i].grad()) == 0);
  }
}

}  // namespace

TEST_CASE("bfloat16 matmul, linear, conv2d, conv3d on the dot-product path against float64, forward and backward") {
  // Winograd F(4x4) off: every conv of cases() then takes the dot products
  // (with it, the 3x3 stride-1 ones with enough channels run Winograd in
  // float32: the test case below).
  const testing::NoWinograd4 no_f4;
  if (!cpu::cpu_has_avx512_bf16())
    MESSAGE("this CPU has no AVX512-BF16: these cases run on the float32 path (Float32Compute), not the dot products");
  for (const Case& c : cases()) {
    manual_seed(11);
    const auto before = cpu::bf16_gemm_counts();
    check_case(c);
    const auto after = cpu::bf16_gemm_counts();
    if (cpu::cpu_has_avx512_bf16()) {
      INFO(c.name);
      CHECK(after.dot_product > before.dot_product);  // the dot-product path ran
    }
  }
}

TEST_CASE("MINIDL_CPU_BF16_DOT=0: the same ops equal float32 computation rounded once, bit for bit") {
  const testing::NoBf16Dot off;
  for (const Case& c : cases()) {
    INFO(c.name);
    manual_seed(12);
    std::vector<Tensor> low, wide;
    for (const Shape& s : c.shapes) {
      low.push_back(randn(s).to(kBFloat16).requires_grad_());
      wide.push_back(low.back().detach().to(kFloat32).requires_grad_());
    }
    const auto before = cpu::bf16_gemm_counts();
    const Tensor y = c.f(low), y_wide = c.f(wide);
    CHECK(testing::max_abs_diff(y.to(kFloat32), y_wide.to(kBFloat16).to(kFloat32)) == 0.0);
    const Tensor g = randn(y.shape()).to(kBFloat16);
    y.backward(g);
    y_wide.backward(g.to(kFloat32));
    for (size_t i = 0; i < low.size(); ++i)
      CHECK(testing::max_abs_diff(low[i].grad().to(kFloat32), wide[i].grad().to(kBFloat16).to(kFloat32)) == 0.0);
    CHECK(cpu::bf16_gemm_counts().dot_product == before.dot_product);
  }
}

TEST_CASE("bfloat16 3x3 stride-1 convs that float32 runs by Winograd F(4x4) run it in float32, rounded once") {
  // F(4x4) cuts the products 4x, the dot products run at most 2x float32's
  // rate: where conv2d_pick_algo takes F(4x4) on maps of more than one 4x4
  // tile, a bfloat16 conv is float32 Winograd on the widened operands, its
  // results rounded once (bit for bit what MINIDL_CPU_BF16_DOT=0 gives);
  // a single-tile 4x4 map keeps the dot products.
  struct Conv {
    const char* name;
    Shape x, w;
    bool winograd;
  };
  for (const Conv& c : {Conv{"32 -> 32 at 12x12", {2, 32, 12, 12}, {32, 32, 3, 3}, true},
                        Conv{"64 -> 64 at 4x4", {2, 64, 4, 4}, {64, 64, 3, 3}, false}}) {
    INFO(c.name);
    manual_seed(13);
    const Tensor x = randn(c.x).to(kBFloat16).requires_grad_(), w = randn(c.w).to(kBFloat16).requires_grad_();
    const Tensor xw = x.detach().to(kFloat32).requires_grad_(), ww = w.detach().to(kFloat32).requires_grad_();
    const Conv2dParams p{.padding = {1, 1}};
    const auto before = cpu::bf16_gemm_counts();
    const Tensor y = conv2d(x, w, Tensor(), p), y_wide = conv2d(xw, ww, Tensor(), p);
    const Tensor g = randn(y.shape()).to(kBFloat16);
    y.backward(g);
    y_wide.backward(g.to(kFloat32));
    const bool dot = cpu::bf16_gemm_counts().dot_product > before.dot_product;
    CHECK(dot == (cpu::cpu_has_avx512_bf16() && !c.winograd));
    if (c.winograd || !cpu::cpu_has_avx512_bf16()) {
      CHECK(testing::max_abs_diff(y.to(kFloat32), y_wide.to(kBFloat16).to(kFloat32)) == 0.0);
      CHECK(testing::max_abs_diff(x.grad().to(kFloat32), xw.grad().to(kBFloat16).to(kFloat32)) == 0.0);
      CHECK(testing::max_abs_diff(w.grad().to(kFloat32), ww.grad().to(kBFloat16).to(kFloat32)) == 0.0);
    }
  }
}

namespace {

// conv3d's grad input in float64 (x's values, w, dy).
Tensor conv_input_grad(const Tensor& x, const Tensor& w, const Tensor& dy, const Conv3dParams& p) {
  const Tensor xl = x.detach().requires_grad_();
  conv3d(xl, w, Tensor(), p).backward(dy);
  return xl.grad();
}

}  // namespace

TEST_CASE("bfloat16 conv3d: dot products on planes of fewer than 16 Winograd tiles, Winograd in float32 on larger ones") {
  if (!cpu::cpu_has_avx512_bf16()) {
    MESSAGE("this CPU has no AVX512-BF16: every bfloat16 conv3d pass computes in float32; nothing to check");
    return;
  }
  struct Pass {
    const char* name;
    Shape x;
    bool forward_dot;  // forward and grad input on the dot products
  };
  const Pass passes[] = {{"16 -> 16 on 12x12 planes (9 F(4x4) tiles)", {1, 16, 3, 12, 12}, true},
                         {"16 -> 16 on 20x20 planes (25 F(4x4) tiles: ops/cpu/conv3d_winograd.h)",
                          {1, 16, 3, 20, 20}, false}};
  for (const Pass& p : passes) {
    INFO(p.name);
    manual_seed(5);
    const Tensor x = randn(p.x).to(kBFloat16).requires_grad_();
    const Tensor w = (randn({16, 16, 3, 3, 3}) * 0.1).to(kBFloat16).requires_grad_();
    const Tensor x_wide = x.detach().to(kFloat64), w_wide = w.detach().to(kFloat64);
    const Conv3dParams params{.padding = {1, 1, 1}};
    auto before = cpu::bf16_gemm_counts();
    const Tensor y = conv3d(x, w, Tensor(), params);
    CHECK((cpu::bf16_gemm_counts().dot_product > before.dot_product) == p.forward_dot);
    const Tensor want = conv3d(x_wide, w_wide, Tensor(), params);
    CHECK(count_bad(y, want, conv3d(x_wide.abs(), w_wide.abs(), Tensor(), params)) == 0);
    // Grad input alone (w needs none), then grad weight alone: always the dot products.
    const Tensor dy = randn(y.shape()).to(kBFloat16);
    before = cpu::bf16_gemm_counts();
    conv3d(x, w.detach(), Tensor(), params).backward(dy);
    CHECK((cpu::bf16_gemm_counts().dot_product > before.dot_product) == p.forward_dot);
    before = cpu::bf16_gemm_counts();
    conv3d(x.detach(), w, Tensor(), params).backward(dy);
    CHECK(cpu::bf16_gemm_counts().dot_product > before.dot_product);
    REQUIRE(x.grad().defined());
    REQUIRE(w.grad().defined());
    const Tensor dyw = dy.to(kFloat64);
    CHECK(count_bad(x.grad(), conv_input_grad(x_wide, w_wide, dyw, params),
                    conv_input_grad(x_wide, w_wide.abs(), dyw.abs(), params)) == 0);
  }
}

TEST_CASE("bfloat16 convs on small padded maps take a GEMM per kernel tap") {
  auto geometry = [](int64_t c, int64_t hw, int64_t k, int64_t stride, int64_t pad) {
    Conv2dGeometry g;
    g.batch = 64, g.in_channels = c, g.out_channels = c, g.in_h = g.in_w = hw, g.kernel_h = g.kernel_w = k;
    g.stride_h = g.stride_w = stride, g.pad_h = g.pad_w = pad;
    conv2d_set_output_size(g);
    return g;
  };
  CHECK(cpu::conv2d_bf16_taps_applies(geometry(512, 4, 3, 1, 1)));    // ResNet-18's last stage
  CHECK_FALSE(cpu::conv2d_bf16_taps_applies(geometry(256, 8, 3, 1, 1)));  // 64 pixels: im2col
  CHECK_FALSE(cpu::conv2d_bf16_taps_applies(geometry(512, 8, 3, 2, 1)));  // strided
  CHECK_FALSE(cpu::conv2d_bf16_taps_applies(geometry(512, 4, 3, 1, 0)));  // no padding to skip
  CHECK_FALSE(cpu::conv2d_bf16_taps_applies(geometry(512, 4, 1, 1, 0)));  // 1x1
}
