// conv2d's Winograd paths: which one kAuto picks, per pass, and their
// float32 accuracy against float64 on the CIFAR ResNet-18 3x3 stride-1
// shapes (2 images; weights as PyTorch's default init, unit normal inputs
// and dy), per pass: the stated bounds.
//
// Measured (bench/bench_conv_accuracy, 8 images, 2 seeds; e_i the error of
// output i, S_i = sum |w||x| of its terms, u = 2^-24), AVX-512 build (the
// x86-64-v3 AVX2 build's within 20% of these):
//                     forward, grad input              grad weight
//                     max e_i/(u S_i)  RMS e/RMS y     max|e|/max|dw|  RMS e/RMS dw
//   im2col (direct)    0.7 - 1.4    1.6e-7 - 2.9e-7   2.4e-7 - 4.7e-7  1.3e-7 - 3.5e-7
//   shifted (direct)   4.5 - 5.2    4.2e-7 - 5.9e-7   3.2e-7 - 3.8e-7  2.7e-7 - 2.9e-7
//   F(2x2)             1.4 - 2.9    2.6e-7 - 5.3e-7   3.8e-7 - 6.0e-7  2.1e-7 - 5.0e-7
//   F(4x4)            14.5 - 25.6   1.1e-6 - 2.4e-6   1.3e-6 - 1.9e-6  6.8e-7 - 1.4e-6
// (shifted planes on the 16x16 and 32x32 maps only, as the rule runs them.)
// F(4x4) loses 2-3 bits more than the direct sums (its transforms multiply
// by up to 8 and add up to 6 terms, each way), F(2x2) about none. Grad
// weight is bounded normwise: its sums run over batch x pixels, and the
// transforms mix the terms of 16 or 36 neighbouring sums, so e_i / S_i
// measures the neighbours more than output i (64 u S_i for F(4x4) on 4x4
// maps with 2 images, where S_i has 32 terms). The bounds sit about 1.5x
// above the worst measured (with 2 images, as here, or 8). They catch a
// coefficient of a transform off by 2^-16 (planted: A^T's 1/8 as 0.125 *
// (1 + 2^-16) gives an RMS error of 4.2e-6 at 4x4 maps; off by 2^-13, a max
// of 276 u S); smaller slips are caught by the float64 checks of
// tests/test_conv2d.cpp. Lavin and Gray's points (0, +-1, +-2) instead of
// ours gave 1.5x the RMS and 2.5x the max error in a simulation
// (ops/cpu/conv2d_winograd_transforms.h).
#include <omp.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "minidl/core/backend_settings.h"
#include "minidl/ops/cpu/conv2d_chunk_plan.h"  // the rule's bound on grad input by phases
#include "tests/conv2d_accuracy.h"
#include "tests/conv_geometry.h"
#include "tests/test_util.h"

using namespace minidl;
using minidl::testing::square;
using minidl::testing::conv2d_float32_error;
using minidl::testing::Conv2dError;

namespace {

Conv2dGeometry resnet_shape(int64_t C, int64_t HW, int64_t batch) {
  Conv2dGeometry g;
  g.batch = batch, g.in_channels = g.out_channels = C, g.in_h = g.in_w = HW;
  g.kernel_h = g.kernel_w = 3, g.pad_h = g.pad_w = 1;
  conv2d_set_output_size(g);
  return g;
}

std::vector<float> random_values(size_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> dist;
  std::vector<float> v(n);
  for (float& e : v) e = dist(gen);
  return v;
}

struct Bound {
  double max, rms_rel;
};

struct AlgoBounds {
  Conv2dAlgo algo;
  const char* name;
  Bound data;    // forward and grad input: max in units of u * S_i
  Bound weight;  // grad weight: max |e| / max |dw| (see the top)
};

}  // namespace

