// The vectorized softmax-family CPU kernels (ops/cpu/softmax_rows.h: Eigen
// packet exp/log, float64 vector sums) against long double loops written here:
// softmax, log_softmax (forward and backward) and cross_entropy (class weights,
// ignore_index, label smoothing; forward and backward; nll_loss of the
// log-probabilities against the same loss) on float32 and float64,
// over the row path (softmax over the last dim, lengths not a multiple of the
// vector width) and the column path (softmax over dim 1, several column chunks
// and a partial one), with wide logits (+-1e4), -inf logits (PyTorch's results:
// probability 0, log-probability -inf, a finite loss), NaN propagating along its
// row only, non-contiguous inputs, and bit-identical results at 1 and 2 threads.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "minidl/core/parallel.h"
#include "tests/test_util.h"

using namespace minidl;

namespace {

using Real = long double;
constexpr double kInf = std::numeric_limits<double>::infinity();

struct Layout {
  int64_t outer = 1, D = 1, inner = 1;
  int64_t at(int64_t o, int64_t d, int64_t i) const { return (o * D + d) * inner + i; }
};

Layout layout_of(const Shape& s, int64_t dim) {
  if (dim < 0) dim += static_cast<int64_t>(s.size());
  Layout l;
  for (int64_t d = 0; d < dim; ++d) l.outer *= s[d];
  l.D = s[dim];
  for (size_t d = static_cast<size_t>(dim) + 1; d < s.size(); ++d) l.inner *= s[d];
  return l;
}

// Values in [-scale, scale] from a fixed generator, with some exact -inf
// entries (never a whole softmax row: every 7th element from `start`).
std::vector<double> logits(int64_t n, double scale, uint64_t seed, bool with_neg_inf) {
  Generator gen(seed);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& e : v) e = scale * std::tanh(gen.normal());
  if (with_neg_inf)
    for (size_t i = 3; i < v.size(); i += 7) v[i] = -kInf;
  return v;
}

// Reference softmax / log_softmax along dim of x's values (the dtype's values, read exactly).
std::vector<Real> ref_softmax(const std::vector<double>& x, const Layout& l, bool log) {
  std::vector<Real> y(x.size());
  for (int64_t o = 0; o < l.outer; ++o)
    for (int64_t i = 0; i < l.inner; ++i) {
      Real mx = -INFINITY;
      for (int64_t d = 0; d < l.D; ++d) mx = std::max<Real>(mx, x[l.at(o, d, i)]);
      Real sum = 0;
      for (int64_t d = 0; d < l.D; ++d) sum += std::exp(static_cast<Real>(x[l.at(o, d, i)]) - mx);
      for (int64_t d = 0; d < l.D; ++d) {
        const Real z = static_cast<Real>(x[l.at(o, d, i)]) - mx;
        y[l.at(o, d, i)] = log ? z - std::log(sum) : std::exp(z) / sum;
      }
    }
  return y;
}

// dx of softmax (y * (g - sum(g y))) or log_softmax (g - exp(y) sum(g)) from the reference y.
std::vector<Real> ref_softmax_backward(const std::vector<double>& g, const std::vector<Real>& y, const Layout& l,
                                       bool log) {
  std::vector<Real> gx(g.size());
  for (int64_t o = 0; o < l.outer; ++o)
    for (int64_t i = 0; i < l.inner; ++i) {
      Real s = 0;
      for (int64_t d = 0; d < l.D; ++d) s += log ? g[l.at(o, d, i)] : g[l.at(o, d, i)] * y[l.at(o, d, i)];
      for (int64_t d = 0; d < l.D; ++d) {
        const int64_t k = l.at(o, d, i);
        gx[k] = log ? g[k] - std::exp(y[k]) * s : y[k] * (g[k] - s);
      }
    }
  return gx;
}

