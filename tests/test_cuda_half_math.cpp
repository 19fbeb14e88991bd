// The float16/bfloat16 paths of the CUDA kernels' math (ops/cuda/opmath.h:
// load as float, compute in float, round once), run on the CPU in every
// build, so the 16-bit instantiations compile and give the right numbers
// without a GPU. Each 16-bit result is checked against the CPU op on the
// same 16-bit inputs (which computes in float32 and rounds once,
// ops/cpu/float32_compute.h) and against float64 math on the same inputs
// rounded once, within rtol = atol = 1e-3 (float16) or 1e-2 (bfloat16): a
// 16-bit rounding of the exact result is within half an ulp (2^-11, 2^-8
// relative), float's libm ulps may flip one rounding. The float32/float64
// instantiations are tests/test_cuda_kernel_math.cpp's.
#include <cmath>
#include <limits>
#include <vector>

#include "minidl/ops/cuda/opmath.h"
#include "minidl/ops/cuda/elementwise_math.h"
#include "minidl/ops/cuda/norm_math.h"
#include "minidl/ops/cuda/reduce_math.h"
#include "tests/test_util.h"

using namespace minidl;
using namespace minidl::cuda_math;

namespace {

template <class T>
constexpr double rtol_of() {
  return std::is_same_v<T, Half> ? 1e-3 : 1e-2;
}

bool near(double got, double want, double rtol) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return std::abs(got - want) <= rtol * std::abs(want) + rtol;
}

template <class T>
double dbl(T v) {
  return static_cast<double>(static_cast<float>(v));
}

// The values rounded to T (what a 16-bit tensor of them holds).
template <class T>
std::vector<T> rounded(const std::vector<double>& v) {
  std::vector<T> r;
  for (double e : v) r.push_back(convert<T>(e));
  return r;
}

template <class T>
Tensor tensor_of(const std::vector<T>& v) {
  std::vector<double> d;
  for (T e : v) d.push_back(dbl(e));
  return tensor(d, {static_cast<int64_t>(d.size())}, dtype_v<T>);  // exact: every value is a T
}

}  // namespace

TEST_CASE("opmath_t: the 16-bit types compute in float, float and double in themselves; the round trip is exact") {
  static_assert(std::is_same_v<opmath_t<Half>, float> && std::is_same_v<opmath_t<BFloat16>, float>);
  static_assert(std::is_same_v<opmath_t<float>, float> && std::is_same_v<opmath_t<double>, double>);
  static_assert(std::is_same_v<opmath_t<int64_t>, int64_t> && is_floating_v<Half> && !is_floating_v<int64_t>);
  // Max/min, pooling and copies store a loaded value back: every non-NaN bit pattern survives.
  int mismatches = 0;
  for (uint32_t bits = 0; bits < 0x10000u; ++bits) {
    const Half h = Half::from_bits(static_cast<uint16_t>(bits));
    const BFloat16 b = BFloat16::from_bits(static_cast<uint16_t>(bits));
    if (!std::isnan(to_opmath(h)) && from_opmath<Half>(to_opmath(h)).x != h.x) ++mismatches;
    if (!std::isnan(to_opmath(b)) && from_opmath<BFloat16>(to_opmath(b)).x != b.x) ++mismatches;
  }
  CHECK(mismatches == 0);
  // from_opmath rounds a double once to nearest even through float, as Tensor::to.
  CHECK(from_opmath<Half>(1.0 + 1.0 / 4096).x == Half(1.0f).x);  // below half an ulp (2^-11)
  CHECK(from_opmath<Half>(70000.0).x == 0x7C00u);                 // overflow: inf
  CHECK(from_opmath<BFloat16>(1.0 + 1.0 / 256).x == BFloat16(1.0f).x);  // a tie (half an ulp) goes to even
}

