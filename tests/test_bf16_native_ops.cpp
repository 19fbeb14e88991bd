// The CPU ops that read and write float16/bfloat16 directly instead of
// through Float32Compute's float32 copies: max pooling (ops/cpu/pooling.cpp),
// relu (ops/cpu/unary.cpp), add/sub/mul/div of two 16-bit tensors
// (ops/cpu/binary.cpp), BatchNorm with float32 parameters, GroupNorm, LayerNorm
// and InstanceNorm with float32 or 16-bit parameters (ops/cpu/norm_core_half.cpp),
// avg pooling (ops/cpu/pooling.cpp). For each, forward and backward, odd sizes
// and sizes big enough to run in parallel:
//   1. output and every gradient are the float32 computation on the same
//      values rounded once, bit for bit (what the float32-copy path gave);
//   2. they are within one 16-bit rounding plus float32 summation error of
//      float64 computation on the same values (test_bf16_ops's tolerance;
//      BatchNorm's relative to the largest output, as its (x - mean) cancels);
//   3. the same bits at 1 and 2 threads (GroupNorm/LayerNorm/InstanceNorm
//      parameter gradients excepted where they run in parallel: the float32
//      kernel adds per-thread partial sums, so their last bits follow the
//      thread count there; the 16-bit path keeps its schedule, and 1. holds).
// Plus the 2x2 max-pool loop's ties and NaNs against a direct loop.
#include <omp.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "tests/tensor_bits.h"
#include "tests/test_util.h"

using namespace minidl;

