// conv2d: forward and both grads against direct loops written here (double),
// over many geometries (stride, padding, dilation, groups, depthwise,
// non-square kernels, bias, unbatched, images big enough for several cache
// blocks); the raw-pointer kernels with each algorithm forced (shifted planes,
// and im2col + GEMM on small maps with many channels: several K blocks,
// chunks of images with a remainder, edge tiles, padding taps skipped);
// float64 gradient checks on odd shapes; 1 vs several threads; error paths
// with PyTorch's wording.
#include <omp.h>

#include <cmath>
#include <random>
#include <type_traits>

#include "minidl/ops/cpu/conv2d_kernels.h"
#include "tests/conv_geometry.h"
#include "tests/test_util.h"

using namespace minidl;
using minidl::testing::square;
using minidl::testing::allclose;
using minidl::testing::check_gradients;

namespace {

struct Config {
  int64_t N, C, H, W, K, kH, kW;
  Conv2dParams p;
  bool bias = true;
  bool unbatched = false;
};

std::string describe(const Config& c) {
  std::ostringstream os;
  os << "N=" << c.N << " C=" << c.C << " " << c.H << "x" << c.W << " K=" << c.K << " k=" << c.kH << "x" << c.kW
     << " stride=" << c.p.stride[0] << "," << c.p.stride[1] << " pad=" << c.p.padding[0] << "," << c.p.padding[1]
     << " dil=" << c.p.dilation[0] << "," << c.p.dilation[1] << " groups=" << c.p.groups << " bias=" << c.bias
     << " unbatched=" << c.unbatched;
  return os.str();
}

Conv2dParams params(int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw, int64_t groups) {
  Conv2dParams p;
  p.stride = {sh, sw};
  p.padding = {ph, pw};
  p.dilation = {dh, dw};
  p.groups = groups;
  return p;
}

Conv2dGeometry geometry(const Config& c) {
  Conv2dGeometry g;
  g.batch = c.N, g.in_channels = c.C, g.in_h = c.H, g.in_w = c.W, g.out_channels = c.K;
  g.kernel_h = c.kH, g.kernel_w = c.kW;
  g.stride_h = c.p.stride[0], g.stride_w = c.p.stride[1], g.pad_h = c.p.padding[0], g.pad_w = c.p.padding[1];
  g.dilation_h = c.p.dilation[0], g.dilation_w = c.p.dilation[1], g.groups = c.p.groups;
  conv2d_set_output_size(g);
  return g;
}

// Calls f(n, k, c, i, j, kh, kw, xi, xj) for every term of the direct sum
// y[n][k][i][j] += w[k][c][kh][kw] * x[n][group(k)*Cg + c][xi][xj] (inside the image only).
template <class F>
void for_each_term(const Conv2dGeometry& g, F f) {
  const int64_t Cg = g.in_channels / g.groups, Kg = g.out_channels / g.groups;
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t k = 0; k < g.out_channels; ++k)
      for (int64_t i = 0; i < g.out_h; ++i)
        for (int64_t j = 0; j < g.out_w; ++j)
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t kh = 0; kh < g.kernel_h; ++kh)
              for (int64_t kw = 0; kw < g.kernel_w; ++kw) {
                const int64_t xi = i * g.stride_h - g.pad_h + kh * g.dilation_h;
                const int64_t xj = j * g.stride_w - g.pad_w + kw * g.dilation_w;
                if (xi < 0 || xi >= g.in_h || xj < 0 || xj >= g.in_w) continue;
                f(n, k, (k / Kg) * Cg + c, c, i, j, kh, kw, xi, xj);
              }
}

struct Reference {
  std::vector<double> y, dx, dw, db;
};

// Direct loops: y, and the grads of sum(y * dy).
Reference reference(const Conv2dGeometry& g, const std::vector<double>& x, const std::vector<double>& w,
                    const std::vector<double>& b, const std::vector<double>& dy) {
  const int64_t Cg = g.in_channels / g.groups;
  const int64_t HW = g.in_h * g.in_w, OHW = g.out_h * g.out_w, taps = g.kernel_h * g.kernel_w;
  Reference r;
  r.y.assign(static_cast<size_t>(g.batch * g.out_channels * OHW), 0.0);
  r.dx.assign(x.size(), 0.0);
  r.dw.assign(w.size(), 0.0);
  r.db.assign(static_cast<size_t>(g.out_channels), 0.0);
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t k = 0; k < g.out_channels; ++k)
      for (int64_t q = 0; q < OHW; ++q) {
        const size_t yi = static_cast<size_t>((n * g.out_channels + k) * OHW + q);
        if (!b.empty()) r.y[yi] = b[static_cast<size_t>(k)];
        r.db[static_cast<size_t>(k)] += dy[yi];
      }
  for_each_term(g, [&](int64_t n, int64_t k, int64_t xc, int64_t c, int64_t i, int64_t j, int64_t kh, int64_t kw,
                       int64_t xi, int64_t xj) {
    const size_t yi = static_cast<size_t>((n * g.out_channels + k) * OHW + i * g.out_w + j);
    const size_t xidx = static_cast<size_t>((n * g.in_channels + xc) * HW + xi * g.in_w + xj);
    const size_t widx = static_cast<size_t>((k * Cg + c) * taps + kh * g.kernel_w + kw);
    r.y[yi] += w[widx] * x[xidx];
    r.dx[xidx] += w[widx] * dy[yi];
    r.dw[widx] += x[xidx] * dy[yi];
  });
  return r;
}

