// Accuracy of the vectorized CPU elementwise kernels (ops/cpu/array_math.h,
// array_loop.h): exp, log, sigmoid, tanh, gelu, gelu tanh forward and
// backward, and binary_cross_entropy(_with_logits) forward and backward, in
// float32 and float64, against the same formula in long double over inputs
// from the subnormals to the overflow range, +-0, +-inf and NaN.
// The bound: |got - ref| <= k ulp(ref) for the functions themselves (exp 5
// ulp, log 2, sigmoid 4, tanh 5: 4 with AVX-512 and AVX2; a build without
// FMA, as the sanitizers', rounds float tanh to +-1 from |x| ~ 7.9, 4.4 ulp
// from the exact value), or |got - ref| <= k eps
// scale + 4 min_normal for formulas that cancel (gelu's 1 + erf, the
// backward's 1 - y^2, the bce terms), scale being the size of the terms (k
// per op in op_cases; 1 for bce); NaN must meet NaN, inf the same inf. Also:
// results are bit-identical at 1 and 2 threads, and a strided view meets the
// same bound.
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "minidl/core/parallel.h"
#include "minidl/ops/cpu/array_math.h"
#include "tests/test_util.h"

using namespace minidl;
using LD = long double;

namespace {

// +-0, subnormals, the normal range log-spaced, a dense [-20, 20], the exp
// limits, +-inf and NaN.
template <class T>
std::vector<T> wide_inputs() {
  using L = std::numeric_limits<T>;
  std::vector<T> v{T(0), -T(0), L::denorm_min(), -L::denorm_min(), L::min(), -L::min(), L::max(), -L::max(),
                   L::infinity(), -L::infinity(), L::quiet_NaN(), T(1), T(-1)};
  for (T x : {T(87), T(87.5), T(88.3), T(88.7), T(89), T(100), T(103.9), T(105), T(708), T(709.7), T(710), T(745)})
    v.insert(v.end(), {x, -x});
  const int lo = L::min_exponent10 - (std::is_same_v<T, float> ? 7 : 16), hi = L::max_exponent10;
  for (int i = 0; i <= 6000; ++i) {
    const T x = static_cast<T>(std::pow(LD(10), lo + (hi - lo) * LD(i) / 6000));
    v.insert(v.end(), {x, -x});
  }
  for (int i = 0; i <= 8000; ++i) v.push_back(static_cast<T>(-20 + 40 * LD(i) / 8000));
  return v;
}

template <class T>
LD ulp_of(LD ref) {
  const T r = std::abs(static_cast<T>(ref));  // finite: worst() handles inf and NaN apart
  return std::max<LD>(LD(std::nextafter(r, std::numeric_limits<T>::infinity())) - r,
                      std::numeric_limits<T>::denorm_min());
}

// The allowed error: |got - ref| <= ulps ulp(ref), or else <= eps epsilon
// scale + 4 min_normal (scale: the size of the formula's terms at (x, g)).
struct Bound {
  double ulps = 0;
  double eps = 0;
  std::function<LD(LD, LD)> scale;
};

// Largest error of got[i] against ref(i) in units of the bound (<= 1 passes);
// a NaN or an infinity must be met exactly. where: the worst element.
template <class T>
double worst(const std::vector<T>& got, const std::function<LD(size_t)>& ref, const Bound& b,
             const std::function<LD(size_t)>& x, const std::function<LD(size_t)>& g, std::string& where) {
  double w = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const LD r = ref(i);
    const T rt = static_cast<T>(r);
    double e = 0;
    if (!std::isfinite(rt) || !std::isfinite(got[i])) {
      e = (std::isnan(rt) && std::isnan(got[i])) || rt == got[i] ? 0 : 1e30;
    } else {
      const LD err = std::abs(LD(got[i]) - r);
      e = 1e30;
      if (b.ulps > 0) e = std::min(e, double(err / (b.ulps * ulp_of<T>(r))));
      if (b.eps > 0)
        e = std::min(e, double(err / (b.eps * std::numeric_limits<T>::epsilon() * b.scale(x(i), g(i)) +
                                      4 * LD(std::numeric_limits<T>::min()))));
    }
    if (e > w) {
      w = e;
      where = "x=" + std::to_string(double(x(i))) + " g=" + std::to_string(double(g(i))) + " got " +
              std::to_string(double(got[i])) + " ref " + std::to_string(double(r));
    }
  }
  return w;
}