TEST_CASE_TEMPLATE("unary math on 16-bit values equals the CPU op and float64 rounded once", T, Half, BFloat16) {
  const double rtol = rtol_of<T>();
  const std::vector<T> x = rounded<T>({-2.5, -1.0, -0.3, 0.0, 0.3, 1.0, 2.0, 7.5, -6.1, 0.71});
  const std::vector<T> pos = rounded<T>({0.1, 0.5, 1.0, 2.0, 3.0, 10.0, 0.01, 4.0, 123.0, 0.7});
  const Tensor xt = tensor_of(x), pt = tensor_of(pos);
  UnaryParams leaky, pw, clampp;
  leaky.scalar = 0.1;
  pw.scalar = 1.5;
  clampp.lo = -1.0;
  clampp.hi = 1.0;
  struct Case {
    UnaryOp op;
    Tensor cpu;
    const std::vector<T>* in;
    UnaryParams p;
  };
  const std::vector<Case> cases = {
      {UnaryOp::Neg, neg(xt), &x, {}},          {UnaryOp::Exp, exp(xt), &x, {}},
      {UnaryOp::Log, log(pt), &pos, {}},        {UnaryOp::Sqrt, sqrt(pt), &pos, {}},
      {UnaryOp::Rsqrt, rsqrt(pt), &pos, {}},    {UnaryOp::Abs, abs(xt), &x, {}},
      {UnaryOp::Pow, pow(pt, 1.5), &pos, pw},   {UnaryOp::Clamp, clamp(xt, -1.0, 1.0), &x, clampp},
      {UnaryOp::Relu, relu(xt), &x, {}},        {UnaryOp::LeakyRelu, leaky_relu(xt, 0.1), &x, leaky},
      {UnaryOp::Sigmoid, sigmoid(xt), &x, {}},  {UnaryOp::Tanh, tanh(xt), &x, {}},
      {UnaryOp::Gelu, gelu(xt), &x, {}},        {UnaryOp::GeluTanh, gelu(xt, "tanh"), &x, {}},
  };
  for (const Case& c : cases) {
    CAPTURE(unary_op_name(c.op));
    REQUIRE(c.cpu.dtype() == dtype_v<T>);
    const UnaryArgs<float> args = make_unary_args<float>(c.p);
    const UnaryArgs<double> args64 = make_unary_args<double>(c.p);
    const Tensor& cpu_out = c.cpu;
    const std::vector<double> cpu = cpu_out.to_vector<double>();
    for (size_t i = 0; i < cpu.size(); ++i) {
      CAPTURE(dbl((*c.in)[i]));
      const T got = unary_forward_stored<T>(c.op, args, (*c.in)[i]);
      const double exact = unary_forward<double>(c.op, args64, dbl((*c.in)[i]));
      CHECK(near(dbl(got), cpu[i], rtol));
      CHECK(near(dbl(got), dbl(from_opmath<T>(exact)), rtol));
    }
    // Backward (g * f'(saved)) against the float64 formula on the same 16-bit g and saved value.
    if (c.op == UnaryOp::Neg || c.op == UnaryOp::Exp || c.op == UnaryOp::Sigmoid || c.op == UnaryOp::Tanh ||
        c.op == UnaryOp::Gelu || c.op == UnaryOp::GeluTanh || c.op == UnaryOp::Relu || c.op == UnaryOp::Log) {
      for (size_t i = 0; i < cpu.size(); ++i) {
        const T g = convert<T>(0.37 * static_cast<double>(i) - 1.1), s = (*c.in)[i];
        const T got = unary_backward_stored<T>(c.op, args, g, s);
        CHECK(near(dbl(got), dbl(from_opmath<T>(unary_backward<double>(c.op, args64, dbl(g), dbl(s)))), rtol));
      }
    }
  }
}

TEST_CASE_TEMPLATE("binary math on 16-bit values equals the CPU op and float64 rounded once", T, Half, BFloat16) {
  const double rtol = rtol_of<T>();
  const std::vector<T> a = rounded<T>({-2.5, -1.0, 0.3, 0.0, 1.5, 3.25, 60000.0, -7.0, 0.1, 2.0});
  const std::vector<T> b = rounded<T>({1.5, -1.0, 0.7, -2.0, 1.5, 0.125, 60000.0, 3.0, 0.3, -0.5});
  const Tensor at = tensor_of(a), bt = tensor_of(b);
  struct Case {
    BinaryOp op;
    double alpha;
    Tensor cpu;
  };
  const std::vector<Case> cases = {
      {BinaryOp::Add, 1.0, add(at, bt)},      {BinaryOp::Add, 0.5, add(at, bt, 0.5)},
      {BinaryOp::Sub, 2.0, sub(at, bt, 2.0)}, {BinaryOp::Mul, 1.0, mul(at, bt)},
      {BinaryOp::Div, 1.0, div(at, bt)},      {BinaryOp::Maximum, 1.0, maximum(at, bt)},
      {BinaryOp::Minimum, 1.0, minimum(at, bt)}, {BinaryOp::Eq, 1.0, eq(at, bt)},
  };
  for (const Case& c : cases) {
    CAPTURE(binary_op_name(c.op));
    CAPTURE(c.alpha);
    const Tensor cpu_out = c.cpu.to(dtype_v<T>);
    const std::vector<double> cpu = cpu_out.to_vector<double>();
    for (size_t i = 0; i < a.size(); ++i) {
      CAPTURE(i);
      const T got = binary_apply_stored<T>(c.op, static_cast<float>(c.alpha), c.alpha == 1.0, a[i], b[i]);
      const double exact = binary_apply<double>(c.op, c.alpha, c.alpha == 1.0, dbl(a[i]), dbl(b[i]));
      CHECK(near(dbl(got), cpu[i], rtol));
      CHECK(near(dbl(got), dbl(from_opmath<T>(exact)), rtol));
    }
  }
  // NaN wins in maximum/minimum; float16 overflows to inf and rounds a tie to even.
  const T nan = convert<T>(std::numeric_limits<float>::quiet_NaN());
  CHECK(std::isnan(dbl(binary_apply_stored<T>(BinaryOp::Maximum, 1.0f, true, nan, convert<T>(1.0)))));
  CHECK(std::isnan(dbl(binary_apply_stored<T>(BinaryOp::Minimum, 1.0f, true, convert<T>(1.0), nan))));
  if constexpr (std::is_same_v<T, Half>) {
    CHECK(std::isinf(dbl(binary_apply_stored<T>(BinaryOp::Add, 1.0f, true, a[6], b[6]))));  // 120000: inf
    CHECK(dbl(binary_apply_stored<T>(BinaryOp::Add, 0.5f, false, convert<T>(1.0), convert<T>(std::ldexp(1.0, -10)))) ==
          1.0);  // 1 + 2^-11 is a tie: even
  }
}