std::vector<double> random_values(size_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> dist;
  std::vector<double> v(n);
  for (double& e : v) e = dist(gen);
  return v;
}

Shape x_shape(const Config& c) { return c.unbatched ? Shape{c.C, c.H, c.W} : Shape{c.N, c.C, c.H, c.W}; }

// Runs conv2d forward + backward in `dtype` and compares with the reference.
void check_against_reference(const Config& c, DType dtype, uint64_t seed) {
  INFO(describe(c), " dtype=", dtype_name(dtype));
  const Conv2dGeometry g = geometry(c);
  const auto xv = random_values(static_cast<size_t>(c.N * c.C * c.H * c.W), seed);
  const auto wv = random_values(static_cast<size_t>(c.K * (c.C / c.p.groups) * c.kH * c.kW), seed + 1);
  const auto bv = c.bias ? random_values(static_cast<size_t>(c.K), seed + 2) : std::vector<double>();
  const Shape y_shape = c.unbatched ? Shape{c.K, g.out_h, g.out_w} : Shape{c.N, c.K, g.out_h, g.out_w};
  const auto dyv = random_values(static_cast<size_t>(numel_of(y_shape)), seed + 3);
  const Reference ref = reference(g, xv, wv, bv, dyv);

  Tensor x = tensor(xv, x_shape(c), dtype).requires_grad_();
  Tensor w = tensor(wv, {c.K, c.C / c.p.groups, c.kH, c.kW}, dtype).requires_grad_();
  Tensor b = c.bias ? tensor(bv, {c.K}, dtype).requires_grad_() : Tensor();
  Tensor y = conv2d(x, w, b, c.p);
  REQUIRE(y.shape() == y_shape);
  const double rtol = dtype == kFloat32 ? 1e-4 : 1e-10, atol = dtype == kFloat32 ? 1e-4 : 1e-10;
  CHECK(allclose(y, tensor(ref.y, y_shape, kFloat64), rtol, atol));
  y.backward(tensor(dyv, y_shape, dtype));
  CHECK(allclose(x.grad(), tensor(ref.dx, x.shape(), kFloat64), rtol, atol));
  CHECK(allclose(w.grad(), tensor(ref.dw, w.shape(), kFloat64), rtol, atol));
  if (c.bias) CHECK(allclose(b.grad(), tensor(ref.db, {c.K}, kFloat64), rtol, atol));
}

std::vector<Config> reference_configs() {
  std::vector<Config> cs;
  // Batch 3, 5 channels, 7x6 images, in many variants.
  for (bool bias : {true, false}) {
    cs.push_back({3, 5, 7, 6, 4, 3, 3, params(1, 1, 1, 1, 1, 1, 1), bias});
    cs.push_back({3, 5, 7, 6, 4, 1, 1, params(1, 1, 0, 0, 1, 1, 1), bias});
    cs.push_back({3, 5, 7, 6, 6, 2, 3, params(1, 1, 0, 0, 1, 1, 1), bias});
  }
  cs.push_back({3, 5, 7, 6, 10, 3, 3, params(1, 1, 1, 1, 1, 1, 5)});   // groups 5, 2 filters each
  cs.push_back({3, 5, 7, 6, 5, 3, 3, params(1, 1, 1, 1, 1, 1, 5)});    // depthwise
  cs.push_back({3, 5, 7, 6, 15, 3, 3, params(1, 1, 1, 1, 1, 1, 5)});   // depthwise, multiplier 3
  cs.push_back({3, 5, 7, 6, 4, 3, 3, params(2, 2, 1, 1, 1, 1, 1)});    // stride 2
  cs.push_back({3, 5, 7, 6, 4, 3, 3, params(2, 2, 0, 0, 1, 1, 1)});
  cs.push_back({3, 5, 7, 6, 4, 1, 1, params(2, 2, 0, 0, 1, 1, 1)});    // 1x1 stride 2 (a ResNet shortcut)
  cs.push_back({3, 5, 7, 6, 4, 3, 3, params(1, 1, 2, 2, 2, 2, 1)});    // dilation 2
  cs.push_back({3, 5, 7, 6, 4, 3, 3, params(1, 1, 0, 0, 2, 2, 1)});
  cs.push_back({3, 5, 7, 6, 4, 2, 3, params(2, 1, 1, 0, 2, 1, 1)});    // everything different per axis
  cs.push_back({3, 5, 7, 6, 4, 2, 3, params(3, 2, 2, 1, 1, 3, 1)});    // stride 3 > kernel height
  cs.push_back({3, 5, 7, 6, 4, 3, 2, params(2, 3, 2, 0, 2, 1, 1)});
  cs.push_back({3, 6, 7, 6, 4, 3, 3, params(2, 1, 1, 1, 1, 2, 2)});    // groups 2 with stride and dilation
  cs.push_back({3, 5, 7, 6, 4, 7, 6, params(1, 1, 0, 0, 1, 1, 1)});    // kernel = image: 1x1 output
  cs.push_back({3, 5, 7, 6, 4, 3, 3, params(1, 1, 3, 4, 1, 1, 1)});    // padding wider than the kernel
  cs.push_back({3, 5, 7, 6, 4, 3, 3, params(5, 5, 1, 1, 1, 1, 1)});    // stride > image
  Config unb{1, 5, 7, 6, 4, 3, 3, params(1, 1, 1, 1, 1, 1, 1)};
  unb.unbatched = true;
  cs.push_back(unb);
  Config unb2{1, 5, 7, 6, 4, 3, 3, params(2, 2, 1, 1, 1, 1, 1)};
  unb2.unbatched = true;
  cs.push_back(unb2);
  cs.push_back({1, 5, 7, 6, 4, 3, 3, params(1, 1, 1, 1, 1, 1, 1)});    // one image: tiles split over threads
  // Tile remainders: 15 and 40 filters (row tiles 8+4+2+1; weight-grad widths 4+2+1 vectors).
  cs.push_back({2, 3, 9, 11, 15, 3, 3, params(1, 1, 1, 1, 1, 1, 1)});
  cs.push_back({2, 3, 9, 11, 40, 3, 3, params(1, 1, 1, 1, 1, 1, 1)});
  // Big enough for several cache blocks of output and weight-grad rows.
  cs.push_back({2, 4, 48, 40, 8, 3, 3, params(1, 1, 1, 1, 1, 1, 1)});
  cs.push_back({1, 4, 48, 40, 8, 3, 3, params(2, 2, 1, 1, 1, 1, 1)});
  cs.push_back({2, 3, 1, 2, 4, 1, 1, params(1, 1, 3, 3, 1, 1, 1)});    // output mostly padding
  // No input channels: y = bias.
  cs.push_back({2, 0, 5, 5, 3, 3, 3, params(1, 1, 1, 1, 1, 1, 1)});
  return cs;
}

}  // namespace