// |got - want| <= rtol |want| + atol, with -inf/inf equal and NaN never expected here.
void check_close(const std::vector<double>& got, const std::vector<Real>& want, double rtol, double atol,
                 const char* what) {
  REQUIRE(got.size() == want.size());
  int failures = 0;
  for (size_t k = 0; k < got.size() && failures < 5; ++k) {
    const double w = static_cast<double>(want[k]);
    const bool ok = std::isinf(w) ? got[k] == w : std::abs(got[k] - w) <= rtol * std::abs(w) + atol;
    if (!ok) ++failures;
    CHECK_MESSAGE(ok, std::string(what), " element ", k, ": got ", got[k], ", want ", w);
  }
}

Real max_abs(const std::vector<double>& v) {
  Real m = 0;
  for (double e : v) m = std::max<Real>(m, std::abs(e));
  return m;
}

// rtol for values the kernels compute in `dtype` (a few ulp; Eigen's float exp is within 5).
double rtol_of(DType dtype) { return dtype == kFloat32 ? 2e-6 : 1e-13; }

struct SoftmaxCase {
  Shape shape;
  int64_t dim;
};

void check_softmax_case(const SoftmaxCase& c, DType dtype, double scale, bool neg_inf) {
  const Layout l = layout_of(c.shape, c.dim);
  const int64_t n = numel_of(c.shape);
  for (const bool log : {false, true}) {
    CAPTURE(log);
    Tensor x = tensor(logits(n, scale, 11, neg_inf), c.shape, dtype).requires_grad_();
    const std::vector<double> xv = x.to_vector<double>();  // the dtype's values
    const Tensor g = tensor(logits(n, 1.0, 12, false), c.shape, dtype);
    const std::vector<double> gv = g.to_vector<double>();
    Tensor y = log ? log_softmax(x, c.dim) : softmax(x, c.dim);
    const std::vector<Real> want = ref_softmax(xv, l, log);
    const double rtol = rtol_of(dtype);
    // log_softmax = x - lse: its rounding is relative to |x| and |lse| (up to `scale`).
    const double atol = log ? rtol * (scale + 10) : (dtype == kFloat32 ? 1e-37 : 1e-300);
    const std::vector<double> yv = y.to_vector<double>();
    check_close(yv, want, rtol, atol, "forward");
    y.backward(g);
    // The backward from the saved output, as the op's (a float32 log_softmax output
    // near 0 carries |x|'s rounding: ulp(1e4) = 1e-3).
    const std::vector<Real> want_gx = ref_softmax_backward(gv, std::vector<Real>(yv.begin(), yv.end()), l, log);
    // The backward sums D terms of the saved output: error relative to the sum's terms.
    const double gx_atol = 8 * rtol * static_cast<double>(max_abs(gv)) * (log ? std::sqrt(l.D) + 1 : 1.0);
    check_close(x.grad().to_vector<double>(), want_gx, 8 * rtol, gx_atol, "backward");
    if (neg_inf) {
      // PyTorch's values at -inf logits: probability exactly 0, log-probability -inf,
      // and the gradient of log_softmax is g there (exp(-inf) = 0).
      const std::vector<double> gxv = x.grad().to_vector<double>();
      for (size_t k = 3; k < xv.size(); k += 7) {
        CHECK(yv[k] == (log ? -kInf : 0.0));
        if (log) CHECK(gxv[k] == gv[k]);
        else CHECK(gxv[k] == 0.0);
      }
    }
  }
}

const SoftmaxCase kSoftmaxCases[] = {
    {{7, 1000}, 1},     // rows: the last dim, length not a multiple of 16
    {{5, 13}, -1},      // short rows: one block of rows
    {{200, 13}, 1},     // short rows: blocks of 78 rows (kShortRowsBlock / 13) and a partial one
    {{9, 1}, 1},        // rows of one value
    {{3, 21, 5, 37}, 1},  // columns: inner 185 = one full chunk of 128 and a partial one
    {{2, 6, 300}, 1},   // columns: inner 300
    {{4, 3, 2}, 1},     // columns: inner 2
};

}  // namespace

