// The float32 accuracy of conv2d's Winograd paths against float64, on the
// CIFAR ResNet-18 3x3 stride-1 shapes (2 images; weights as PyTorch's default
// init, unit normal inputs), forward and grad input: the stated bounds.
//
// Measured (bench/bench_conv_accuracy, 8 images, 2 seeds; e_i the error of
// output i, S_i = sum |w||x| of its terms, u = 2^-24), AVX-512 build:
//                            max e_i / (u S_i)    RMS e / RMS y
//   im2col (direct)           0.7 - 1.4          1.6e-7 - 2.9e-7
//   shifted planes (direct)   4.5 - 5.2          4.2e-7 - 5.9e-7   (16x16, 32x32 maps)
//   F(2x2)                    1.4 - 2.9          2.6e-7 - 5.3e-7
//   F(4x4)                   14.5 - 25.6         1.1e-6 - 2.4e-6
// F(4x4) loses 2-3 bits more than the direct sums (its transforms multiply
// by up to 8 and add up to 6 terms, each way), F(2x2) about none. The bounds
// sit about 1.5x above the worst measured. They catch a coefficient of a
// transform off by 2^-16 (planted: A^T's 1/8 as 0.125 * (1 + 2^-16) gives
// an RMS error of 4.2e-6 at 4x4 maps; off by 2^-13, a max of 276 u S);
// smaller slips are caught by the float64 checks of tests/test_conv2d.cpp.
// Lavin and Gray's points (0, +-1, +-2) instead of ours gave 1.5x the RMS
// and 2.5x the max error in a simulation (ops/cpu/conv2d_winograd_transforms.h).
#include <string>

#include "tests/conv2d_accuracy.h"
#include "tests/test_util.h"

using namespace minidl;
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

struct Bound {
  double max_u, rms_rel;
};

}  // namespace

TEST_CASE("conv2d float32 error against float64: direct, Winograd F(2x2) and F(4x4) within their bounds") {
  const struct {
    Conv2dAlgo algo;
    const char* name;
    Bound bound;
  } algos[] = {{Conv2dAlgo::kIm2colGemm, "direct (im2col)", {8, 2e-6}},
               {Conv2dAlgo::kShiftedPlanes, "direct (shifted planes)", {8, 2e-6}},
               {Conv2dAlgo::kWinograd, "F(2x2)", {5, 1e-6}},
               {Conv2dAlgo::kWinograd4, "F(4x4)", {40, 4e-6}}};
  // Not structured bindings: clang 14 (the fuzz build) cannot capture those in INFO's lambda.
  for (const std::pair<int64_t, int64_t> shape : {std::pair{64, 32}, std::pair{128, 16}, std::pair{256, 8},
                                                  std::pair{512, 4}}) {
    const int64_t C = shape.first, HW = shape.second;
    const Conv2dGeometry g = resnet_shape(C, HW, 2);
    for (const auto& a : algos)
      for (bool grad_input : {false, true}) {
        const Conv2dError e = conv2d_float32_error(g, a.algo, grad_input, 7);
        INFO(std::string(a.name), " C=K=", C, " ", HW, "x", HW, std::string(grad_input ? " grad input" : " forward"),
             ": max e/(uS) ", e.max_u, ", RMS relative ", e.rms_rel);
        CHECK(e.max_u <= a.bound.max_u);
        CHECK(e.rms_rel <= a.bound.rms_rel);
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
    const double direct = conv2d_float32_error(g, Conv2dAlgo::kIm2colGemm, false, 11).rms_rel;
    const double f2 = conv2d_float32_error(g, Conv2dAlgo::kWinograd, false, 11).rms_rel;
    const double f4 = conv2d_float32_error(g, Conv2dAlgo::kWinograd4, false, 11).rms_rel;
    INFO("C=K=", C, " ", HW, "x", HW, ": RMS relative direct ", direct, ", F(2x2) ", f2, ", F(4x4) ", f4);
    CHECK(f2 <= 2.5 * direct);
    CHECK(f4 <= 12 * direct);
  }
}