TEST_CASE("conv2d forward and grads match direct loops (float32 and float64)") {
  uint64_t seed = 10;
  for (const Config& c : reference_configs()) {
    check_against_reference(c, kFloat32, seed);
    check_against_reference(c, kFloat64, seed + 100);
    seed += 7;
  }
}

TEST_CASE("conv2d raw kernels on random geometries, every algorithm (float64, 1-3 threads)") {
  const int saved = omp_get_max_threads();
  std::mt19937 rng(2024);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int runs = 0;
  while (runs < 150) {
    Conv2dGeometry g;
    g.groups = pick(1, 3);
    g.batch = pick(1, 3), g.in_channels = pick(0, 4) * g.groups, g.out_channels = pick(1, 11) * g.groups;
    g.in_h = pick(1, 11), g.in_w = pick(1, 11), g.kernel_h = pick(1, 4), g.kernel_w = pick(1, 4);
    g.stride_h = pick(1, 4), g.stride_w = pick(1, 4), g.pad_h = pick(0, 3), g.pad_w = pick(0, 3);
    g.dilation_h = pick(1, 3), g.dilation_w = pick(1, 3);
    if (g.in_h + 2 * g.pad_h < g.dilation_h * (g.kernel_h - 1) + 1 ||
        g.in_w + 2 * g.pad_w < g.dilation_w * (g.kernel_w - 1) + 1)
      continue;
    conv2d_set_output_size(g);
    ++runs;
    omp_set_num_threads(pick(1, 3));
    const int64_t Cg = g.in_channels / g.groups, taps = g.kernel_h * g.kernel_w;
    const auto x = random_values(static_cast<size_t>(g.batch * g.in_channels * g.in_h * g.in_w), rng());
    const auto w = random_values(static_cast<size_t>(g.out_channels * Cg * taps), rng());
    const auto b = random_values(static_cast<size_t>(g.out_channels), rng());
    const auto dy = random_values(static_cast<size_t>(g.batch * g.out_channels * g.out_h * g.out_w), rng());
    const Reference ref = reference(g, x, w, b, dy);
    auto close = [](const std::vector<double>& a, const std::vector<double>& r) {
      for (size_t i = 0; i < a.size(); ++i)
        if (!(std::abs(a[i] - r[i]) <= 1e-10 * (1 + std::abs(r[i])))) return false;
      return true;
    };
    INFO("N=", g.batch, " C=", g.in_channels, " K=", g.out_channels, " ", g.in_h, "x", g.in_w, " k=", g.kernel_h, "x",
         g.kernel_w, " s=", g.stride_h, ",", g.stride_w, " p=", g.pad_h, ",", g.pad_w, " d=", g.dilation_h, ",",
         g.dilation_w, " groups=", g.groups);
    std::vector<Conv2dAlgo> algos = {Conv2dAlgo::kShiftedPlanes, Conv2dAlgo::kIm2colGemm};
    if (conv2d_winograd_applies(g)) algos.insert(algos.end(), {Conv2dAlgo::kWinograd, Conv2dAlgo::kWinograd4});
    for (Conv2dAlgo algo : algos) {
      INFO("algo=", static_cast<int>(algo));
      std::vector<double> y(dy.size()), dx(x.size()), dw(w.size()), db(b.size());
      conv2d_forward_kernel<double>(g, x.data(), w.data(), b.data(), y.data(), algo);
      conv2d_backward_input_kernel<double>(g, dy.data(), w.data(), dx.data(), algo);
      conv2d_backward_weight_kernel<double>(g, dy.data(), x.data(), dw.data(), db.data(), algo);
      CHECK(close(y, ref.y));
      CHECK(close(dx, ref.dx));
      CHECK(close(dw, ref.dw));
      CHECK(close(db, ref.db));
    }
  }
  omp_set_num_threads(saved);
}