TEST_CASE("conv2d picks Winograd for 3x3 stride 1 with many channels, else by map size") {
  // F(4x4) from 10 pairs per channel where its tiles need fewer products
  // than F(2x2)'s; F(2x2) from 32 elsewhere, on maps of few tiles only with
  // AVX2 (ops/cpu/conv2d_kernels.cpp).
  // Maps of one 4x4 tile: F(4x4) with AVX-512, F(2x2) with AVX2 (forward, grad input).
#if defined(__AVX512F__)
  CHECK(conv2d_pick_algo(square(64, 512, 512, 4, 3, 1, 1)) == Conv2dAlgo::kWinograd4);
#else
  CHECK(conv2d_pick_algo(square(64, 512, 512, 4, 3, 1, 1)) == Conv2dAlgo::kWinograd);
#endif
  CHECK(conv2d_pick_algo(square(64, 256, 256, 8, 3, 1, 1)) == Conv2dAlgo::kWinograd4);
  CHECK(conv2d_pick_algo(square(64, 128, 128, 16, 3, 1, 1)) == Conv2dAlgo::kWinograd4);
  CHECK(conv2d_pick_algo(square(128, 64, 128, 32, 3, 1, 1)) == Conv2dAlgo::kWinograd4);
  CHECK(conv2d_pick_algo(square(64, 64, 64, 32, 3, 1, 1)) == Conv2dAlgo::kWinograd4);
  CHECK(conv2d_pick_algo(square(64, 32, 32, 32, 3, 1, 1)) == Conv2dAlgo::kWinograd4);   // 16 pairs per channel
  CHECK(conv2d_pick_algo(square(64, 20, 20, 32, 3, 1, 1)) == Conv2dAlgo::kWinograd4);   // 10 pairs
  CHECK(conv2d_pick_algo(square(2, 48, 16, 64, 3, 1, 1)) == Conv2dAlgo::kWinograd4);    // conv3d 16 -> 16, stacked
  CHECK(conv2d_pick_algo(square(64, 16, 16, 32, 3, 1, 1)) == Conv2dAlgo::kShiftedPlanes);  // 8 pairs: too few
  CHECK(conv2d_pick_algo(square(64, 256, 256, 7, 3, 1, 1)) == Conv2dAlgo::kWinograd4);  // 4 tiles against 16
  // 5x5 maps: 4 tiles of F(4x4) (144 products) against 9 of F(2x2) (144):
  // F(2x2) or im2col, as 2x2 maps below.
  CHECK(conv2d_pick_algo(square(64, 256, 256, 5, 3, 1, 1)) != Conv2dAlgo::kWinograd4);
  CHECK(conv2d_pick_algo(square(64, 32, 32, 5, 3, 1, 1)) == Conv2dAlgo::kIm2colGemm);  // too few for F(2x2)
  // 2x2 maps (one F(2x2) tile): im2col with AVX-512, F(2x2) with AVX2.
#if defined(__AVX512F__)
  CHECK(conv2d_pick_algo(square(64, 512, 512, 2, 3, 1, 1)) == Conv2dAlgo::kIm2colGemm);
#else
  CHECK(conv2d_pick_algo(square(64, 512, 512, 2, 3, 1, 1)) == Conv2dAlgo::kWinograd);
#endif
  CHECK(conv2d_pick_algo(square(64, 32, 32, 8, 3, 1, 1)) == Conv2dAlgo::kWinograd4);
  CHECK(conv2d_pick_algo(square(64, 16, 16, 8, 3, 1, 1)) == Conv2dAlgo::kIm2colGemm);
  CHECK(conv2d_pick_algo(square(64, 128, 256, 16, 3, 2, 1)) == Conv2dAlgo::kIm2colGemm);  // stride 2, 8x8 out
  CHECK(conv2d_pick_algo(square(64, 128, 256, 16, 1, 2, 0)) == Conv2dAlgo::kIm2colGemm);  // 1x1
  CHECK(conv2d_pick_algo(square(64, 64, 128, 32, 3, 2, 1)) == Conv2dAlgo::kShiftedPlanes);  // 16x16 out
}