TEST_CASE("vectorized softmax and log_softmax match a long double reference (float32, float64)") {
  for (const DType dtype : {kFloat32, kFloat64})
    for (const SoftmaxCase& c : kSoftmaxCases)
      for (const double scale : {3.0, 1e4}) {
        const std::string dtype_str = dtype_name(dtype);
        CAPTURE(dtype_str);
        CAPTURE(shape_str(c.shape));
        CAPTURE(scale);
        check_softmax_case(c, dtype, scale, /*neg_inf=*/false);
        if (c.shape[c.dim < 0 ? c.shape.size() - 1 : c.dim] > 1)  // rows of one -inf are all -inf: NaN
          check_softmax_case(c, dtype, scale, /*neg_inf=*/true);
      }
}

TEST_CASE("vectorized softmax: NaN spreads along its own row or column only") {
  for (const DType dtype : {kFloat32, kFloat64})
    for (const SoftmaxCase& c : {SoftmaxCase{{6, 40}, 1}, SoftmaxCase{{6, 7}, 1}, SoftmaxCase{{2, 5, 150}, 1}}) {
      const Layout l = layout_of(c.shape, c.dim);
      std::vector<double> v = logits(numel_of(c.shape), 3.0, 5, false);
      const int64_t nan_at = l.at(1, 2, l.inner - 1);  // outer 1, D index 2, last column
      v[static_cast<size_t>(nan_at)] = std::nan("");
      const Tensor x = tensor(v, c.shape, dtype);
      for (const bool log : {false, true}) {
        const std::vector<double> y = (log ? log_softmax(x, c.dim) : softmax(x, c.dim)).to_vector<double>();
        for (int64_t o = 0; o < l.outer; ++o)
          for (int64_t i = 0; i < l.inner; ++i)
            for (int64_t d = 0; d < l.D; ++d) {
              const bool hit = o == 1 && i == l.inner - 1;
              CHECK_MESSAGE(std::isnan(y[static_cast<size_t>(l.at(o, d, i))]) == hit, "o ", o, " d ", d, " i ", i);
            }
      }
    }
}