namespace {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;
using V = const std::vector<Tensor>&;

struct Leaf {
  Shape shape;
  bool reduced = true;  // the 16-bit dtype under test, else float32 (BatchNorm's parameters)
};

struct Case {
  std::string name;
  std::vector<Leaf> leaves;
  Fn f;
  bool scale_tolerance = false;  // BatchNorm: error relative to the largest value, not to |inputs|
  bool thread_dependent_param_grads = false;  // see 3. above
};

Tensor bn(V a, bool training, bool affine) {
  const int64_t C = a[0].size(1);
  const DType stats = a[0].dtype() == kFloat64 ? kFloat64 : kFloat32;  // PyTorch's: the parameters' dtype
  const Tensor rm = zeros({C}, stats), rv = ones({C}, stats);
  return batch_norm(a[0], rm, rv, affine ? a[1] : Tensor(), affine ? a[2] : Tensor(), training, 0.1, 1e-5);
}

std::vector<Case> cases() {
  return {
      {"max_pool2d 2x2 odd sizes", {{{2, 3, 7, 9}}}, [](V a) { return max_pool2d(a[0], {2, 2}); }},
      {"max_pool2d 2x2 parallel", {{{4, 16, 32, 34}}}, [](V a) { return max_pool2d(a[0], {2, 2}); }},
      {"max_pool2d 3x3 stride 2 pad 1 (overlapping windows)", {{{2, 3, 9, 8}}},
       [](V a) { return max_pool2d(a[0], {3, 3}, {2, 2}, {1, 1}); }},
      {"max_pool2d 2x2 ceil_mode (a partial last window)", {{{2, 2, 5, 7}}},
       [](V a) { return max_pool2d(a[0], {2, 2}, {2, 2}, {0, 0}, {1, 1}, true); }},
      {"adaptive_max_pool2d", {{{2, 5, 5, 7}}}, [](V a) { return adaptive_max_pool2d(a[0], {2, 3}); }},
      {"relu", {{{3, 5, 17}}}, [](V a) { return relu(a[0]); }},
      {"relu parallel", {{{64, 1100}}}, [](V a) { return relu(a[0]); }},
      {"add", {{{4, 33}}, {{4, 33}}}, [](V a) { return add(a[0], a[1]); }},
      {"add broadcast, alpha 0.5", {{{4, 33}}, {{33}}}, [](V a) { return add(a[0], a[1], 0.5); }},
      {"sub parallel", {{{40, 1000}}, {{40, 1000}}}, [](V a) { return sub(a[0], a[1]); }},
      {"mul", {{{7, 9}}, {{7, 9}}}, [](V a) { return mul(a[0], a[1]); }},
      {"batch_norm training, float32 weight and bias", {{{4, 6, 5, 7}}, {{6}, false}, {{6}, false}},
       [](V a) { return bn(a, true, true); }, true},
      {"batch_norm training, no affine", {{{3, 4, 3, 3}}}, [](V a) { return bn(a, true, false); }, true},
      {"batch_norm training parallel", {{{8, 16, 18, 18}}, {{16}, false}, {{16}, false}},
       [](V a) { return bn(a, true, true); }, true},
      {"batch_norm eval (running statistics)", {{{3, 5, 4, 6}}, {{5}, false}, {{5}, false}},
       [](V a) { return bn(a, false, true); }, true},
  };
}

Tensor in_eval(V a) {
  const int64_t C = a[0].size(1);
  const DType stats = a[0].dtype() == kFloat64 ? kFloat64 : kFloat32;
  return instance_norm(a[0], zeros({C}, stats), full({C}, 1.5, stats), a[1], a[2], false, 0.1, 1e-5);
}

// Leaves: {input, weight, bias}; weight and bias float32 (autocast's case) or 16-bit.
std::vector<Case> norm_pool_cases() {
  const bool scale = true, threads = true;
  return {
      {"group_norm, float32 weight and bias", {{{2, 6, 5, 7}}, {{6}, false}, {{6}, false}},
       [](V a) { return group_norm(a[0], 3, a[1], a[2]); }, scale},
      {"group_norm, 16-bit weight and bias", {{{3, 8, 3, 5}}, {{8}}, {{8}}},
       [](V a) { return group_norm(a[0], 2, a[1], a[2]); }, scale},
      {"group_norm, no affine", {{{2, 4, 9}}}, [](V a) { return group_norm(a[0], 4); }, scale},
      {"group_norm parallel", {{{4, 32, 16, 17}}, {{32}, false}, {{32}, false}},
       [](V a) { return group_norm(a[0], 8, a[1], a[2]); }, scale, threads},
      {"layer_norm, float32 weight and bias", {{{3, 5, 37}}, {{37}, false}, {{37}, false}},
       [](V a) { return layer_norm(a[0], {37}, a[1], a[2]); }, scale},
      {"layer_norm over 2 dims, 16-bit weight, no bias", {{{4, 3, 7}}, {{3, 7}}},
       [](V a) { return layer_norm(a[0], {3, 7}, a[1]); }, scale},
      {"layer_norm rows of 2049 (longer than one two-pass chunk)", {{{3, 2049}}, {{2049}, false}, {{2049}, false}},
       [](V a) { return layer_norm(a[0], {2049}, a[1], a[2]); }, scale},
      {"layer_norm parallel", {{{64, 520}}, {{520}, false}, {{520}, false}},
       [](V a) { return layer_norm(a[0], {520}, a[1], a[2]); }, scale, threads},
      {"instance_norm, float32 weight and bias", {{{3, 4, 5, 7}}, {{4}, false}, {{4}, false}},
       [](V a) { return instance_norm(a[0], Tensor(), Tensor(), a[1], a[2]); }, scale},
      {"instance_norm eval (running statistics)", {{{2, 3, 4, 5}}, {{3}, false}, {{3}, false}}, in_eval, scale},
      {"instance_norm parallel, 16-bit weight and bias", {{{4, 16, 24, 24}}, {{16}}, {{16}}},
       [](V a) { return instance_norm(a[0], Tensor(), Tensor(), a[1], a[2]); }, scale, threads},
      {"avg_pool2d 2x2 odd sizes", {{{2, 3, 7, 9}}}, [](V a) { return avg_pool2d(a[0], {2, 2}); }},
      {"avg_pool2d 3x3 stride 2 pad 1, count_include_pad false", {{{2, 3, 9, 8}}},
       [](V a) { return avg_pool2d(a[0], {3, 3}, {2, 2}, {1, 1}, false, false); }},
      {"avg_pool2d ceil_mode, divisor_override 3", {{{2, 2, 5, 7}}},
       [](V a) { return avg_pool2d(a[0], {2, 2}, {2, 2}, {0, 0}, true, true, 3); }},
      {"avg_pool2d parallel", {{{4, 16, 32, 34}}}, [](V a) { return avg_pool2d(a[0], {2, 2}); }},
      {"adaptive_avg_pool2d", {{{2, 5, 5, 7}}}, [](V a) { return adaptive_avg_pool2d(a[0], {2, 3}); }},
      {"adaptive_avg_pool2d global, parallel", {{{8, 64, 9, 9}}},
       [](V a) { return adaptive_avg_pool2d(a[0], {1, 1}); }},
      {"avg_pool3d", {{{2, 2, 5, 6, 7}}}, [](V a) { return avg_pool3d(a[0], {2, 3, 2}, {1, 2, 2}); }},
  };
}

using testing::count_different_bits;

// |got - want| <= 2^-8 |want| + 2^-14 mag (test_bf16_ops), float16 2^-10 |want|;
// with scale, mag is the largest |want| times 2^6 (BatchNorm's float32 math on O(1) values).
int64_t count_far(const Tensor& got, const Tensor& want, const Tensor& mag, DType dtype, bool scale) {
  const Tensor g = got.to(kFloat64).contiguous(), w = want.contiguous(), m = mag.contiguous();
  const double *pg = g.data_ptr<double>(), *pw = w.data_ptr<double>(), *pm = m.data_ptr<double>();
  double largest = 0;
  for (int64_t i = 0; i < w.numel(); ++i) largest = std::max(largest, std::abs(pw[i]));
  const int rel = dtype == kBFloat16 ? -8 : -10;
  int64_t bad = 0;
  for (int64_t i = 0; i < g.numel(); ++i) {
    const double m_i = scale ? 64 * largest : std::abs(pm[i]);
    // float16's subnormals (below 2^-14) are spaced 2^-24: one rounding there is up to 2^-25.
    const double subnormal = dtype == kFloat16 ? std::ldexp(1.0, -25) : 0.0;
    const double tol = std::ldexp(std::abs(pw[i]), rel) * 1.001 + std::ldexp(m_i, -14) + subnormal + 1e-30;
    if (!(std::abs(pg[i] - pw[i]) <= tol)) {
      if (bad < 3) MESSAGE("element ", i, ": ", pg[i], " want ", pw[i], " +- ", tol);
      ++bad;
    }
  }
  return bad;
}

struct Outputs {
  Tensor y;
  std::vector<Tensor> grads;
};

Outputs run(const Case& c, const std::vector<Tensor>& leaves, const Tensor& g) {
  std::vector<Tensor> xs;
  for (const Tensor& t : leaves) xs.push_back(t.detach().requires_grad_());
  Outputs o;
  o.y = c.f(xs);
  o.y.backward(g);
  for (const Tensor& t : xs) o.grads.push_back(t.grad());
  return o;
}

void check_case(const Case& c, DType dtype) {
  INFO(c.name, " in ", std::string(dtype_name(dtype)));
  std::vector<Tensor> low, wide, exact, absolute;
  for (const Leaf& l : c.leaves) {
    const Tensor v = randn(l.shape).to(l.reduced ? dtype : kFloat32);
    low.push_back(v);
    wide.push_back(v.to(kFloat32));
    exact.push_back(v.to(kFloat64));
    absolute.push_back(v.to(kFloat64).abs());
  }
  const Tensor y_shape = c.f(wide);
  const Tensor g = randn(y_shape.shape()).to(dtype);

  const Outputs got = run(c, low, g);
  REQUIRE(got.y.dtype() == dtype);
  const Outputs ref32 = run(c, wide, g.to(kFloat32));
  const Outputs ref64 = run(c, exact, g.to(kFloat64));
  const Outputs mag = run(c, absolute, g.to(kFloat64).abs());

  CHECK(count_different_bits(got.y, ref32.y.to(dtype)) == 0);
  CHECK(count_far(got.y, ref64.y, mag.y, dtype, c.scale_tolerance) == 0);
  for (size_t i = 0; i < low.size(); ++i) {
    INFO("gradient of input ", i);
    REQUIRE(got.grads[i].defined());
    CHECK(got.grads[i].dtype() == low[i].dtype());
    CHECK(count_different_bits(got.grads[i], ref32.grads[i].to(low[i].dtype())) == 0);
    CHECK(count_far(got.grads[i], ref64.grads[i], mag.grads[i], dtype, c.scale_tolerance) == 0);
  }

  const int threads = omp_get_max_threads();
  omp_set_num_threads(threads == 1 ? 2 : 1);
  const Outputs other = run(c, low, g);
  omp_set_num_threads(threads);
  CHECK(count_different_bits(other.y, got.y) == 0);
  for (size_t i = 0; i < low.size(); ++i)
    if (i == 0 || !c.thread_dependent_param_grads) CHECK(count_different_bits(other.grads[i], got.grads[i]) == 0);
}

}  // namespace