TEST_CASE("conv2d kAuto: strided passes by output size and channels per ISA") {
  auto resolve = [](const Conv2dGeometry& g, Conv2dPass pass) { return conv2d_resolve_algo(g, pass); };
  const Conv2dGeometry small = square(64, 64, 128, 32, 3, 2, 1);  // 16x16 out, 43 pairs per channel
  const Conv2dGeometry wide = square(16, 64, 128, 56, 3, 2, 1);   // 28x28 out
  const Conv2dGeometry narrow = square(8, 16, 32, 128, 3, 2, 1);  // 64x64 out, 11 pairs
  const Conv2dGeometry one_by_one = square(16, 64, 128, 56, 1, 2, 0);
  // Grad weight: im2col everywhere; forward: im2col up to 16x16 outputs.
  for (const Conv2dGeometry& g : {small, wide, narrow, one_by_one})
    CHECK(resolve(g, Conv2dPass::kWeight) == Conv2dAlgo::kIm2colGemm);
  CHECK(resolve(small, Conv2dPass::kForward) == Conv2dAlgo::kIm2colGemm);
  CHECK(resolve(narrow, Conv2dPass::kForward) == Conv2dAlgo::kShiftedPlanes);
  CHECK(resolve(narrow, Conv2dPass::kInput) == Conv2dAlgo::kShiftedPlanes);
  // Grad input by phases (im2col) for 1x1 kernels and where a vector's worth
  // of images fits a chunk (16x16 outputs with AVX-512, 22x22 with AVX2).
  CHECK(resolve(one_by_one, Conv2dPass::kInput) == Conv2dAlgo::kIm2colGemm);
  CHECK(resolve(small, Conv2dPass::kInput) == Conv2dAlgo::kIm2colGemm);
  const auto side = static_cast<int64_t>(
      std::sqrt(static_cast<double>(conv2d_plan::kMaxImageGroupCols / conv2d_plan::kImageGroup)));
  INFO("largest square output by phases: ", side, "x", side);
  CHECK(resolve(square(32, 16, 16, 2 * side, 3, 2, 1), Conv2dPass::kInput) == Conv2dAlgo::kIm2colGemm);
  CHECK(resolve(square(32, 16, 16, 2 * side + 2, 3, 2, 1), Conv2dPass::kInput) == Conv2dAlgo::kShiftedPlanes);
#if defined(__AVX512F__)
  // AVX-512: larger strided outputs keep the shifted planes, grad input too.
  CHECK(resolve(wide, Conv2dPass::kForward) == Conv2dAlgo::kShiftedPlanes);
  CHECK(resolve(one_by_one, Conv2dPass::kForward) == Conv2dAlgo::kShiftedPlanes);
  CHECK(resolve(wide, Conv2dPass::kInput) == Conv2dAlgo::kShiftedPlanes);
#else
  // AVX2: im2col from 20 pairs per channel forward, from 32 for 3x3 grad input.
  CHECK(resolve(wide, Conv2dPass::kForward) == Conv2dAlgo::kIm2colGemm);
  CHECK(resolve(one_by_one, Conv2dPass::kForward) == Conv2dAlgo::kIm2colGemm);
  CHECK(resolve(wide, Conv2dPass::kInput) == Conv2dAlgo::kIm2colGemm);
  CHECK(resolve(square(16, 64, 64, 64, 3, 2, 1), Conv2dPass::kInput) == Conv2dAlgo::kIm2colGemm);  // 32 pairs
  CHECK(resolve(square(8, 32, 64, 128, 3, 2, 1), Conv2dPass::kInput) == Conv2dAlgo::kShiftedPlanes);  // 21 pairs
  CHECK(resolve(square(8, 32, 64, 128, 3, 2, 1), Conv2dPass::kForward) == Conv2dAlgo::kIm2colGemm);
#endif
}

TEST_CASE("conv2d kAuto: grad weight under F(4x4) by its own rule") {
  // kAuto's grad weight is bit for bit the forced path's (1 thread): F(4x4)
  // from 32 pairs per channel, also on 4x4 maps where an AVX2 forward takes
  // F(2x2); the direct path below 32 pairs (ops/cpu/conv2d_kernels.cpp).
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  auto dw_of = [](const Conv2dGeometry& g, Conv2dAlgo algo) {
    const std::vector<float> xf = random_values(static_cast<size_t>(g.batch * g.in_channels * g.in_h * g.in_w), 5);
    const std::vector<float> dyf = random_values(static_cast<size_t>(g.batch * g.out_channels * g.out_h * g.out_w), 6);
    std::vector<float> dw(static_cast<size_t>(g.out_channels * g.in_channels * 9));
    conv2d_backward_weight_kernel<float>(g, dyf.data(), xf.data(), dw.data(), nullptr, algo);
    return dw;
  };
  const Conv2dGeometry wide = square(2, 64, 64, 8, 3, 1, 1), narrow = square(2, 32, 32, 8, 3, 1, 1);
  REQUIRE(conv2d_pick_algo(wide) == Conv2dAlgo::kWinograd4);
  REQUIRE(conv2d_pick_algo(narrow) == Conv2dAlgo::kWinograd4);
  CHECK(dw_of(wide, Conv2dAlgo::kAuto) == dw_of(wide, Conv2dAlgo::kWinograd4));
  CHECK(dw_of(wide, Conv2dAlgo::kAuto) != dw_of(wide, Conv2dAlgo::kIm2colGemm));
  CHECK(dw_of(narrow, Conv2dAlgo::kAuto) == dw_of(narrow, Conv2dAlgo::kIm2colGemm));
  CHECK(dw_of(narrow, Conv2dAlgo::kAuto) != dw_of(narrow, Conv2dAlgo::kWinograd4));
  const Conv2dGeometry one_tile = square(2, 64, 64, 4, 3, 1, 1);
  CHECK(dw_of(one_tile, Conv2dAlgo::kAuto) == dw_of(one_tile, Conv2dAlgo::kWinograd4));
  CHECK(dw_of(one_tile, Conv2dAlgo::kAuto) != dw_of(one_tile, Conv2dAlgo::kWinograd));
  omp_set_num_threads(saved);
}