namespace {

struct CeCase {
  Shape shape;  // (N, C, d1...)
  bool weighted;
  int64_t ignore_index;
  double eps;
  Reduction reduction;
};

// Reference cross_entropy: per-position losses (reduced as asked) and dL/dx for an upstream gradient of 1
// (reduced) or `go` (None).
// The backward recomputes softmax from lse saved in the input's dtype (ops/loss.cpp): saved_lse rounds it so.
void ref_cross_entropy(const std::vector<double>& x, const std::vector<int64_t>& t, const std::vector<double>& w,
                       const CeCase& c, const std::vector<double>& go, DType dtype, std::vector<Real>& out,
                       std::vector<Real>& gx) {
  auto saved_lse = [dtype](Real v) { return dtype == kFloat32 ? static_cast<Real>(static_cast<float>(v)) : v; };
  const Layout l{c.shape[0], c.shape[1], numel_of(c.shape) / (c.shape[0] * c.shape[1])};
  const int64_t C = l.D;
  const Real eps = c.eps;
  std::vector<Real> loss(t.size(), 0), wpos(t.size(), 0);
  std::vector<Real> lse(t.size());
  Real total_weight = 0, wsum = 0;
  for (int64_t k = 0; k < C; ++k) wsum += w[k];
  for (int64_t o = 0; o < l.outer; ++o)
    for (int64_t i = 0; i < l.inner; ++i) {
      const size_t p = static_cast<size_t>(o * l.inner + i);
      Real mx = -INFINITY, sum = 0;
      for (int64_t k = 0; k < C; ++k) mx = std::max<Real>(mx, x[l.at(o, k, i)]);
      for (int64_t k = 0; k < C; ++k) sum += std::exp(x[l.at(o, k, i)] - mx);
      lse[p] = mx + std::log(sum);
      if (t[p] == c.ignore_index) continue;
      loss[p] = (1 - eps) * w[t[p]] * (lse[p] - x[l.at(o, t[p], i)]);
      if (eps > 0) {
        Real smooth = 0;
        for (int64_t k = 0; k < C; ++k) smooth += w[k] * (lse[p] - x[l.at(o, k, i)]);
        loss[p] += eps * smooth / C;
      }
      total_weight += w[t[p]];
    }
  Real total = 0;
  for (Real e : loss) total += e;
  out = c.reduction == Reduction::None ? loss
                                       : std::vector<Real>{c.reduction == Reduction::Sum ? total : total / total_weight};
  gx.assign(x.size(), 0);
  for (int64_t o = 0; o < l.outer; ++o)
    for (int64_t i = 0; i < l.inner; ++i) {
      const size_t p = static_cast<size_t>(o * l.inner + i);
      if (t[p] == c.ignore_index) continue;
      const Real up = c.reduction == Reduction::None ? go[p] : c.reduction == Reduction::Sum ? 1 : 1 / total_weight;
      const Real hard = (1 - eps) * w[t[p]];
      for (int64_t k = 0; k < C; ++k) {
        const Real prob = std::exp(x[l.at(o, k, i)] - saved_lse(lse[p]));
        gx[l.at(o, k, i)] = up * (prob * (hard + eps / C * wsum) - eps / C * w[k] - (k == t[p] ? hard : 0));
      }
    }
}

std::vector<int64_t> class_targets(const CeCase& c, uint64_t seed) {
  Shape ts = c.shape;
  ts.erase(ts.begin() + 1);
  Generator gen(seed);
  std::vector<int64_t> t(static_cast<size_t>(numel_of(ts)));
  for (size_t p = 0; p < t.size(); ++p) {
    t[p] = static_cast<int64_t>(std::floor(std::abs(gen.normal()) * 1000)) % c.shape[1];
    if (c.ignore_index >= 0 && p % 5 == 1) t[p] = c.ignore_index;
  }
  return t;
}

Shape target_shape(const CeCase& c) {
  Shape ts = c.shape;
  ts.erase(ts.begin() + 1);
  return ts;
}

}  // namespace