TEST_CASE_TEMPLATE("norm math on a 16-bit input with float32 weight/bias equals the CPU batch_norm", T, Half, BFloat16) {
  const double rtol = rtol_of<T>(), eps = 1e-5;
  const int64_t N = 4, C = 3, L = 5;
  const Tensor x = randn({N, C, L}).to(dtype_v<T>);
  const Tensor w = randn({C}), b = randn({C});  // float32, as autocast leaves BatchNorm's parameters
  const Tensor y = batch_norm(x, Tensor(), Tensor(), w, b, true, 0.1, eps);
  REQUIRE(y.dtype() == dtype_v<T>);
  const std::vector<double> xv = x.to_vector<double>(), yv = y.to_vector<double>();
  const std::vector<float> wv = w.to_vector<float>(), bv = b.to_vector<float>();
  for (int64_t c = 0; c < C; ++c) {
    CAPTURE(c);
    Welford st;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t l = 0; l < L; ++l) st = welford_merge(st, welford_of(xv[(n * C + c) * L + l]));
    const GroupStatistics s = statistics_of(st, eps);
    double sum_dy = 0, sum_dy_xmu = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t l = 0; l < L; ++l) {
        const int64_t i = (n * C + c) * L + l;
        const T xi = convert<T>(xv[i]);
        const T got = normalize_value_stored<T>(xi, s.mean, s.invstd, wv[c], bv[c]);
        CHECK(near(dbl(got), yv[i], rtol));
        const double exact = (xv[i] - s.mean) * s.invstd * wv[c] + bv[c];
        CHECK(near(dbl(got), exact, rtol));
        const double dy = 0.1 * static_cast<double>(i % 7) - 0.3;
        sum_dy += wv[c] * dy;
        sum_dy_xmu += wv[c] * dy * (xv[i] - s.mean);
      }
    // dx against the float64 formula on the same 16-bit dy and x.
    for (int64_t n = 0; n < N; ++n)
      for (int64_t l = 0; l < L; ++l) {
        const int64_t i = (n * C + c) * L + l;
        const double dy = dbl(convert<T>(0.1 * static_cast<double>(i % 7) - 0.3));
        const T got = norm_backward_value_stored<T>(convert<T>(dy), convert<T>(xv[i]), s.mean, s.invstd, wv[c], true,
                                                    sum_dy, sum_dy_xmu, static_cast<double>(N * L));
        const double exact = norm_backward_value<double>(dy, xv[i], s.mean, s.invstd, wv[c], true, sum_dy, sum_dy_xmu,
                                                         static_cast<double>(N * L));
        CHECK(near(dbl(got), exact, rtol));
      }
  }
}

TEST_CASE_TEMPLATE("max/min pick on loaded 16-bit values keeps the first extreme and NaN", T, Half, BFloat16) {
  const std::vector<T> v = rounded<T>({0.5, 3.0, -1.0, 3.0, 2.999});
  ValueIndex<float> best{0.0f, -1};
  for (int64_t j = 0; j < static_cast<int64_t>(v.size()); ++j)
    best = pick_extremum<true>(best, ValueIndex<float>{to_opmath(v[static_cast<size_t>(j)]), j});
  CHECK(best.index == 1);
  CHECK(from_opmath<T>(best.value).x == v[1].x);
  const ValueIndex<float> nan{to_opmath(convert<T>(std::numeric_limits<float>::quiet_NaN())), 4};
  CHECK(pick_extremum<false>(best, nan).index == 4);
}