struct OpCase {
  const char* name;
  std::function<Tensor(const Tensor&)> op;
  std::function<LD(LD)> f;
  std::function<LD(LD)> df;
  Bound fwd, bwd;
};

const LD kSqrt2 = std::sqrt(LD(2)), kPi = std::acos(LD(-1));

LD gelu_tanh_inner(LD x) { return std::sqrt(2 / kPi) * (x + LD(0.044715) * x * x * x); }

std::vector<OpCase> op_cases() {
  auto abs_x = [](LD x, LD) { return std::abs(x); };
  auto abs_g = [](LD, LD g) { return std::abs(g); };
  auto sig = [](LD x) { return x >= 0 ? 1 / (1 + std::exp(-x)) : std::exp(x) / (1 + std::exp(x)); };
  return {
      {"exp", [](const Tensor& x) { return exp(x); }, [](LD x) { return std::exp(x); },
       [](LD x) { return std::exp(x); }, {.ulps = 5}, {.ulps = 6}},
      {"log", [](const Tensor& x) { return log(x); }, [](LD x) { return std::log(x); }, [](LD x) { return 1 / x; },
       {.ulps = 2}, {.ulps = 2}},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, sig,
       [sig](LD x) { return sig(x) * (1 - sig(x)); }, {.ulps = 4},
       {.eps = 4, .scale = [sig](LD x, LD g) { return std::abs(g) * sig(x); }}},
      {"tanh", [](const Tensor& x) { return tanh(x); }, [](LD x) { return std::tanh(x); },
       [](LD x) { return 1 - std::tanh(x) * std::tanh(x); }, {.ulps = 5}, {.eps = 6, .scale = abs_g}},
      {"gelu", [](const Tensor& x) { return gelu(x); }, [](LD x) { return x / 2 * (1 + std::erf(x / kSqrt2)); },
       [](LD x) { return (1 + std::erf(x / kSqrt2)) / 2 + x * std::exp(-x * x / 2) / std::sqrt(2 * kPi); },
       {.eps = 8, .scale = abs_x},
       {.eps = 4, .scale = [](LD x, LD g) { return std::abs(g) * (1 + std::abs(x)); }}},
      {"gelu_tanh", [](const Tensor& x) { return gelu(x, "tanh"); },
       [](LD x) { return x / 2 * (1 + std::tanh(gelu_tanh_inner(x))); },
       [](LD x) {
         const LD t = std::tanh(gelu_tanh_inner(x));
         return (1 + t) / 2 + x / 2 * (1 - t * t) * std::sqrt(2 / kPi) * (1 + 3 * LD(0.044715) * x * x);
       },
       {.eps = 3, .scale = abs_x},
       {.eps = 3, .scale = [](LD x, LD g) { return std::abs(g) * (1 + std::abs(x) * (1 + std::abs(x * x))); }}},
  };
}

// g: a spread of upstream gradients (0.5 .. 2, both signs), as many as x.
template <class T>
std::vector<T> grads_for(size_t n) {
  std::vector<T> g(n);
  for (size_t i = 0; i < n; ++i) g[i] = static_cast<T>((i % 2 ? -1 : 1) * (0.5 + 1.5 * LD(i % 97) / 96));
  return g;
}

template <class T>
void check_ops() {
  const std::vector<T> xs = wide_inputs<T>();
  const std::vector<T> gs = grads_for<T>(xs.size());
  const int64_t n = static_cast<int64_t>(xs.size());
  const Tensor g = tensor(gs, {n});
  auto x_at = [&](size_t i) { return LD(xs[i]); };
  auto g_at = [&](size_t i) { return LD(gs[i]); };
  std::string where;
  for (const OpCase& c : op_cases()) {
    CAPTURE(std::string(c.name));
    auto ref = [&](size_t i) { return c.f(xs[i]); };
    // Forward on the contiguous tensor, then on a strided view of the same values.
    Tensor x = tensor(xs, {n});
    double w = worst<T>(c.op(x).template to_vector<T>(), ref, c.fwd, x_at, g_at, where);
    CHECK_MESSAGE(w <= 1.0, "forward: " << where);
    const Tensor wide = zeros({n, 3}, dtype_v<T>);
    wide.select(1, 1).copy_(x);
    const Tensor strided = wide.select(1, 1);
    REQUIRE(!strided.is_contiguous());
    w = worst<T>(c.op(strided).template to_vector<T>(), ref, c.fwd, x_at, g_at, where);
    CHECK_MESSAGE(w <= 1.0, "forward, strided: " << where);
    // Backward: dx = g f'(x) through autograd (the saved x or y). gelu tanh's
    // is NaN where x^2 overflows (inf * 0 in PyTorch's formula, which we keep).
    x.requires_grad_(true);
    c.op(x).backward(g);
    const bool nan_at_huge = std::string(c.name) == "gelu_tanh";
    auto dref = [&](size_t i) {
      return nan_at_huge && std::isinf(xs[i] * xs[i]) ? LD(NAN) : gs[i] * c.df(xs[i]);
    };
    w = worst<T>(x.grad().template to_vector<T>(), dref, c.bwd, x_at, g_at, where);
    CHECK_MESSAGE(w <= 1.0, "backward: " << where);
  }
}