namespace {

// Runs the three raw kernels with `algo` in T and checks them against the
// direct loops (computed in double from the same, T-rounded, values).
template <class T>
void check_algo(const Conv2dGeometry& g, Conv2dAlgo algo, uint64_t seed) {
  const int64_t Cg = g.in_channels / g.groups, taps = g.kernel_h * g.kernel_w;
  auto values = [&](int64_t n, uint64_t s) {
    std::vector<double> v = random_values(static_cast<size_t>(n), s);
    for (double& e : v) e = static_cast<double>(static_cast<T>(e));
    return v;
  };
  const auto x = values(g.batch * g.in_channels * g.in_h * g.in_w, seed);
  const auto w = values(g.out_channels * Cg * taps, seed + 1);
  const auto b = values(g.out_channels, seed + 2);
  const auto dy = values(g.batch * g.out_channels * g.out_h * g.out_w, seed + 3);
  const Reference ref = reference(g, x, w, b, dy);
  auto cast = [](const std::vector<double>& v) { return std::vector<T>(v.begin(), v.end()); };
  const std::vector<T> xt = cast(x), wt = cast(w), bt = cast(b), dyt = cast(dy);
  std::vector<T> y(dy.size()), dx(x.size()), dw(w.size()), db(b.size());
  conv2d_forward_kernel<T>(g, xt.data(), wt.data(), bt.data(), y.data(), algo);
  conv2d_backward_input_kernel<T>(g, dyt.data(), wt.data(), dx.data(), algo);
  conv2d_backward_weight_kernel<T>(g, dyt.data(), xt.data(), dw.data(), db.data(), algo);
  // float32: each output sums up to C*k*k (or N*Ho*Wo) products of unit normals.
  const double tol = std::is_same_v<T, float> ? 2e-5 : 1e-12;
  auto close = [&](const std::vector<T>& a, const std::vector<double>& r, int64_t terms) {
    const double scale = tol * std::sqrt(static_cast<double>(std::max<int64_t>(terms, 1)));
    for (size_t i = 0; i < a.size(); ++i)
      if (!(std::abs(static_cast<double>(a[i]) - r[i]) <= scale * (1 + std::abs(r[i])))) return false;
    return true;
  };
  CHECK(close(y, ref.y, Cg * taps));
  CHECK(close(dx, ref.dx, g.out_channels / g.groups * taps));
  CHECK(close(dw, ref.dw, g.batch * g.out_h * g.out_w));
  CHECK(close(db, ref.db, g.batch * g.out_h * g.out_w));
}

// Runs check_algo in float64 and float32 on every case, on 1 and 3 threads.
struct AlgoCase {
  Conv2dGeometry g;
  const char* what;
};
void check_cases(const std::vector<AlgoCase>& cases, Conv2dAlgo algo, uint64_t seed) {
  const int saved = omp_get_max_threads();
  for (const AlgoCase& c : cases)
    for (int threads : {1, 3}) {
      omp_set_num_threads(threads);
      INFO(std::string(c.what), " threads=", threads);
      check_algo<double>(c.g, algo, seed);
      check_algo<float>(c.g, algo, seed + 10);
      seed += 20;
    }
  omp_set_num_threads(saved);
}

}  // namespace

