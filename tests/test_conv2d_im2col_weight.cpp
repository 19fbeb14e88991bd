// The im2col path's weight gradient (ops/cpu/conv2d_im2col_weight.cpp) at
// the edges of its blocking, against the direct loops of
// tests/conv_reference.h: x transposed 8 channels at a time (channel counts
// that leave a partial group, and with AVX2 a partial second tile of 4),
// maps whose pixel counts are not multiples of 8 (the tails of the 8 x 8
// transposes of x and dy), output channel counts that need panels of 3 and
// of 2 vectors mixed, chunks cut short by the size of dY^T, the untransposed path (1x1 stride 2); 1, 2 and 3
// threads; and the column order of ops/cpu/conv2d_chunk_plan.h
// (pixel groups of whole panels first: no panel straddles two of them).
#include <omp.h>

#include <cmath>
#include <cstring>
#include <type_traits>

#include "minidl/ops/cpu/conv2d_chunk_plan.h"
#include "minidl/ops/cpu/conv2d_kernels.h"
#include "tests/conv_reference.h"
#include "tests/conv_geometry.h"
#include "tests/test_util.h"

using namespace minidl;
using minidl::testing::square;
using minidl::testing::conv_reference;
using minidl::testing::ConvProblem;
using minidl::testing::random_values;