TEST_CASE("vectorized cross_entropy matches a long double reference (float32, float64)") {
  const CeCase cases[] = {
      {{37, 1000}, false, -100, 0.0, Reduction::Mean},        // rows: classifier, 37 rows = one partial block
      {{300, 19}, true, 4, 0.1, Reduction::Sum},              // rows: 3 blocks, weights, ignore, smoothing
      {{3, 21, 5, 37}, true, -100, 0.0, Reduction::Mean},     // runs: 185 positions a sample
      {{2, 4, 300}, true, 2, 0.2, Reduction::None},           // runs: C = 4, every option
      {{2, 7, 3}, false, -100, 0.05, Reduction::Mean},        // runs shorter than a vector
      {{500, 10}, true, 3, 0.1, Reduction::Mean},             // short rows (C = 10)
  };
  for (const DType dtype : {kFloat32, kFloat64})
    for (const CeCase& c : cases)
      for (const double scale : {3.0, 1e4})
        for (const bool neg_inf : {false, true}) {
          const std::string dtype_str = dtype_name(dtype);
        CAPTURE(dtype_str);
          CAPTURE(shape_str(c.shape));
          CAPTURE(scale);
          CAPTURE(neg_inf);
          const int64_t n = numel_of(c.shape), C = c.shape[1];
          std::vector<double> xv = logits(n, scale, 21, false);
          const std::vector<int64_t> tv = class_targets(c, 22);
          if (neg_inf) {
            // -inf at some logits other than the target's (a finite loss, as PyTorch; smoothing would make it inf).
            const Layout l{c.shape[0], C, n / (c.shape[0] * C)};
            for (int64_t o = 0; o < l.outer; ++o)
              for (int64_t i = 0; i < l.inner; ++i) {
                const int64_t k = (tv[o * l.inner + i] + 1) % C;
                if (c.eps == 0.0 && k != tv[o * l.inner + i]) xv[l.at(o, k, i)] = -kInf;
              }
          }
          Tensor x = tensor(xv, c.shape, dtype).requires_grad_();
          const std::vector<double> xd = x.to_vector<double>();
          const Tensor t = tensor(tv, target_shape(c), kInt64);
          std::vector<double> wv(static_cast<size_t>(C), 1.0);
          if (c.weighted)
            for (int64_t k = 0; k < C; ++k) wv[k] = 0.25 + 0.5 * static_cast<double>(k % 4);
          const Tensor w = c.weighted ? tensor(wv, {C}, dtype) : Tensor();
          const std::vector<double> go = logits(numel_of(target_shape(c)), 1.0, 23, false);
          std::vector<Real> want, want_gx;
          ref_cross_entropy(xd, tv, wv, c, go, dtype, want, want_gx);
          Tensor loss = cross_entropy(x, t, w, c.reduction, c.ignore_index, c.eps);
          const double rtol = rtol_of(dtype);
          // The loss is lse - x_t: rounding relative to the logits' size.
          check_close(loss.to_vector<double>(), want, 4 * rtol, 4 * rtol * (scale + 10), "loss");
          if (c.reduction == Reduction::None) loss.backward(tensor(go, target_shape(c), dtype));
          else loss.backward();
          check_close(x.grad().to_vector<double>(), want_gx, 8 * rtol, 8 * rtol * (1 + max_abs(go)), "grad");
          if (c.eps == 0.0) {
            // nll_loss of the log-probabilities is the same loss (its blocks and reduction are shared).
            const Tensor nll = nll_loss(log_softmax(x.detach(), 1), t, w, c.reduction, c.ignore_index);
            check_close(nll.to_vector<double>(), want, 8 * rtol, 8 * rtol * (scale + 10), "nll_loss");
          }
        }
}

TEST_CASE("vectorized cross_entropy: a NaN logit makes its position's loss NaN, the others finite") {
  for (const DType dtype : {kFloat32, kFloat64})
    for (const Shape& shape : {Shape{20, 30}, Shape{2, 5, 140}}) {
      std::vector<double> v = logits(numel_of(shape), 3.0, 31, false);
      v[static_cast<size_t>(numel_of(shape) - 1)] = std::nan("");  // the last position's last class
      const Tensor target = zeros(target_shape({shape, false, -100, 0.0, Reduction::None}), kInt64);
      const std::vector<double> losses =
          cross_entropy(tensor(v, shape, dtype), target, Reduction::None).to_vector<double>();
      for (size_t p = 0; p < losses.size(); ++p) CHECK(std::isnan(losses[p]) == (p + 1 == losses.size()));
      CHECK(std::isnan(cross_entropy(tensor(v, shape, dtype), target).item<double>()));
    }
}