// binary_cross_entropy(_with_logits), reduction none, against long double; the
// target takes 0, 1 and fractions, pos_weight 0.5 .. 3. The bound is relative
// to the size of the formula's terms (they cancel: the loss is near 0 where
// the prediction is right).
template <class T>
void check_bce() {
  std::vector<T> xs, ts, ps, probs;
  for (T x : wide_inputs<T>())  // logits up to 1e30: beyond, (1 - t) x - l x overflows in any formula
    if (std::abs(x) <= T(1e30)) xs.push_back(x);
  for (size_t i = 0; i < xs.size(); ++i) {
    ts.push_back(static_cast<T>((i % 5) / LD(4)));
    ps.push_back(static_cast<T>(0.5 + (i % 11) / LD(4)));
    probs.push_back(static_cast<T>(LD(i % 10007) / 10006));  // [0, 1], both ends included
  }
  const int64_t n = static_cast<int64_t>(xs.size());
  const std::vector<T> gs = grads_for<T>(xs.size());
  const Tensor t = tensor(ts, {n}), pw = tensor(ps, {n}), g = tensor(gs, {n});
  auto log_sig = [](LD x) { return std::min(x, LD(0)) - std::log1p(std::exp(-std::abs(x))); };
  auto sig = [](LD x) { return x >= 0 ? 1 / (1 + std::exp(-x)) : std::exp(x) / (1 + std::exp(x)); };
  auto index = [](size_t i) { return LD(i); };  // worst() reports element indices
  auto g_at = [&](size_t i) { return LD(gs[i]); };
  std::string where;
  for (bool with_pw : {false, true}) {
    CAPTURE(with_pw);
    Tensor x = tensor(xs, {n}).requires_grad_(true);
    Tensor tt = t.detach().requires_grad_(true);
    binary_cross_entropy_with_logits(x, tt, Tensor(), Reduction::None, with_pw ? pw : Tensor()).backward(g);
    Tensor loss = binary_cross_entropy_with_logits(x.detach(), t, Tensor(), Reduction::None, with_pw ? pw : Tensor());
    auto p_of = [&](size_t i) { return with_pw ? LD(ps[i]) : LD(1); };
    // The terms: (1 - t) x and l log_sigmoid(x), each up to |x|.
    auto size = [&](LD i, LD gv) {
      return (1 + p_of(size_t(i))) * (1 + std::abs(LD(xs[size_t(i)]))) * (1 + std::abs(gv));
    };
    const Bound terms{.eps = 1, .scale = size};
    double w = worst<T>(loss.template to_vector<T>(), [&](size_t i) {
      return (1 - LD(ts[i])) * xs[i] - (1 + (p_of(i) - 1) * ts[i]) * log_sig(xs[i]);
    }, terms, index, g_at, where);
    CHECK_MESSAGE(w <= 1.0, "bce_with_logits forward: " << where);
    w = worst<T>(x.grad().template to_vector<T>(), [&](size_t i) {
      return gs[i] * ((1 + (p_of(i) - 1) * ts[i]) * sig(xs[i]) - p_of(i) * ts[i]);
    }, terms, index, g_at, where);
    CHECK_MESSAGE(w <= 1.0, "bce_with_logits grad input: " << where);
    w = worst<T>(tt.grad().template to_vector<T>(), [&](size_t i) {
      return with_pw ? gs[i] * (log_sig(-LD(xs[i])) - p_of(i) * log_sig(xs[i])) : -LD(gs[i]) * xs[i];
    }, terms, index, g_at, where);
    CHECK_MESSAGE(w <= 1.0, "bce_with_logits grad target: " << where);
  }
  // Probability space (each log clamped at -100, the input gradient's denominator at 1e-12).
  Tensor x = tensor(probs, {n}).requires_grad_(true);
  Tensor tt = t.detach().requires_grad_(true);
  binary_cross_entropy(x, tt, Tensor(), Reduction::None).backward(g);
  const Tensor loss = binary_cross_entropy(x.detach(), t, Tensor(), Reduction::None);
  auto clamp_log = [](LD v) { return std::max(std::log(v), LD(-100)); };
  const Bound terms{.eps = 1, .scale = [&](LD i, LD gv) {
    const LD p = probs[size_t(i)];
    const LD terms = 1 / std::max(p * (1 - p), LD(1e-12)) + std::abs(clamp_log(p)) + std::abs(clamp_log(1 - p));
    return (1 + std::abs(gv)) * terms;
  }};
  double w = worst<T>(loss.template to_vector<T>(), [&](size_t i) {
    return -(ts[i] * clamp_log(probs[i]) + (1 - LD(ts[i])) * clamp_log(1 - LD(probs[i])));
  }, terms, index, g_at, where);
  CHECK_MESSAGE(w <= 1.0, "bce forward: " << where);
  w = worst<T>(x.grad().template to_vector<T>(), [&](size_t i) {
    const LD p = probs[i];
    return gs[i] * (p - LD(ts[i])) / std::max((1 - p) * p, LD(1e-12));
  }, terms, index, g_at, where);
  CHECK_MESSAGE(w <= 1.0, "bce grad input: " << where);
  w = worst<T>(tt.grad().template to_vector<T>(), [&](size_t i) {
    return gs[i] * (std::log1p(-LD(probs[i])) - std::log(LD(probs[i])));
  }, terms, index, g_at, where);
  CHECK_MESSAGE(w <= 1.0, "bce grad target: " << where);
}