namespace {

ConvProblem problem_of(const Conv2dGeometry& g) {
  ConvProblem p;
  p.batch = g.batch, p.in_channels = g.in_channels, p.out_channels = g.out_channels;
  p.in = {1, g.in_h, g.in_w}, p.kernel = {1, g.kernel_h, g.kernel_w};
  p.stride = {1, g.stride_h, g.stride_w}, p.padding = {0, g.pad_h, g.pad_w};
  return p;
}

// dw of the im2col path in T, for x and dy rounded to T.
template <class T>
std::vector<T> grad_weight(const Conv2dGeometry& g, const std::vector<double>& x, const std::vector<double>& dy) {
  const std::vector<T> xt(x.begin(), x.end()), dyt(dy.begin(), dy.end());
  std::vector<T> dw(static_cast<size_t>(g.out_channels * g.in_channels * g.kernel_h * g.kernel_w), T(-1));
  conv2d_backward_weight_kernel<T>(g, dyt.data(), xt.data(), dw.data(), nullptr, Conv2dAlgo::kIm2colGemm);
  return dw;
}

template <class T>
void check_against_reference(const Conv2dGeometry& g, uint64_t seed) {
  auto rounded = [](std::vector<double> v) {
    for (double& e : v) e = static_cast<double>(static_cast<T>(e));
    return v;
  };
  const ConvProblem p = problem_of(g);
  const std::vector<double> x = rounded(random_values(static_cast<size_t>(p.x_size()), seed));
  const std::vector<double> dy = rounded(random_values(static_cast<size_t>(p.y_size()), seed + 1));
  const std::vector<double> w(static_cast<size_t>(p.w_size())), b(static_cast<size_t>(g.out_channels));
  const auto ref = conv_reference(p, x, w, b, dy);
  const std::vector<T> dw = grad_weight<T>(g, x, dy);
  // Each entry sums N * Ho * Wo products of unit normals.
  const double tol = (std::is_same_v<T, float> ? 2e-5 : 1e-12) * std::sqrt(double(g.batch * g.out_h * g.out_w));
  int64_t bad = 0;
  for (size_t i = 0; i < dw.size(); ++i)
    bad += !(std::abs(static_cast<double>(dw[i]) - ref.dw[i]) <= tol * (1 + std::abs(ref.dw[i])));
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("im2col grad weight at the edges of its blocking (float32 and float64)") {
  struct Case {
    Conv2dGeometry g;
    const char* what;
  };
  const std::vector<Case> cases = {
      {square(3, 13, 40, 9, 3, 2, 1),
       "x transposed: 13 channels (8 + 5), 81 input pixels, 25 output pixels, 40 output channels "
       "(AVX-512: one panel of 3 vectors, partly used; AVX2: 5 vectors, one panel of 3 and one of 2)"},
      {square(2, 16, 48, 8, 3, 1, 1), "48 output channels: AVX-512 one panel of 3 vectors, AVX2 two"},
      {square(2, 8, 80, 6, 3, 2, 1), "80 output channels: 5 AVX-512 vectors (3 + 2), 10 AVX2 ones (3 + 3 + 2 + 2)"},
      {square(2, 4, 7, 5, 3, 1, 1), "fewer than 8 input and output channels: only partial blocks"},
      {square(37, 12, 36, 4, 3, 1, 1), "4x4 maps, 37 images: several chunks, the last one smaller"},
      {square(70, 4, 160, 4, 3, 1, 1),
       "160 output channels: chunks cut to keep dY^T within 512 KB (float 35 + 35 images, double 24 + 24 + 22)"},
      {square(5, 24, 20, 8, 1, 2, 0), "1x1 stride 2: x not transposed (a quarter of it is read)"},
      {square(3, 17, 33, 7, 2, 2, 0), "2x2 kernel stride 2, no padding: x not transposed, odd sizes"},
  };
  uint64_t seed = 40;
  for (const Case& c : cases) {
    INFO(c.what);
    check_against_reference<float>(c.g, seed);
    check_against_reference<double>(c.g, seed + 2);
    seed += 4;
  }
}

TEST_CASE("im2col grad weight on 1, 2 and 3 threads: right, and the same bits run to run") {
  // The threads split the input channels (units of 8 when x is transposed,
  // tiles otherwise; here with a partial last unit). The chunks of images
  // depend on the thread count, so the bits do too; with one count they
  // must not change from run to run.
  const int saved = omp_get_max_threads();
  for (const Conv2dGeometry& g : {square(32, 20, 40, 8, 3, 2, 1), square(64, 52, 64, 8, 1, 2, 0)}) {
    omp_set_num_threads(3);
    REQUIRE(conv2d_threads(g) == 3);
    const ConvProblem p = problem_of(g);
    const auto x = random_values(static_cast<size_t>(p.x_size()), 5);
    const auto dy = random_values(static_cast<size_t>(p.y_size()), 6);
    for (int threads : {1, 2, 3}) {
      INFO("threads=", threads, " k=", g.kernel_h);
      omp_set_num_threads(threads);
      check_against_reference<float>(g, 7);
      const std::vector<float> a = grad_weight<float>(g, x, dy), b = grad_weight<float>(g, x, dy);
      CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
    }
  }
  omp_set_num_threads(saved);
}

TEST_CASE("im2col plan: pixel groups of whole panels first, no panel straddles two of them") {
  // 3x3 stride 2 on 8x8 maps: 4x4 outputs in 4 groups (inner 9 pixels, two
  // edges of 3, the corner), 64 images: 576, 192, 192 and 64 columns.
  const Conv2dGeometry g = square(64, 8, 8, 8, 3, 2, 1);
  using conv2d_plan::ChunkPlan;
  using conv2d_plan::ColumnOrder;
  for (int64_t nr : {24, 32, 48})
    for (ColumnOrder order : {ColumnOrder::kPixelClasses, ColumnOrder::kImagesInner}) {
      INFO("nr=", nr, " order=", static_cast<int>(order));
      const ChunkPlan plan(g, 64, nr, order);
      REQUIRE(plan.cols == 64 * 16);
      // Every panel's columns use the same taps (the same kernel row and column ranges).
      auto taps_of = [&](int64_t j) {
        return std::pair(conv2d_plan::tap_range(plan.oh[plan.col(j)], 2, 1, 1, 8, 3),
                         conv2d_plan::tap_range(plan.ow[plan.col(j)], 2, 1, 1, 8, 3));
      };
      int64_t mixed = 0;
      for (int64_t p = 0; p < plan.panels; ++p)
        for (int64_t j = p * nr + 1; j < std::min(plan.cols, (p + 1) * nr); ++j)
          if (taps_of(j) != taps_of(p * nr)) {
            ++mixed;
            break;
          }
      CHECK(mixed == 0);
      // And the columns are every output pixel once.
      std::vector<int> seen(static_cast<size_t>(plan.cols));
      for (int64_t q : plan.column_of) ++seen[static_cast<size_t>(q)];
      CHECK(std::count(seen.begin(), seen.end(), 1) == plan.cols);
    }
}