TEST_CASE("vectorized cross_entropy with probability targets matches a long double reference (dx and dq)") {
  struct ProbsCase {
    Shape shape;
    bool weighted;
    double eps;
    Reduction reduction;
  };
  const ProbsCase cases[] = {{{37, 1000}, true, 0.0, Reduction::Mean},  // rows
                             {{50, 7}, false, 0.1, Reduction::Sum},     // short rows
                             {{3, 21, 5, 37}, true, 0.2, Reduction::None},  // runs
                             {{2, 4, 300}, false, 0.0, Reduction::Mean},
                             {{19}, true, 0.1, Reduction::Mean}};  // 1-D input: one position
  for (const DType dtype : {kFloat32, kFloat64})
    for (const ProbsCase& c : cases)
      for (const double scale : {3.0, 1e4}) {
        const std::string dtype_str = dtype_name(dtype);
        CAPTURE(dtype_str);
        CAPTURE(shape_str(c.shape));
        CAPTURE(scale);
        const bool one_d = c.shape.size() == 1;
        const Layout l = one_d ? Layout{1, c.shape[0], 1} : Layout{c.shape[0], c.shape[1], numel_of(c.shape) / (c.shape[0] * c.shape[1])};
        const int64_t n = numel_of(c.shape), C = l.D;
        Tensor x = tensor(logits(n, scale, 61, false), c.shape, dtype).requires_grad_();
        // Probabilities along the class dim.
        const Tensor q = softmax(tensor(logits(n, 2.0, 62, false), c.shape, dtype), one_d ? 0 : 1).detach().requires_grad_();
        std::vector<double> wv(static_cast<size_t>(C), 1.0);
        if (c.weighted)
          for (int64_t k = 0; k < C; ++k) wv[k] = 0.25 + 0.5 * static_cast<double>(k % 4);
        const Tensor w = c.weighted ? tensor(wv, {C}, dtype) : Tensor();
        const std::vector<double> xv = x.to_vector<double>(), qv = q.to_vector<double>();
        const int64_t positions = l.outer * l.inner;
        const std::vector<double> go = logits(positions, 1.0, 63, false);
        // Reference: loss = sum_c w_c q'_c (lse - x_c); dx, dq with lse saved in the dtype.
        std::vector<Real> loss(static_cast<size_t>(positions)), gx(xv.size()), gq(xv.size());
        const Real eps = c.eps, u = eps / C;
        for (int64_t o = 0; o < l.outer; ++o)
          for (int64_t i = 0; i < l.inner; ++i) {
            const size_t p = static_cast<size_t>(o * l.inner + i);
            Real mx = -INFINITY, sum = 0, wq = 0;
            for (int64_t k = 0; k < C; ++k) mx = std::max<Real>(mx, xv[l.at(o, k, i)]);
            for (int64_t k = 0; k < C; ++k) sum += std::exp(xv[l.at(o, k, i)] - mx);
            const Real lse = mx + std::log(sum);
            const Real saved = dtype == kFloat32 ? static_cast<Real>(static_cast<float>(lse)) : lse;
            for (int64_t k = 0; k < C; ++k) {
              const Real qq = (1 - eps) * qv[l.at(o, k, i)] + u;
              loss[p] += wv[k] * qq * (lse - xv[l.at(o, k, i)]);
              wq += wv[k] * qq;
            }
            const Real up = c.reduction == Reduction::None ? go[p] : c.reduction == Reduction::Sum ? 1 : Real(1) / positions;
            for (int64_t k = 0; k < C; ++k) {
              const int64_t e = l.at(o, k, i);
              const Real qq = (1 - eps) * qv[e] + u;
              gx[e] = up * (std::exp(xv[e] - saved) * wq - wv[k] * qq);
              gq[e] = -up * (1 - eps) * wv[k] * (xv[e] - saved);
            }
          }
        Real total = 0;
        for (Real e : loss) total += e;
        const std::vector<Real> want = c.reduction == Reduction::None ? loss
                                       : std::vector<Real>{c.reduction == Reduction::Sum ? total : total / positions};
        Tensor out = cross_entropy(x, q, w, c.reduction, -100, c.eps);
        const double rtol = rtol_of(dtype);
        check_close(out.to_vector<double>(), want, 8 * rtol, 8 * rtol * (scale + 10) * (c.reduction == Reduction::Sum ? positions : 1), "loss");
        Shape go_shape = c.shape;
        go_shape.erase(go_shape.begin() + (one_d ? 0 : 1));
        if (c.reduction == Reduction::None) out.backward(tensor(go, go_shape, dtype));
        else out.backward();
        check_close(x.grad().to_vector<double>(), gx, 8 * rtol, 8 * rtol * (1 + max_abs(go)), "dx");
        // dq carries (x - lse): rounding relative to the logits' size.
        check_close(q.grad().to_vector<double>(), gq, 8 * rtol, 8 * rtol * (scale + 10) * (1 + max_abs(go)), "dq");
      }
}

