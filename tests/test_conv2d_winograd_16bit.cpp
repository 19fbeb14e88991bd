// 16-bit (bfloat16, float16) convs whose passes take Winograd read and write
// their 16-bit tensors directly (ops/cpu/conv2d.cpp, ops/cpu/conv2d_winograd.cpp):
// forward, grad input and grad weight must give the bits of float32
// computation on the widened tensors rounded once (Float32Compute's path,
// which they replace), over F(2x2) and F(4x4), edge tiles, short tile rows
// (the gathered transforms), groups, padding 0 and 2, bias, chunks spread
// over the threads, and inf/NaN. And they must have run on that path.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "minidl/ops/cpu/conv2d_kernels.h"
#include "tests/tensor_bits.h"
#include "tests/test_util.h"

using namespace minidl;
using testing::count_different_bits;

namespace {

struct Case {
  const char* name;
  Shape x, w;
  Conv2dParams p;
  bool bias;
};

Conv2dGeometry geometry(const Case& c) {
  Conv2dGeometry g;
  g.batch = c.x[0], g.in_channels = c.x[1], g.in_h = c.x[2], g.in_w = c.x[3];
  g.out_channels = c.w[0], g.kernel_h = g.kernel_w = 3, g.groups = c.p.groups;
  g.pad_h = c.p.padding[0], g.pad_w = c.p.padding[1];
  conv2d_set_output_size(g);
  return g;
}

bool is_winograd(Conv2dAlgo a) { return a == Conv2dAlgo::kWinograd || a == Conv2dAlgo::kWinograd4; }

// Runs c in `dtype` and in float32 on the same values; every result equal
// bit for bit to the float32 one rounded; the passes that resolve to
// Winograd counted as run on the 16-bit path.
void check_case(const Case& c, DType dtype, bool special_values = false) {
  INFO(c.name << " in " << std::string(dtype_name(dtype)));
  manual_seed(21);
  std::vector<double> values = randn(c.x).to(kFloat64).to_vector<double>();
  if (special_values) {  // inf and NaN in a few inputs: they reach the same outputs both ways
    values[37] = std::numeric_limits<double>::infinity();
    values[values.size() - 5] = std::numeric_limits<double>::quiet_NaN();
  }
  const Tensor x = tensor(values, c.x).to(dtype).requires_grad_(), w = (randn(c.w) * 0.2).to(dtype).requires_grad_();
  const Tensor b = c.bias ? randn({c.w[0]}).to(dtype).requires_grad_() : Tensor();
  const Tensor xw = x.detach().to(kFloat32).requires_grad_(), ww = w.detach().to(kFloat32).requires_grad_();
  const Tensor bw = c.bias ? b.detach().to(kFloat32).requires_grad_() : Tensor();

  const Conv2dGeometry g = geometry(c);
  const int expected = is_winograd(conv2d_resolve_algo(g, Conv2dPass::kForward)) +
                       is_winograd(conv2d_resolve_algo(g, Conv2dPass::kInput)) +
                       is_winograd(conv2d_resolve_algo(g, Conv2dPass::kWeight));
  REQUIRE(expected > 0);
  const int64_t before = conv2d_reduced_winograd_passes();
  const Tensor y = conv2d(x, w, b, c.p), y_wide = conv2d(xw, ww, bw, c.p);
  REQUIRE(y.dtype() == dtype);
  CHECK(count_different_bits(y, y_wide.to(dtype)) == 0);
  const Tensor dy = randn(y.shape()).to(dtype);
  y.backward(dy);
  y_wide.backward(dy.to(kFloat32));
  CHECK(conv2d_reduced_winograd_passes() - before == expected);
  CHECK(count_different_bits(x.grad(), xw.grad().to(dtype)) == 0);
  CHECK(count_different_bits(w.grad(), ww.grad().to(dtype)) == 0);
  if (c.bias) CHECK(count_different_bits(b.grad(), bw.grad().to(dtype)) == 0);
}

const Conv2dParams kPad1{.padding = {1, 1}};

// 32 pairs a channel or more (conv2d_pick_algo's F(2x2) rule; F(4x4) takes 10).
const Case kCases[] = {
    // Edge tiles cut short by the map.
    {"64 -> 64 at 13x11, pad 1, bias", {2, 64, 13, 11}, {64, 64, 3, 3}, kPad1, true},
    // F(4x4) on 8x8 maps: 2 tiles a row, below kGatherBelowTiles: the gathered transforms.
    {"64 -> 64 at 8x8", {3, 64, 8, 8}, {64, 64, 3, 3}, kPad1, false},
    // Tiles for several chunks on the threads; 70 output channels: a partial row tile of U.
    {"96 -> 70 at 32x32, batch 6", {6, 96, 32, 32}, {70, 96, 3, 3}, kPad1, false},
    {"groups 2, pad (0, 2)", {2, 128, 12, 10}, {128, 64, 3, 3}, Conv2dParams{.padding = {0, 2}, .groups = 2}, true},
};

}  // namespace

TEST_CASE("16-bit Winograd passes read and write their tensors: float32's bits rounded once") {
  const testing::NoBf16Dot off;  // every bfloat16 Winograd pass takes this path
  for (DType dtype : {kBFloat16, kFloat16})
    for (const Case& c : kCases) check_case(c, dtype);
}

TEST_CASE("16-bit Winograd passes under F(2x2) only") {
  const testing::NoBf16Dot off;  // every bfloat16 Winograd pass takes this path
  const testing::NoWinograd4 no_f4;
  for (DType dtype : {kBFloat16, kFloat16})
    for (const Case& c : kCases) check_case(c, dtype);
}

TEST_CASE("16-bit Winograd passes: inf and NaN reach the same outputs") {
  const testing::NoBf16Dot off;  // every bfloat16 Winograd pass takes this path
  for (DType dtype : {kBFloat16, kFloat16}) check_case(kCases[0], dtype, /*special_values=*/true);
}

TEST_CASE("bfloat16 with the dot products on: multi-tile F(4x4) convs still take this path") {
  // (ops/cpu/conv2d.cpp's winograd4_in_float32; on a CPU without
  // AVX512-BF16 the dot products never run, and every Winograd pass does.)
  check_case(kCases[0], kBFloat16);
  check_case(kCases[1], kBFloat16);
}