TEST_CASE("conv2d float32 error against float64: direct, Winograd F(2x2) and F(4x4) within their bounds") {
  const AlgoBounds algos[] = {{Conv2dAlgo::kIm2colGemm, "direct (im2col)", {8, 2e-6}, {1e-6, 1e-6}},
                              {Conv2dAlgo::kShiftedPlanes, "direct (shifted planes)", {8, 2e-6}, {1e-6, 1e-6}},
                              {Conv2dAlgo::kWinograd, "F(2x2)", {5, 1e-6}, {1.2e-6, 1e-6}},
                              {Conv2dAlgo::kWinograd4, "F(4x4)", {40, 4e-6}, {3e-6, 2.5e-6}}};
  // Not structured bindings: clang 14 (the fuzz build) cannot capture those in INFO's lambda.
  for (const std::pair<int64_t, int64_t> shape : {std::pair{64, 32}, std::pair{128, 16}, std::pair{256, 8},
                                                  std::pair{512, 4}}) {
    const int64_t C = shape.first, HW = shape.second;
    const Conv2dGeometry g = resnet_shape(C, HW, 2);
    for (const AlgoBounds& a : algos)
      for (Conv2dPass pass : {Conv2dPass::kForward, Conv2dPass::kInput, Conv2dPass::kWeight}) {
        const Conv2dError e = conv2d_float32_error(g, a.algo, pass, 7);
        const Bound bound = pass == Conv2dPass::kWeight ? a.weight : a.data;
        INFO(std::string(a.name), " C=K=", C, " ", HW, "x", HW,
             std::string(pass == Conv2dPass::kForward ? " forward"
                         : pass == Conv2dPass::kInput ? " grad input"
                                                      : " grad weight"),
             ": max e/(uS) ", e.max_u, ", RMS relative ", e.rms_rel, ", max relative ", e.max_rel);
        CHECK((pass == Conv2dPass::kWeight ? e.max_rel : e.max_u) <= bound.max);
        CHECK(e.rms_rel <= bound.rms_rel);
        // Not vacuous: float32 rounding shows (a path computing in float64
        // would read 0 here, and so would a reference run through the path itself).
        CHECK(e.rms_rel > 1e-8);
      }
  }
}

TEST_CASE("conv2d Winograd F(4x4): error against the direct path's, same inputs") {
  // The ratio to the im2col path's RMS error (the most accurate direct
  // path): measured 7.0x (64 -> 64 at 32x32) and 7.9x (512 -> 512 at 4x4),
  // F(2x2) 1.7x and 1.8x.
  for (const std::pair<int64_t, int64_t> shape : {std::pair{64, 32}, std::pair{512, 4}}) {
    const int64_t C = shape.first, HW = shape.second;
    const Conv2dGeometry g = resnet_shape(C, HW, 2);
    const double direct = conv2d_float32_error(g, Conv2dAlgo::kIm2colGemm, Conv2dPass::kForward, 11).rms_rel;
    const double f2 = conv2d_float32_error(g, Conv2dAlgo::kWinograd, Conv2dPass::kForward, 11).rms_rel;
    const double f4 = conv2d_float32_error(g, Conv2dAlgo::kWinograd4, Conv2dPass::kForward, 11).rms_rel;
    INFO("C=K=", C, " ", HW, "x", HW, ": RMS relative direct ", direct, ", F(2x2) ", f2, ", F(4x4) ", f4);
    CHECK(f2 <= 2.5 * direct);
    CHECK(f4 <= 12 * direct);
  }
}