namespace {

// The bits of a float tensor's values.
std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

// Everything the kernels produce for one input (softmax, log_softmax, cross_entropy, nll_loss;
// forward and backward), at the current thread count.
std::vector<std::vector<double>> run_all(const Tensor& x_in, const Tensor& t, const Tensor& w, const Tensor& g) {
  std::vector<std::vector<double>> out;
  for (const int64_t dim : {int64_t{1}, int64_t{-1}})
    for (const bool log : {false, true}) {
      Tensor x = x_in.detach().requires_grad_();
      Tensor y = log ? log_softmax(x, dim) : softmax(x, dim);
      y.backward(g);
      out.push_back(values(y));
      out.push_back(values(x.grad()));
    }
  for (const Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
    Tensor lp = log_softmax(x_in, 1).detach().requires_grad_();
    Tensor nll = nll_loss(lp, t, w, r, 3);
    (r == Reduction::None ? nll.sum() : nll).backward();
    out.push_back(values(nll));
    out.push_back(values(lp.grad()));
    for (const double eps : {0.0, 0.1}) {
      Tensor x = x_in.detach().requires_grad_();
      Tensor loss = cross_entropy(x, t, w, r, 3, eps);
      (r == Reduction::None ? loss.sum() : loss).backward();
      out.push_back(values(loss));
      out.push_back(values(x.grad()));
    }
    // Probability targets (the softmax of g along dim 1), dx and dq.
    Tensor x = x_in.detach().requires_grad_(), q = softmax(g, 1).detach().requires_grad_();
    Tensor loss = cross_entropy(x, q, w, r, -100, 0.1);
    (r == Reduction::None ? loss.sum() : loss).backward();
    for (const Tensor& v : {loss, x.grad(), q.grad()}) out.push_back(values(v));
  }
  return out;
}

}  // namespace

TEST_CASE("vectorized softmax and cross_entropy: bit-identical at 1 and 2 threads") {
  const int saved = get_num_threads();
  for (const DType dtype : {kFloat32, kFloat64})
    for (const Shape& shape : {Shape{4, 21, 30, 40}, Shape{600, 100}, Shape{12000, 5}}) {
      CAPTURE(shape_str(shape));
      const int64_t n = numel_of(shape), C = shape[1];
      const Tensor x = tensor(logits(n, 8.0, 41, false), shape, dtype), g = tensor(logits(n, 1.0, 42, false), shape, dtype);
      CeCase c{shape, true, 3, 0.0, Reduction::Mean};
      const Tensor t = tensor(class_targets(c, 43), target_shape(c), kInt64);
      std::vector<double> wv(static_cast<size_t>(C));
      for (int64_t k = 0; k < C; ++k) wv[k] = 0.5 + static_cast<double>(k % 3);
      const Tensor w = tensor(wv, {C}, dtype);
      set_num_threads(1);
      const auto one = run_all(x, t, w, g);
      set_num_threads(2);
      const auto two = run_all(x, t, w, g);
      set_num_threads(saved);
      REQUIRE(one.size() == two.size());
      for (size_t k = 0; k < one.size(); ++k) CHECK_MESSAGE(same_bits(one[k], two[k]), "result ", k);
    }
}