TEST_CASE("conv2d im2col + GEMM path on small maps with many channels (float32 and float64)") {
  const std::vector<AlgoCase> cases = {
      {square(5, 40, 36, 4, 3, 1, 1), "4x4 3x3 pad 1: corner/edge/inner pixels, edge row tiles (36 = 4*8 + 4)"},
      {square(2, 300, 20, 4, 3, 1, 1), "more than one K block of channels (300 > 256)"},
      {square(2, 12, 260, 4, 3, 1, 1), "grad input: more than one K block of output channels"},
      {square(67, 8, 8, 4, 3, 1, 1), "two chunks of images (34 + 33)"},
      {square(3, 24, 40, 8, 3, 2, 1), "stride 2, 8x8 -> 4x4 (ResNet downsampling)"},
      {square(3, 24, 40, 8, 1, 2, 0), "1x1 stride 2 shortcut"},
      {square(3, 16, 24, 8, 3, 1, 1), "8x8 3x3 pad 1"},
      {square(2, 16, 16, 4, 3, 1, 2), "padding 2: outputs whose taps are almost all padding"},
      {square(2, 16, 16, 4, 3, 1, 3), "padding 3 > kernel reach: grad input's forward padded by -1"},
      {square(2, 8, 8, 5, 3, 1, 2, 2), "dilation 2"},
      {square(2, 16, 24, 6, 3, 1, 1, 1, 2), "groups 2"},
      {square(1, 20, 50, 3, 2, 1, 0), "one image, 2x2 kernel, no padding, 50 = 48 + 2 columns of grad weight"},
      // Strided forwards pack whole output rows with loads (ops/cpu/conv2d_pack.h):
      {square(3, 10, 33, 16, 3, 2, 1), "stride 2, 16x16 -> 8x8: rows of 8, padding columns masked"},
      {square(2, 13, 17, 16, 1, 2, 0), "1x1 stride 2, 16x16 -> 8x8, odd channels"},
      {square(1, 19, 21, 9, 3, 2, 1), "one image, 9x9 -> 5x5: rows of 5 straddle the groups of 4"},
      {square(2, 6, 12, 11, 3, 2, 0, 2), "stride 2, dilation 2, no padding"},
      {square(2, 8, 16, 13, 3, 3, 1), "stride 3: gathers only"},
      // Grad input goes phase by phase (ops/cpu/conv2d_im2col_input.cpp):
      {square(2, 8, 16, 9, 3, 2, 1), "stride 2 on 9x9: phases of 5 and 4 rows and columns"},
      {square(2, 8, 16, 8, 5, 2, 2), "5x5 stride 2: phases of 3 and 2 taps, one padded"},
      {square(2, 8, 16, 10, 3, 3, 1), "stride 3: 3 x 3 phases of one tap each"},
      {square(2, 8, 16, 8, 2, 2, 1), "2x2 stride 2 pad 1: a phase's forward padded by -1"},
      {square(3, 8, 16, 7, 1, 2, 1), "1x1 stride 2 pad 1 on 7x7: the odd phases read dy from its second pixel"},
      {square(2, 8, 16, 11, 3, 3, 2, 1, 2), "3x3 stride 3 pad 2, groups 2: phases padded by -1 and 0"},
      // Strided 3x3 forwards order the columns images innermost and copy
      // whole vectors (one pixel of consecutive images) from a transposed x
      // (conv2d_plan::ColumnOrder::kImagesInner); partial blocks of images go column by column:
      {square(37, 12, 20, 8, 3, 2, 1), "stride 2, 8x8 -> 4x4, 37 images: blocks of 16, 16 and 5"},
      {square(18, 9, 17, 9, 3, 2, 1), "stride 2, 9x9 -> 5x5, 18 images, odd channels"},
      {square(32, 8, 12, 10, 3, 2, 1, 1, 2), "stride 2, groups 2, 32 images"},
      {square(16, 300, 9, 6, 3, 2, 1), "stride 2, 16 images, two K blocks of channels (300 > 256)"},
      // Outputs of more than 64 pixels take chunks of 16 images where there are 32 channels or more:
      // (16 images a chunk on 1 thread here; 3 threads cut 32 images into 3 chunks of 11, the gathers)
      {square(48, 32, 24, 32, 3, 2, 1), "stride 2, 32x32 -> 16x16, 48 images: chunks of 16 images"},
      {square(32, 40, 16, 23, 3, 2, 1), "stride 2, 23x23 -> 12x12, 32 images, 40 channels"},
      // Whole row tiles (output channels in 8s) go panel by panel, each over all its taps:
      {square(16, 264, 16, 8, 3, 2, 1), "stride 2, 16 images, 16 outputs, two K blocks (264 > 256), panel by panel"},
      // Grad weight in panels of 2 vectors where the output channels come
      // in multiples of 2 but not 3 vectors (AVX-512: 32 and 64 channels):
      {square(3, 10, 64, 6, 3, 1, 1), "64 output channels"},
      {square(2, 12, 64, 7, 3, 2, 1, 1, 2), "stride 2, groups 2 of 32 output channels"},
  };
  check_cases(cases, Conv2dAlgo::kIm2colGemm, 900);
}