TEST_CASE("backends::cpu::set_conv_allow_winograd4(false): F(2x2) wherever F(4x4) would run, every pass") {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);  // bit-for-bit comparisons of paths
  const Conv2dGeometry g = square(2, 64, 64, 8, 3, 1, 1);
  const size_t nx = static_cast<size_t>(g.batch * g.in_channels * g.in_h * g.in_w);
  const size_t ny = static_cast<size_t>(g.batch * g.out_channels * g.out_h * g.out_w);
  const std::vector<float> x = random_values(nx, 21), w = random_values(static_cast<size_t>(64 * 64 * 9), 22),
                           dy = random_values(ny, 23);
  struct Out {
    std::vector<float> y, dx, dw;
    bool operator==(const Out&) const = default;
  };
  auto run = [&](Conv2dAlgo algo) {
    Out o{std::vector<float>(ny), std::vector<float>(nx), std::vector<float>(w.size())};
    conv2d_forward_kernel<float>(g, x.data(), w.data(), nullptr, o.y.data(), algo);
    conv2d_backward_input_kernel<float>(g, dy.data(), w.data(), o.dx.data(), algo);
    conv2d_backward_weight_kernel<float>(g, dy.data(), x.data(), o.dw.data(), nullptr, algo);
    return o;
  };
  const Out f2 = run(Conv2dAlgo::kWinograd), f4 = run(Conv2dAlgo::kWinograd4);
  REQUIRE_FALSE(f2 == f4);
  CHECK(backends::cpu::conv_allow_winograd4());  // the default
  CHECK(run(Conv2dAlgo::kAuto) == f4);
  {
    backends::BackendSettingsGuard guard({.cpu_conv_allow_winograd4 = false});
    CHECK(conv2d_pick_algo(g) == Conv2dAlgo::kWinograd);
    CHECK(run(Conv2dAlgo::kAuto) == f2);
    CHECK(run(Conv2dAlgo::kWinograd4) == f4);  // an explicit choice stays
  }
  CHECK(run(Conv2dAlgo::kAuto) == f4);
  omp_set_num_threads(saved);
}

TEST_CASE("conv2d Winograd with an inf or NaN input: the outputs that read it, as the direct path") {
  // The transforms mixed a tile's values, so one inf made every output of its
  // tile NaN (768 NaN outputs for one inf pixel, where PyTorch and the direct
  // path give inf only to the 9 that read it): such a pass now runs direct.
  const Conv2dGeometry g = square(1, 64, 64, 16, 3, 1, 1);
  const size_t nx = static_cast<size_t>(64 * 16 * 16), ny = nx;
  std::vector<float> x = random_values(nx, 31), dy = random_values(ny, 32);
  const std::vector<float> w = random_values(static_cast<size_t>(64 * 64 * 9), 33);
  x[5 * 256 + 7 * 16 + 9] = std::numeric_limits<float>::infinity();
  x[9 * 256 + 2 * 16 + 3] = std::numeric_limits<float>::quiet_NaN();
  dy[3 * 256 + 8 * 16 + 8] = -std::numeric_limits<float>::infinity();
  auto run = [&](Conv2dAlgo algo) {
    std::vector<float> y(ny), dx(nx);
    conv2d_forward_kernel<float>(g, x.data(), w.data(), nullptr, y.data(), algo);
    conv2d_backward_input_kernel<float>(g, dy.data(), w.data(), dx.data(), algo);
    return std::pair{y, dx};
  };
  const auto direct = run(Conv2dAlgo::kIm2colGemm);
  for (Conv2dAlgo algo : {Conv2dAlgo::kWinograd, Conv2dAlgo::kWinograd4}) {
    const auto got = run(algo);
    for (const auto& [a, b] : {std::pair{&got.first, &direct.first}, std::pair{&got.second, &direct.second}}) {
      int nan_a = 0, nan_b = 0, inf_b = 0, mismatched = 0;
      for (size_t i = 0; i < a->size(); ++i) {
        nan_a += std::isnan((*a)[i]), nan_b += std::isnan((*b)[i]), inf_b += std::isinf((*b)[i]);
        const bool same = std::isfinite((*b)[i]) ? std::abs((*a)[i] - (*b)[i]) <= 1e-4f * (1 + std::abs((*b)[i]))
                                                 : std::isnan((*b)[i]) ? std::isnan((*a)[i]) : (*a)[i] == (*b)[i];
        mismatched += !same;
      }
      CHECK(inf_b > 0);
      CHECK(nan_a == nan_b);
      CHECK(mismatched == 0);
    }
  }
}