TEST_CASE("vectorized softmax and cross_entropy on a non-contiguous input equal the contiguous one") {
  for (const DType dtype : {kFloat32, kFloat64}) {
    // (N, H, C) transposed to (N, C, H): class dim 1 with stride 1, positions with stride C.
    std::vector<double> v = logits(3 * 50 * 7, 5.0, 51, false);
    for (size_t k = 5; k < v.size(); k += 11) v[k] = -kInf;  // never a whole row along either dim
    const Tensor base = tensor(v, {3, 50, 7}, dtype);
    const Tensor x = base.transpose(1, 2);
    REQUIRE_FALSE(x.is_contiguous());
    const Tensor xc = x.contiguous();
    for (const int64_t dim : {int64_t{1}, int64_t{2}}) {
      CHECK(same_bits(values(softmax(x, dim)), values(softmax(xc, dim))));
      CHECK(same_bits(values(log_softmax(x, dim)), values(log_softmax(xc, dim))));
      const std::vector<Real> want = ref_softmax(values(xc), layout_of(xc.shape(), dim), false);
      check_close(values(softmax(x, dim)), want, rtol_of(dtype), dtype == kFloat32 ? 1e-37 : 1e-300, "softmax");
    }
    const Tensor t = tensor(class_targets({{3, 7, 50}, false, -100, 0.0, Reduction::Mean}, 52), {3, 50}, kInt64);
    Tensor xg = x.detach().requires_grad_(), xcg = xc.detach().requires_grad_();
    const Tensor a = cross_entropy(xg, t), b = cross_entropy(xcg, t);
    CHECK(same_bits(values(a), values(b)));
    a.backward();
    b.backward();
    CHECK(same_bits(values(xg.grad()), values(xcg.grad())));
  }
}

TEST_CASE("vectorized softmax and cross_entropy: exps below the smallest normal number are 0, in packets and tails") {
  // Rows (D = 37: packets and a scalar tail; 1000) and columns (the same values
  // along dim 0) whose logits x - max sweep the flush boundary (float32: ln of
  // the smallest normal = -87.34; float64: -708.40), every 5th -inf. softmax and
  // cross_entropy's gradient (softmax - one-hot, reduction sum) must be exactly
  // 0 at -inf, close to the exact value where that is normal, and within the
  // smallest normal number of it below (flushed to 0 or a subnormal: AVX-512's
  // float exp is not flushed, ops/cpu/softmax_rows.h).
  for (const DType dtype : {kFloat32, kFloat64}) {
    const double tiny = dtype == kFloat32 ? std::numeric_limits<float>::min() : std::numeric_limits<double>::min();
    const double edge = std::log(tiny);
    for (const int64_t D : {int64_t{37}, int64_t{1000}}) {
      CAPTURE(D);
      std::vector<double> row(static_cast<size_t>(D));
      for (int64_t k = 1; k < D; ++k) row[k] = k % 5 == 0 ? -kInf : edge - 1.5 + 3.0 * double(k) / double(D);
      std::vector<double> v;
      for (int r = 0; r < 20; ++r) v.insert(v.end(), row.begin(), row.end());
      const Tensor x = tensor(v, {20, D}, dtype);  // 20 rows: 20 columns along dim 0
      for (const bool columns : {false, true}) {
        CAPTURE(columns);
        const Tensor xin = columns ? x.t().contiguous() : x;  // columns: (D, 20), class dim 0
        const int64_t dim = columns ? 0 : 1;
        const std::vector<double> y = (columns ? softmax(xin, dim).t().contiguous() : softmax(xin, dim)).to_vector<double>();
        Tensor xg = x.detach().requires_grad_();
        cross_entropy(xg, tensor(std::vector<int64_t>(20, 0), {20}, kInt64), Reduction::Sum).backward();
        const std::vector<double> gx = xg.grad().to_vector<double>();
        Real sum = 0;  // row's sum of exp(x - max), max = 0
        for (double e : row) sum += std::exp(Real(e));
        for (int64_t k = 1; k < D; ++k) {
          const double exact = double(std::exp(Real(row[k])) / sum);
          for (const double got : {y[k], gx[D + k]}) {  // row 1 of each
            CAPTURE(row[k]);
            if (row[k] == -kInf) CHECK(got == 0.0);
            else CHECK(std::abs(got - exact) <= 1e-5 * exact + (exact < 1.01 * tiny ? tiny : 0.0));
            CHECK(got >= 0.0);
          }
        }
      }
    }
  }
}