TEST_CASE("16-bit max pooling, relu, add/sub/mul and BatchNorm: float32 math rounded once, forward and backward") {
  for (DType dtype : {kBFloat16, kFloat16})
    for (const Case& c : cases()) {
      manual_seed(21);
      check_case(c, dtype);
    }
}

TEST_CASE("16-bit GroupNorm, LayerNorm, InstanceNorm and avg pooling: float32 math rounded once, forward and backward") {
  for (DType dtype : {kBFloat16, kFloat16})
    for (const Case& c : norm_pool_cases()) {
      manual_seed(22);
      check_case(c, dtype);
    }
}

TEST_CASE("16-bit relu keeps -0, NaN and infinities as float32 relu does") {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const Tensor x = tensor({-0.0, 0.0, nan, -inf, inf, -1e-30, 1e-30, -2.5, 3.0}, {9});
  for (DType dtype : {kBFloat16, kFloat16}) {
    INFO(std::string(dtype_name(dtype)));
    const Tensor low = x.to(dtype).requires_grad_();
    const Tensor y = relu(low);
    CHECK(count_different_bits(y, relu(x.to(dtype).to(kFloat32)).to(dtype)) == 0);
    y.backward(ones_like(y));
    // dx = dy unless y <= 0 (PyTorch's rule): NaN, +inf, 3, and 1e-30 where the dtype keeps it
    // (bfloat16; float16 flushes it to 0).
    std::vector<double> want = gt(relu(x.to(kFloat32).to(dtype).to(kFloat32)), 0.0).to_vector<double>();
    want[2] = 1.0;  // the NaN
    CHECK(count_different_bits(low.grad(), tensor(want, {9}).to(dtype)) == 0);
  }
}