// The packet exps of array_math.h applied to every value (ArrayXf is aligned
// and n a multiple of 16: all through packets).
template <bool kNormal>
struct FastExpFn {
  float operator()(float x) const { return std::exp(x); }
  template <class Packet>
  Packet packetOp(const Packet& x) const {
    return kNormal ? vec::pexp_float_fast_normal(x) : vec::pexp_float_fast(x);
  }
};

}  // namespace

template <bool kNormal>
struct Eigen::internal::functor_traits<FastExpFn<kNormal>> {
  enum { Cost = 10, PacketAccess = packet_traits<float>::HasExp };
};

namespace {

// Every 4099th float in [-110, 90], +-0, +-inf, NaN and the range edges, in
// sorted order and then permuted (packets mixing |x| <= 87 with lanes that
// need pexp_float_fast's two factors or overflow), padded to a multiple of 16.
std::vector<float> fast_exp_inputs(bool permuted) {
  std::vector<float> v{0.f, -0.f, INFINITY, -INFINITY, NAN, 87.f, -87.f, 87.0001f, -87.0001f, 88.37f, 88.38f,
                       88.72f, 88.73f, -87.33f, -87.34f, -88.f, -103.2f, -103.3f, -104.f, -104.1f};
  for (uint64_t b = 0; b <= 0xFFFFFFFFull; b += 4099) {
    const uint32_t bits = static_cast<uint32_t>(b);
    float x;
    std::memcpy(&x, &bits, 4);
    if (x >= -110.f && x <= 90.f) v.push_back(x);
  }
  while (v.size() % 16) v.push_back(1.f);
  if (permuted) {
    std::vector<float> p(v.size());
    for (size_t i = 0; i < v.size(); ++i) p[i] = v[(i * 7919) % v.size()];  // 7919: prime, not a factor of n
    REQUIRE(v.size() % 7919 != 0);
    v = p;
  }
  return v;
}

template <class T>
bool same_bits(const Tensor& a, const Tensor& b) {
  const std::vector<T> va = a.template to_vector<T>(), vb = b.template to_vector<T>();
  return va.size() == vb.size() && std::memcmp(va.data(), vb.data(), va.size() * sizeof(T)) == 0;
}

}  // namespace

TEST_CASE("vectorized elementwise math: float32 and float64 within the bound, contiguous and strided") {
  check_ops<float>();
  check_ops<double>();
}

TEST_CASE("vectorized binary_cross_entropy(_with_logits): float32 and float64 within the bound") {
  check_bce<float>();
  check_bce<double>();
}