TEST_CASE("conv2d Winograd F(2x2, 3x3) path (float32 and float64)") {
  // Forced, all three passes run Winograd (kAuto keeps grad weight direct on
  // maps of few tiles, or below 32 pairs per channel). Tolerances as for the
  // direct paths: F(2x2)'s transforms are exact, F(4x4)'s lose 2-3 bits in
  // float32 (tests/test_conv2d_winograd.cpp), which these tolerances allow
  // on such small problems.
  const std::vector<AlgoCase> cases = {
      {square(3, 16, 24, 8, 3, 1, 1), "8x8 pad 1 (ResNet): 16 whole tiles per image"},
      {square(2, 5, 7, 7, 3, 1, 1), "odd map: tiles cut by the last row and column"},
      {square(2, 6, 9, 6, 3, 1, 0), "no padding: 4x4 output"},
      {square(2, 6, 9, 5, 3, 1, 2), "padding 2: grad input with no padding"},
      {square(3, 4, 4, 1, 3, 1, 1), "1x1 map: one tile, mostly padding"},
      {square(2, 300, 20, 4, 3, 1, 1), "more than one K block of input channels (300 > 256)"},
      {square(2, 12, 260, 4, 3, 1, 1), "grad input: more than one K block of output channels"},
      {square(40, 8, 10, 6, 3, 1, 1), "several chunks of tiles (360 tiles), a partial last panel"},
      {square(2, 16, 24, 6, 3, 1, 1, 1, 2), "groups 2"},
      {square(2, 0, 3, 4, 3, 1, 1), "no input channels: y is the bias"},
  };
  for (const AlgoCase& c : cases) {
    INFO(std::string(c.what));
    REQUIRE(conv2d_winograd_applies(c.g));
  }
  check_cases(cases, Conv2dAlgo::kWinograd, 1300);
  check_cases(cases, Conv2dAlgo::kWinograd4, 1700);
  // Only where it applies.
  CHECK_FALSE(conv2d_winograd_applies(square(2, 4, 4, 8, 3, 2, 1)));
  CHECK_FALSE(conv2d_winograd_applies(square(2, 4, 4, 8, 1, 1, 0)));
  CHECK_FALSE(conv2d_winograd_applies(square(2, 4, 4, 8, 3, 1, 2, 2)));
  CHECK_FALSE(conv2d_winograd_applies(square(2, 4, 4, 8, 3, 1, 3)));
  const Conv2dGeometry strided = square(1, 2, 2, 6, 3, 2, 1);
  std::vector<float> x(72), w(36), y(18);
  CHECK_THROWS_CONTAINS(conv2d_forward_kernel<float>(strided, x.data(), w.data(), nullptr, y.data(),
                                                     Conv2dAlgo::kWinograd),
                        "the Winograd path needs a 3x3 kernel, stride 1");
}

TEST_CASE("conv2d multi-threaded paths (problems big enough for 3 threads)") {
  // Small problems run on one thread (conv2d_threads), so these are sized to
  // get 3: chunks of images spread over threads, one chunk split inside,
  // shifted planes split over images or over the tiles of one image.
  const int saved = omp_get_max_threads();
  omp_set_num_threads(3);
  struct Case {
    Conv2dGeometry g;
    Conv2dAlgo algo;
    const char* what;
  };
  const std::vector<Case> cases = {
      {square(6, 64, 64, 4, 3, 1, 1), Conv2dAlgo::kIm2colGemm, "im2col, chunks over threads"},
      {square(1, 192, 192, 4, 3, 1, 1), Conv2dAlgo::kIm2colGemm, "im2col, one chunk split inside"},
      {square(3, 96, 96, 8, 3, 2, 1), Conv2dAlgo::kIm2colGemm, "im2col, stride 2 (col2im)"},
      {square(4, 16, 16, 20, 3, 1, 1), Conv2dAlgo::kShiftedPlanes, "shifted planes over images"},
      {square(1, 32, 32, 24, 3, 1, 1), Conv2dAlgo::kShiftedPlanes, "shifted planes, one image's tiles"},
      {square(6, 64, 64, 8, 3, 1, 1), Conv2dAlgo::kWinograd, "Winograd, chunks over threads"},
      {square(1, 192, 192, 4, 3, 1, 1), Conv2dAlgo::kWinograd, "Winograd, one chunk split inside"},
      {square(6, 64, 64, 8, 3, 1, 1), Conv2dAlgo::kWinograd4, "Winograd F(4x4), chunks over threads"},
      {square(1, 192, 192, 4, 3, 1, 1), Conv2dAlgo::kWinograd4, "Winograd F(4x4), one chunk split inside"},
  };
  for (const Case& c : cases) {
    INFO(std::string(c.what));
    REQUIRE(conv2d_threads(c.g) == 3);
    check_algo<float>(c.g, c.algo, 31);
    check_algo<double>(c.g, c.algo, 32);
  }
  omp_set_num_threads(saved);
}

TEST_CASE("conv2d: the two algorithms agree on the ResNet-18 layer shapes, scaled down") {
  // Same channel structure as CIFAR ResNet-18's stages 3-4 and their
  // downsampling convs, with fewer channels and images (the test must be fast).
  for (const Conv2dGeometry& g : {square(4, 64, 64, 4, 3, 1, 1), square(4, 32, 64, 8, 3, 2, 1),
                                  square(4, 32, 64, 8, 1, 2, 0), square(4, 32, 32, 8, 3, 1, 1)}) {
    INFO("C=", g.in_channels, " K=", g.out_channels, " ", g.in_h, "x", g.in_w, " k=", g.kernel_h, " s=", g.stride_h);
    for (Conv2dAlgo algo : {Conv2dAlgo::kShiftedPlanes, Conv2dAlgo::kIm2colGemm}) {
      check_algo<float>(g, algo, 77);
      check_algo<double>(g, algo, 78);
    }
  }
}

TEST_CASE("conv2d: empty batch") {
  Tensor x = zeros({0, 3, 5, 5});
  Tensor w = ones({4, 3, 3, 3});
  Tensor y = conv2d(x, w, Tensor(), params(1, 1, 1, 1, 1, 1, 1));
  CHECK(y.shape() == Shape{0, 4, 5, 5});
}