// Rows holding NaN, an infinity, only -0, and ordinary values: the 16-bit
// paths give the float32 path's bits (NaN-ness and zero sign included).
TEST_CASE("16-bit GroupNorm, LayerNorm, InstanceNorm and avg pooling keep NaN, infinities and -0 as float32 does") {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const Tensor x = tensor({1.0, nan, 2.0, 3.0, -1.0, 0.5, 4.0, -2.0,        // a NaN
                           inf, 1.0, 2.0, -3.0, 0.25, 1.0, 1.0, 2.0,        // +inf
                           -0.0, -0.0, -0.0, -0.0, -0.0, -0.0, -0.0, -0.0,  // only -0
                           -inf, 0.5, -0.0, 3.0, 1.5, -2.5, 0.0, 7.0},      // -inf
                          {4, 1, 2, 4});
  const std::vector<std::pair<std::string, Fn>> ops = {
      {"group_norm", [](V a) { return group_norm(a[0], 1); }},
      {"layer_norm", [](V a) { return layer_norm(a[0], {2, 4}); }},
      {"instance_norm", [](V a) { return instance_norm(a[0]); }},
      {"avg_pool2d", [](V a) { return avg_pool2d(a[0], {2, 2}); }},
      {"adaptive_avg_pool2d global", [](V a) { return adaptive_avg_pool2d(a[0], {1, 1}); }},
  };
  for (DType dtype : {kBFloat16, kFloat16})
    for (const auto& [name, f] : ops) {
      INFO(name, " in ", std::string(dtype_name(dtype)));
      const Case c{name, {{x.shape()}}, f};
      const Tensor g = ones(f({x}).shape()).to(dtype);
      const Outputs got = run(c, {x.to(dtype)}, g);
      const Outputs ref = run(c, {x.to(dtype).to(kFloat32)}, g.to(kFloat32));
      CHECK(count_different_bits(got.y, ref.y.to(dtype)) == 0);
      CHECK(count_different_bits(got.grads[0], ref.grads[0].to(dtype)) == 0);
    }
}

// The 2x2 stride-2 loop against the window definition: the first maximum's
// index on ties, the last NaN's where there are NaNs; a direct loop here.
TEST_CASE("max_pool2d 2x2: ties pick the first maximum, NaN propagates with the last NaN's index") {
  const int64_t H = 6, W = 8;
  std::vector<double> v(static_cast<size_t>(H * W));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>((i * 7) % 3);  // many ties
  v[0] = v[W + 1] = std::numeric_limits<double>::quiet_NaN();  // two NaNs in window (0, 0)
  v[3 * W + 2] = std::numeric_limits<double>::quiet_NaN();        // one in window (1, 1)
  for (DType dtype : {kFloat32, kFloat64, kBFloat16, kFloat16}) {
    INFO(std::string(dtype_name(dtype)));
    const Tensor x = tensor(v, {1, 1, H, W}).to(dtype);
    const auto [y, idx] = max_pool2d_with_indices(x, {2, 2});
    const std::vector<double> got = y.to(kFloat64).to_vector<double>();
    const std::vector<int64_t> got_idx = idx.to_vector<int64_t>();
    for (int64_t oh = 0; oh < H / 2; ++oh)
      for (int64_t ow = 0; ow < W / 2; ++ow) {
        double best = -std::numeric_limits<double>::infinity();
        int64_t best_i = 2 * oh * W + 2 * ow;
        for (int64_t a = 0; a < 2; ++a)
          for (int64_t b = 0; b < 2; ++b) {
            const int64_t i = (2 * oh + a) * W + 2 * ow + b;
            if (v[static_cast<size_t>(i)] > best || std::isnan(v[static_cast<size_t>(i)])) {
              best = v[static_cast<size_t>(i)];
              best_i = i;
            }
          }
        const size_t o = static_cast<size_t>(oh * (W / 2) + ow);
        CAPTURE(o);
        CHECK(got_idx[o] == best_i);
        CHECK((std::isnan(best) ? std::isnan(got[o]) : got[o] == best));
      }
  }
}