TEST_CASE("vectorized elementwise math: bit-identical at 1 and 2 threads") {
  // 100003 elements: one long row, cut into 16384-element chunks, with an odd tail.
  manual_seed(0);
  const Tensor x = randn({100003}) * 30.0, t = rand({100003}), g = randn({100003});
  const int threads = get_num_threads();
  auto run = [&](int n) {
    set_num_threads(n);
    std::vector<Tensor> out;
    for (const OpCase& c : op_cases()) {
      Tensor xg = x.detach().requires_grad_(true);
      Tensor y = c.op(c.name == std::string("log") ? xg.abs() : xg);
      y.backward(g);
      out.insert(out.end(), {y, xg.grad()});
    }
    Tensor xg = x.detach().requires_grad_(true);
    binary_cross_entropy_with_logits(xg, t, Tensor(), Reduction::Sum).backward();
    out.push_back(xg.grad());
    return out;
  };
  const std::vector<Tensor> one = run(1), two = run(2);
  set_num_threads(threads);
  REQUIRE(one.size() == two.size());
  for (size_t i = 0; i < one.size(); ++i) {
    CAPTURE(i);
    CHECK(same_bits<float>(one[i], two[i]));
  }
}

TEST_CASE("pexp_float_fast, pexp_float_fast_normal and float sigmoid: bounds over the float range, mixed packets") {
  // pexp_float_fast: within 1 ulp of the correctly rounded exp everywhere
  // (subnormal results, 0 below -103.3, inf above 88.72). _normal: the same
  // where the result is normal and x < 88.38; inf from 88.38; 0 or a value
  // below the smallest normal where the exact result is below it.
  for (const bool permuted : {false, true}) {
    CAPTURE(permuted);
    const std::vector<float> in = fast_exp_inputs(permuted);
    const Eigen::ArrayXf x = Eigen::Map<const Eigen::ArrayXf>(in.data(), Eigen::Index(in.size()));
    const Eigen::ArrayXf fast = x.unaryExpr(FastExpFn<false>()), normal = x.unaryExpr(FastExpFn<true>());
    const Eigen::ArrayXf sig = vec::sigmoid(x);
    int bad_fast = 0, bad_normal = 0, bad_sig = 0;
    double worst_sig = 0;
    for (Eigen::Index i = 0; i < x.size(); ++i) {
      const float xi = x[i];
      const float want = static_cast<float>(std::exp(LD(xi)));
      auto within_1ulp = [&](float got) {
        if (std::isnan(want) || std::isinf(want)) return (std::isnan(want) && std::isnan(got)) || got == want;
        return std::abs(LD(got) - LD(want)) <= LD(ulp_of<float>(LD(want)));
      };
      if (!within_1ulp(fast[i]) && ++bad_fast <= 3) MESSAGE("fast exp(" << xi << ") = " << fast[i] << ", want " << want);
      bool ok_normal;
      if (std::isnan(xi)) ok_normal = std::isnan(normal[i]);
      else if (xi >= 88.38f) ok_normal = std::isinf(normal[i]) && normal[i] > 0;
      else if (want < std::numeric_limits<float>::min()) ok_normal = normal[i] >= 0 && normal[i] <= std::numeric_limits<float>::min();
      else ok_normal = within_1ulp(normal[i]);
      if (xi <= -88.f) ok_normal = ok_normal && normal[i] == 0.f;
      if (!ok_normal && ++bad_normal <= 3) MESSAGE("normal exp(" << xi << ") = " << normal[i] << ", want " << want);
      // Sigmoid: 4 ulp (the op-level bound above), exactly 0.5 at 0, 0 and 1 at -+inf, NaN for NaN.
      const LD X = xi;
      const LD ref = X >= 0 ? 1 / (1 + std::exp(-X)) : std::exp(X) / (1 + std::exp(X));
      if (std::isnan(xi)) {
        if (!std::isnan(sig[i])) ++bad_sig;
        continue;
      }
      const double e = double(std::abs(LD(sig[i]) - ref) / ulp_of<float>(ref));
      worst_sig = std::max(worst_sig, e);
      if (e > 4 && ++bad_sig <= 3) MESSAGE("sigmoid(" << xi << ") = " << sig[i] << ", want " << double(ref));
      if (xi == 0.f && sig[i] != 0.5f) ++bad_sig;
      if (std::isinf(xi) && sig[i] != (xi > 0 ? 1.f : 0.f)) ++bad_sig;
    }
    MESSAGE("float sigmoid worst " << worst_sig << " ulp");
    CHECK(bad_fast == 0);
    CHECK(bad_normal == 0);
    CHECK(bad_sig == 0);
  }
}