TEST_CASE("conv2d raw-pointer kernels (no Tensor)") {
  // 1 image, 1 channel 3x3 of 1..9, one 2x2 kernel of ones, padding 0:
  // each output is the sum of a 2x2 window.
  Conv2dGeometry g;
  g.batch = 1, g.in_channels = 1, g.in_h = 3, g.in_w = 3, g.out_channels = 1, g.kernel_h = 2, g.kernel_w = 2;
  conv2d_set_output_size(g);
  REQUIRE(g.out_h == 2);
  REQUIRE(g.out_w == 2);
  const float x[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  const float w[4] = {1, 1, 1, 1};
  const float bias[1] = {0.5f};
  float y[4];
  conv2d_forward_kernel<float>(g, x, w, bias, y);
  CHECK(y[0] == 12.5f);
  CHECK(y[1] == 16.5f);
  CHECK(y[2] == 24.5f);
  CHECK(y[3] == 28.5f);
  // dy = ones: dx counts how many windows cover each pixel; dw sums each window position.
  const float dy[4] = {1, 1, 1, 1};
  float dx[9], dw[4], db[1];
  conv2d_backward_input_kernel<float>(g, dy, w, dx);
  const float expect_dx[9] = {1, 2, 1, 2, 4, 2, 1, 2, 1};
  for (int i = 0; i < 9; ++i) CHECK(dx[i] == expect_dx[i]);
  conv2d_backward_weight_kernel<float>(g, dy, x, dw, db);
  CHECK(dw[0] == 12.0f);  // 1+2+4+5
  CHECK(dw[1] == 16.0f);
  CHECK(dw[2] == 24.0f);
  CHECK(dw[3] == 28.0f);
  CHECK(db[0] == 4.0f);
}

TEST_CASE("conv2d gives the same result on 1 and 3 threads") {
  const int saved = omp_get_max_threads();
  const Config c{4, 16, 20, 18, 16, 3, 3, params(1, 1, 1, 1, 1, 1, 1)};  // enough work for 3 threads
  std::vector<Tensor> outs;
  for (int threads : {1, 3}) {
    omp_set_num_threads(threads);
    manual_seed(5);
    Tensor x = randn(x_shape(c)).requires_grad_();
    Tensor w = randn({c.K, c.C, c.kH, c.kW}).requires_grad_();
    Tensor y = conv2d(x, w, Tensor(), c.p);
    y.backward(ones_like(y));
    outs.insert(outs.end(), {y, x.grad(), w.grad()});
  }
  omp_set_num_threads(saved);
  for (size_t i = 0; i < 3; ++i) CHECK(allclose(outs[i], outs[i + 3], 1e-5, 1e-5));
}

TEST_CASE("conv2d float64 gradient checks on odd shapes") {
  struct Case {
    Shape x, w;
    Conv2dParams p;
    bool bias;
  };
  const std::vector<Case> cases = {
      {{2, 3, 5, 4}, {2, 3, 3, 3}, params(1, 1, 1, 1, 1, 1, 1), true},
      {{1, 3, 5, 7}, {3, 3, 2, 3}, params(2, 1, 1, 0, 1, 2, 1), true},
      {{2, 4, 5, 5}, {6, 2, 3, 1}, params(1, 2, 0, 1, 2, 1, 2), false},
      {{2, 3, 5, 4}, {3, 1, 3, 3}, params(1, 1, 1, 1, 1, 1, 3), true},  // depthwise
      {{3, 5, 3}, {2, 3, 1, 1}, params(1, 1, 0, 0, 1, 1, 1), true},      // unbatched 1x1
      {{1, 2, 7, 5}, {3, 2, 3, 3}, params(3, 2, 2, 1, 1, 1, 1), true},   // stride 3
  };
  uint64_t seed = 77;
  for (const Case& k : cases) {
    INFO("x=", shape_str(k.x), " w=", shape_str(k.w));
    manual_seed(seed++);
    Tensor x = randn(k.x, kFloat64).requires_grad_();
    Tensor w = randn(k.w, kFloat64).requires_grad_();
    Tensor b = k.bias ? randn({k.w[0]}, kFloat64).requires_grad_() : Tensor();
    std::vector<Tensor> inputs = {x, w};
    if (k.bias) inputs.push_back(b);
    check_gradients(
        [&](const std::vector<Tensor>& in) { return conv2d(in[0], in[1], k.bias ? in[2] : Tensor(), k.p); },
        inputs);
  }
}

TEST_CASE("conv2d only computes the grads that are needed") {
  manual_seed(3);
  Tensor x = randn({2, 3, 6, 6});  // no grad: the first layer of a network
  Tensor w = randn({4, 3, 3, 3}).requires_grad_();
  Tensor b = zeros({4}).requires_grad_();
  Tensor y = conv2d(x, w, b, params(1, 1, 1, 1, 1, 1, 1));
  y.sum().backward();
  CHECK(!x.grad().defined());
  CHECK(w.grad().defined());
  CHECK(allclose(b.grad(), full({4}, 2 * 36)));  // N * H * W ones per filter
}

TEST_CASE("conv2d errors use PyTorch's wording") {
  const Tensor w = zeros({64, 3, 3, 3});
  const Conv2dParams p1 = params(1, 1, 0, 0, 1, 1, 1);
  CHECK_THROWS_CONTAINS(conv2d(zeros({2, 4, 32, 32}), w, Tensor(), p1),
                        "Given groups=1, weight of size [64, 3, 3, 3], expected input[2, 4, 32, 32] to have 3 "
                        "channels, but got 4 channels instead");
  CHECK_THROWS_CONTAINS(conv2d(zeros({4, 32, 32}), w, Tensor(), p1),
                        "expected input[1, 4, 32, 32] to have 3 channels, but got 4 channels instead");
  CHECK_THROWS_CONTAINS(conv2d(zeros({2, 3}), w, Tensor(), p1),
                        "Expected 3D (unbatched) or 4D (batched) input to conv2d, but got input of size: [2, 3]");
  CHECK_THROWS_CONTAINS(conv2d(zeros({2, 3, 4, 4, 4}), w, Tensor(), p1),
                        "Expected 3D (unbatched) or 4D (batched) input to conv2d, but got input of size: [2, 3, 4, 4, 4]");
  CHECK_THROWS_CONTAINS(conv2d(zeros({2, 3, 2, 2}), w, Tensor(), p1),
                        "Calculated padded input size per channel: (2 x 2). Kernel size: (3 x 3). Kernel size can't "
                        "be greater than actual input size");
  CHECK_THROWS_CONTAINS(conv2d(zeros({1, 3, 3, 3}), w, Tensor(), params(1, 1, 0, 0, 1, 2, 1)),
                        "Calculated padded input size per channel: (3 x 3). Kernel size: (3 x 5)");
  CHECK_THROWS_CONTAINS(conv2d(zeros({2, 3, 8, 8}), w, Tensor(), params(0, 1, 0, 0, 1, 1, 1)),
                        "non-positive stride is not supported");
  CHECK_THROWS_CONTAINS(conv2d(zeros({2, 3, 8, 8}), w, Tensor(), params(1, -1, 0, 0, 1, 1, 1)),
                        "non-positive stride is not supported");
  CHECK_THROWS_CONTAINS(conv2d(zeros({2, 3, 8, 8}), w, Tensor(), params(1, 1, 0, 0, 0, 1, 1)),
                        "non-positive dilation is not supported");
  CHECK_THROWS_CONTAINS(conv2d(zeros({2, 3, 8, 8}), w, Tensor(), params(1, 1, -1, 0, 1, 1, 1)),
                        "negative padding is not supported");
  CHECK_THROWS_CONTAINS(conv2d(zeros({2, 6, 8, 8}), w, Tensor(), params(1, 1, 0, 0, 1, 1, 0)),
                        "non-positive groups is not supported");
  CHECK_THROWS_CONTAINS(conv2d(zeros({2, 6, 8, 8}), zeros({64, 2, 3, 3}), Tensor(), params(1, 1, 0, 0, 1, 1, 3)),
                        "Given groups=3, expected weight to be divisible by 3 at dimension 0, but got weight of size "
                        "[64, 2, 3, 3] instead");
  CHECK_THROWS_CONTAINS(conv2d(zeros({2, 6, 8, 8}), w, Tensor(), params(1, 1, 0, 0, 1, 1, 4)),
                        "Given groups=4, weight of size [64, 3, 3, 3], expected input[2, 6, 8, 8] to have 12 "
                        "channels, but got 6 channels instead");
  CHECK_THROWS_CONTAINS(conv2d(zeros({2, 6, 4, 8}), zeros({0, 6, 1, 1}), Tensor(), p1),
                        "Given groups=1, expected weight to be at least 1 at dimension 0, but got weight of size "
                        "[0, 6, 1, 1] instead");
  CHECK_THROWS_CONTAINS(conv2d(zeros({2, 6, 4, 8}), zeros({4, 6, 0, 1}), Tensor(), p1), "kernel of at least 1 x 1");
  CHECK_THROWS_CONTAINS(conv2d(zeros({2, 3, 8, 8}), zeros({64, 3, 3}), Tensor(), p1), "conv2d: expected weight");
  CHECK_THROWS_CONTAINS(conv2d(zeros({2, 3, 8, 8}), w, zeros({3}), p1),
                        "Given weight of size [64, 3, 3, 3], expected bias to be 1-dimensional with 64 elements, but "
                        "got bias of size [3] instead");
  CHECK_THROWS_CONTAINS(conv2d(zeros({2, 3, 8, 8}), w, zeros({64, 1}), p1), "but got bias of size [64, 1] instead");
  CHECK_THROWS_CONTAINS(conv2d(zeros({2, 3, 8, 8}, kFloat64), w, Tensor(), p1),
                        "Input type (float64) and weight type (float32) should be the same");
  CHECK_THROWS_CONTAINS(conv2d(zeros({2, 3, 8, 8}), w, zeros({64}, kFloat64), p1),
                        "Input type (float32) and bias type (float64) should be the same");
  CHECK_THROWS_CONTAINS(conv2d(zeros({2, 3, 8, 8}, kInt64), zeros({64, 3, 3, 3}, kInt64), Tensor(), p1),
                        "conv2d: expected a float32 or float64 input, got int64");
  CHECK_THROWS_CONTAINS(conv2d(Tensor(), w, Tensor(), p1), "conv2d: the input tensor is undefined");
  CHECK_THROWS_CONTAINS(conv2d(zeros({2, 3, 8, 8}), Tensor(), Tensor(), p1), "conv2d: the weight tensor is undefined");
}
