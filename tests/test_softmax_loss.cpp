// softmax / log_softmax and the losses (cross_entropy, nll_loss, mse_loss):
// values against loops written here (and numbers PyTorch printed), gradient
// checks for every reduction with ignore_index and label smoothing, float32,
// the parallel paths, error paths.
#include <cmath>
#include <limits>

#include "tests/test_util.h"

using namespace minidl;
using minidl::testing::allclose;
using minidl::testing::check_gradients;

namespace {

// x[i] = 2 fn(a i + b): deterministic values PyTorch saw too.
Tensor wave(const Shape& shape, double a = 0.7, double b = 0.3, bool cosine = false, DType dtype = kFloat64) {
  std::vector<double> v(static_cast<size_t>(numel_of(shape)));
  for (size_t i = 0; i < v.size(); ++i) {
    const double arg = a * static_cast<double>(i) + b;
    v[i] = 2.0 * (cosine ? std::cos(arg) : std::sin(arg));
  }
  return tensor(v, shape, dtype);
}

Tensor random_input(const Shape& shape, uint64_t seed, double scale = 1.0) {
  manual_seed(seed);
  Tensor x = randn(shape, kFloat64);
  if (scale != 1.0) {
    std::vector<double> v = x.to_vector<double>();
    for (double& e : v) e *= scale;
    x = tensor(v, shape, kFloat64);
  }
  return x.requires_grad_();
}

Tensor targets(const std::vector<int64_t>& v, const Shape& shape) { return tensor(v, shape, kInt64); }
Tensor target0d(int64_t v) { return full({}, static_cast<double>(v), kInt64); }

void check_values(const Tensor& got, const std::vector<double>& want, double tol = 1e-12) {
  const std::vector<double> v = got.to_vector<double>();
  REQUIRE(v.size() == want.size());
  for (size_t i = 0; i < v.size(); ++i)
    CHECK_MESSAGE(std::abs(v[i] - want[i]) <= tol * (1 + std::abs(want[i])), "element ", i, ": ", v[i], " vs ",
                  want[i]);
}

// Softmax along `dim` by plain loops over (outer, D, inner); no max shift
// (inputs here are small).
std::vector<double> ref_softmax(const Tensor& x, int64_t dim, bool log) {
  const std::vector<double> v = x.to_vector<double>();
  const Shape& s = x.shape();
  if (dim < 0) dim += x.dim();
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= s[d];
  for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= s[d];
  const int64_t D = s[dim];
  std::vector<double> out(v.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      double z = 0;
      for (int64_t d = 0; d < D; ++d) z += std::exp(v[(o * D + d) * inner + i]);
      for (int64_t d = 0; d < D; ++d) {
        const double e = v[(o * D + d) * inner + i];
        out[(o * D + d) * inner + i] = log ? e - std::log(z) : std::exp(e) / z;
      }
    }
  return out;
}

// PyTorch's cross entropy on (N, C, S) logits with label smoothing eps:
// per position (1-eps) * -logp_t + eps * sum_c -logp_c / C; ignored positions 0;
// mean divides by the number of non-ignored positions.
std::vector<double> ref_cross_entropy(const Tensor& x, const std::vector<int64_t>& t, Reduction reduction,
                                      int64_t ignore_index, double eps, bool log_probs_given = false) {
  const std::vector<double> v = x.to_vector<double>();
  const int64_t N = x.dim() == 1 ? 1 : x.size(0), C = x.dim() == 1 ? x.size(0) : x.size(1);
  const int64_t S = static_cast<int64_t>(v.size()) / (N * C);
  std::vector<double> losses;
  double total = 0;
  int64_t count = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t s = 0; s < S; ++s) {
      auto at = [&](int64_t c) { return v[(n * C + c) * S + s]; };
      const int64_t target = t[n * S + s];
      if (target == ignore_index) {
        losses.push_back(0.0);
        continue;
      }
      double z = 0;
      for (int64_t c = 0; c < C; ++c) z += std::exp(at(c));
      auto logp = [&](int64_t c) { return log_probs_given ? at(c) : at(c) - std::log(z); };
      double smooth = 0;
      for (int64_t c = 0; c < C; ++c) smooth -= logp(c);
      const double loss = (1 - eps) * -logp(target) + eps * smooth / static_cast<double>(C);
      losses.push_back(loss);
      total += loss;
      ++count;
    }
  if (reduction == Reduction::None) return losses;
  if (reduction == Reduction::Sum) return {total};
  return {total / static_cast<double>(count)};
}

// check_gradients builds its probe with tensor(values, shape), which makes a
// 0-d shape 1-D; reduced losses go through it as shape [1].
Tensor as_1d(const Tensor& t) { return t.dim() == 0 ? t.reshape({1}) : t; }

const Reduction kReductions[] = {Reduction::None, Reduction::Mean, Reduction::Sum};

const char* reduction_name(Reduction r) {
  return r == Reduction::None ? "none" : r == Reduction::Mean ? "mean" : "sum";
}

}  // namespace

// ---- softmax -------------------------------------------------------------------------

TEST_CASE("softmax and log_softmax match direct loops along every dim") {
  const Tensor a = random_input({3, 5, 4}, 1);
  const Tensor b = random_input({2, 3, 130}, 2);  // inner 130: several column chunks
  for (bool log : {false, true})
    for (int64_t dim : {0, 1, 2, -1, -2, -3}) {
      CAPTURE(log);
      CAPTURE(dim);
      const Tensor ya = log ? log_softmax(a, dim) : softmax(a, dim);
      CHECK(ya.shape() == a.shape());
      check_values(ya, ref_softmax(a, dim, log));
      check_values(log ? log_softmax(b, dim) : softmax(b, dim), ref_softmax(b, dim, log));
    }
}

TEST_CASE("softmax is stable for large logits") {
  const Tensor big = tensor({1000, 1001, 1002, -1000, -1001, -1002}, {2, 3}, kFloat64);
  const Tensor small = tensor({0, 1, 2, 2, 1, 0}, {2, 3}, kFloat64);
  CHECK(allclose(softmax(big, 1), softmax(small, 1), 1e-12, 1e-15));
  check_values(log_softmax(big, 1), ref_softmax(small, 1, true));
  const Tensor big32 = big.to(kFloat32);
  for (double p : softmax(big32, 1).to_vector<double>()) CHECK(std::isfinite(p));
  // (x - max) - log(sum), as PyTorch: no rounding of the shift to float32's
  // spacing near 1000 (6e-5, which x - (max + log(sum)) carried).
  CHECK(allclose(log_softmax(big32, -1), log_softmax(small, -1).to(kFloat32), 0.0, 1e-6));
}

TEST_CASE("log_softmax keeps its precision far from 0: short rows, long rows, columns") {
  // float32 rows base + [0, 0, 1, 2] (-1e9: a masked row, all equal in
  // float32) against float64 on the same float32 values. The shift max +
  // log(sum) was rounded to float32: 1e5 gave -2.4921875 for -2.4938116, a
  // masked row 0 for -log(4).
  for (double base : {1000.0, 1e5, -1e9}) {
    for (int64_t reps : {int64_t{1}, int64_t{600}}) {  // D = 4 (short rows) and 2400 (rows)
      CAPTURE(base);
      CAPTURE(reps);
      std::vector<double> v;
      for (int64_t r = 0; r < reps; ++r)
        for (double d : {0.0, 0.0, 1.0, 2.0}) v.push_back(base + d);
      const Tensor x = tensor(v, {1, 4 * reps}).to(kFloat32);
      const Tensor want = log_softmax(x.to(kFloat64), 1);
      CHECK(allclose(log_softmax(x, 1).to(kFloat64), want, 1e-7, 1e-7));
      const Tensor columns = cat({x.t(), x.t()}, 1);  // (D, 2): dim 0 has inner 2, the column kernel
      CHECK(allclose(log_softmax(columns, 0).select(1, 1).reshape({1, 4 * reps}).to(kFloat64), want, 1e-7, 1e-7));
    }
  }
  const Tensor masked = full({2, 4}, -1e9, kFloat32);
  for (double y : log_softmax(masked, 1).to_vector<double>()) CHECK(y == doctest::Approx(-std::log(4.0)).epsilon(1e-7));
}

TEST_CASE("softmax agrees with values PyTorch printed") {
  const Tensor x = wave({2, 3, 4});
  check_values(softmax(x, 1).select(0, 1).select(1, 2), {0.08875562781048678, 0.596439024602303, 0.3148053475872103});
  check_values(log_softmax(x, -1).select(0, 1).select(0, 2),
               {-0.5248291031726516, -1.1977973514076448, -2.482446664150004, -3.774586396417773});
}

TEST_CASE("softmax of a 0-d tensor and of an empty tensor") {
  const Tensor s = scalar_tensor(2.5, kFloat64);
  CHECK(softmax(s, 0).item<double>() == 1.0);
  CHECK(log_softmax(s, -1).item<double>() == 0.0);
  CHECK(softmax(s, 0).dim() == 0);
  CHECK(softmax(zeros({0, 4}), 1).shape() == Shape{0, 4});
}

TEST_CASE("softmax and log_softmax gradients match finite differences") {
  for (bool log : {false, true}) {
    for (int64_t dim : {0, 1, 2, -1}) {
      CAPTURE(log);
      CAPTURE(dim);
      check_gradients(
          [&](const std::vector<Tensor>& in) { return log ? log_softmax(in[0], dim) : softmax(in[0], dim); },
          {random_input({3, 5, 4}, 3)});
    }
    check_gradients([&](const std::vector<Tensor>& in) { return log ? log_softmax(in[0], 1) : softmax(in[0], 1); },
                    {random_input({2, 3, 70}, 4)});
  }
}

TEST_CASE("float32 softmax agrees with float64, also on the parallel path") {
  const Tensor x = random_input({64, 37, 40}, 5, 3.0);  // 94720 elements
  const Tensor x32 = x.to(kFloat32);
  for (int64_t dim : {0, 1, 2}) {
    CAPTURE(dim);
    const std::vector<double> want = ref_softmax(x, dim, false), want_log = ref_softmax(x, dim, true);
    check_values(softmax(x, dim), want, 1e-10);
    check_values(log_softmax(x, dim), want_log, 1e-10);
    check_values(softmax(x32, dim), want, 1e-5);
    check_values(log_softmax(x32, dim), want_log, 1e-5);
  }
  // Parallel backward: sum over the softmax dim of the softmax gradient is 0.
  Tensor y = softmax(x, 2);
  y.backward(x.detach());
  const std::vector<double> g = x.grad().to_vector<double>();
  for (int64_t row = 0; row < 64 * 37; row += 97) {
    double s = 0;
    for (int64_t i = 0; i < 40; ++i) s += g[row * 40 + i];
    CHECK(std::abs(s) < 1e-12);
  }
}

TEST_CASE("softmax errors") {
  CHECK_THROWS_CONTAINS(softmax(zeros({3, 4}), 2),
                        "Dimension out of range (expected to be in range of [-2, 1], but got 2)");
  CHECK_THROWS_CONTAINS(log_softmax(zeros({3, 4}), -3), "Dimension out of range");
  CHECK_THROWS_CONTAINS(softmax(zeros({3}, kInt64), 0), "softmax: expected a floating point tensor, got int64");
  CHECK_THROWS_CONTAINS(log_softmax(Tensor(), 0), "log_softmax: expected a defined tensor");
}

// ---- cross_entropy / nll_loss --------------------------------------------------------------

TEST_CASE("cross_entropy matches the direct formula") {
  const Tensor x2 = random_input({3, 5}, 6);
  const std::vector<int64_t> t2 = {4, 0, 2};
  const std::vector<int64_t> t2_ignored = {4, -100, 2};
  const Tensor x4 = random_input({2, 5, 3, 2}, 7);
  const std::vector<int64_t> t4 = {0, 1, 2, 3, 4, 0, 4, 3, 2, 1, 0, 0};
  const std::vector<int64_t> t4_ignored = {0, 1, 7, 3, 4, 0, 4, 3, 7, 1, 7, 0};  // ignore_index 7
  for (Reduction r : kReductions)
    for (double eps : {0.0, 0.1, 1.0}) {
      const std::string what = std::string(reduction_name(r)) + " eps " + std::to_string(eps);
      CAPTURE(what);
      check_values(cross_entropy(x2, targets(t2, {3}), r, -100, eps), ref_cross_entropy(x2, t2, r, -100, eps));
      check_values(cross_entropy(x2, targets(t2_ignored, {3}), r, -100, eps),
                   ref_cross_entropy(x2, t2_ignored, r, -100, eps));
      const Tensor l4 = cross_entropy(x4, targets(t4, {2, 3, 2}), r, -100, eps);
      CHECK(l4.shape() == (r == Reduction::None ? Shape{2, 3, 2} : Shape{}));
      check_values(l4, ref_cross_entropy(x4, t4, r, -100, eps));
      check_values(cross_entropy(x4, targets(t4_ignored, {2, 3, 2}), r, 7, eps),
                   ref_cross_entropy(x4, t4_ignored, r, 7, eps));
    }
  // Unbatched (C) input with a 0-d target.
  const Tensor x1 = random_input({5}, 8);
  const Tensor l1 = cross_entropy(x1, target0d(3), Reduction::None, -100, 0.2);
  CHECK(l1.dim() == 0);
  check_values(l1, ref_cross_entropy(x1, {3}, Reduction::None, -100, 0.2));
}

TEST_CASE("cross_entropy agrees with values PyTorch printed") {
  const Tensor x = wave({4, 5}).requires_grad_();
  const Tensor t = targets({1, 4, -100, 0}, {4});
  check_values(cross_entropy(x, t, Reduction::None, -100, 0.1),
               {1.3368925132540448, 0.6206218953238929, 0.0, 3.923410474715389});
  check_values(cross_entropy(x, t, Reduction::Sum, -100, 0.1), {5.880924883293327});
  Tensor mean = cross_entropy(x, t, Reduction::Mean, -100, 0.1);
  check_values(mean, {1.960308294431109});
  mean.backward();
  check_values(x.grad().select(0, 0), {0.02435900946360921, -0.2142121621717754, 0.11818224898940866,
                                       0.059667232867560815, 0.012003670851196713});
  check_values(x.grad().select(0, 3), {-0.301022263146232, 0.0003034547022259068, 0.012944093870088238,
                                       0.0706172496281969, 0.21715746494572086});
  for (double g : x.grad().select(0, 2).to_vector<double>()) CHECK(g == 0.0);  // the ignored row

  const Tensor x4 = wave({2, 5, 3, 2});
  const Tensor t4 = targets({0, 1, 2, 3, 4, -100, 4, 3, 2, 1, 0, 0}, {2, 3, 2});
  check_values(cross_entropy(x4, t4), {2.457867722720276});
  check_values(cross_entropy(x4, t4, Reduction::Mean, -100, 0.25), {2.4320912597308277});
  check_values(cross_entropy(tensor({-1.5, 0.2, 3.0}, {1, 3}), targets({2}, {1})), {0.06945057958364487}, 1e-7);
}

TEST_CASE("cross_entropy gradients match finite differences for every reduction") {
  const std::vector<int64_t> t2 = {4, -100, 2, 0};
  const std::vector<int64_t> t4 = {0, 1, -100, 3, 4, 0, 4, -100, 2, 1, 0, 0};
  for (Reduction r : kReductions)
    for (double eps : {0.0, 0.3}) {
      const std::string what = std::string(reduction_name(r)) + " eps " + std::to_string(eps);
      CAPTURE(what);
      check_gradients(
          [&](const std::vector<Tensor>& in) { return as_1d(cross_entropy(in[0], targets(t2, {4}), r, -100, eps)); },
          {random_input({4, 5}, 9)});
      check_gradients(
          [&](const std::vector<Tensor>& in) {
            return as_1d(cross_entropy(in[0], targets(t4, {2, 3, 2}), r, -100, eps));
          },
          {random_input({2, 5, 3, 2}, 10)});
      check_gradients(
          [&](const std::vector<Tensor>& in) { return as_1d(cross_entropy(in[0], target0d(2), r, -100, eps)); },
          {random_input({5}, 11)});
    }
  // Large logits: the fused backward stays exact.
  check_gradients(
      [&](const std::vector<Tensor>& in) {
        return as_1d(cross_entropy(in[0], targets({1, 0, 2}, {3}), Reduction::Mean, -100, 0.1));
      },
      {random_input({3, 4}, 12, 30.0)});
}

TEST_CASE("cross_entropy equals nll_loss of log_softmax, forward and backward") {
  const std::vector<int64_t> t = {0, 2, 1, 2, -100, 1, 0, 0, 2, 1, 1, 2};
  for (Reduction r : kReductions) {
    const std::string reduction = reduction_name(r);
    CAPTURE(reduction);
    Tensor a = random_input({2, 3, 6}, 13), b = a.detach().requires_grad_();
    Tensor la = cross_entropy(a, targets(t, {2, 6}), r);
    Tensor lb = nll_loss(log_softmax(b, 1), targets(t, {2, 6}), r);
    CHECK(allclose(la, lb, 1e-12, 1e-14));
    const Tensor g = r == Reduction::None ? random_input(la.shape(), 14).detach() : ones_like(la);
    la.backward(g);
    lb.backward(g);
    CHECK(allclose(a.grad(), b.grad(), 1e-10, 1e-14));
  }
}

TEST_CASE("nll_loss matches the direct formula and finite differences") {
  const Tensor x = random_input({4, 5, 3}, 15);
  const std::vector<int64_t> t = {0, 4, 1, -100, 2, 3, 4, 4, 0, 1, -100, 2};
  for (Reduction r : kReductions) {
    const std::string reduction = reduction_name(r);
    CAPTURE(reduction);
    check_values(nll_loss(x, targets(t, {4, 3}), r), ref_cross_entropy(x, t, r, -100, 0.0, /*log_probs_given=*/true));
    check_gradients(
        [&](const std::vector<Tensor>& in) {
          return as_1d(nll_loss(in[0], targets(t, {4, 3}), r));
        },
        {random_input({4, 5, 3}, 16)});
  }
  check_values(nll_loss(wave({4, 5}), targets({1, 4, -100, 0}, {4})), {-0.11471741216985516});
}

TEST_CASE("mean over only ignored targets is nan with a zero gradient, as PyTorch") {
  for (double eps : {0.0, 0.2}) {
    Tensor x = random_input({3, 5}, 17);
    Tensor l = cross_entropy(x, targets({-100, -100, -100}, {3}), Reduction::Mean, -100, eps);
    CHECK(std::isnan(l.item<double>()));
    l.backward();
    for (double g : x.grad().to_vector<double>()) CHECK(g == 0.0);
    CHECK(cross_entropy(x, targets({-100, -100, -100}, {3}), Reduction::Sum, -100, eps).item<double>() == 0.0);
  }
  Tensor x = random_input({3, 5}, 18);
  CHECK(std::isnan(nll_loss(x, targets({-100, -100, -100}, {3})).item<double>()));
  CHECK(std::isnan(cross_entropy(zeros({0, 5}, kFloat64), zeros({0}, kInt64)).item<double>()));
}

TEST_CASE("cross_entropy and nll_loss take uint8 class indices for 1-D and 2-D input, as PyTorch") {
  // PyTorch: F.cross_entropy(x, torch.tensor([2, 0, 1, 1], dtype=torch.uint8)) and x.grad, x float64 as below.
  const Tensor x = tensor({0.5, -1.0, 2.0, 1.5, 0.25, -0.5, 0.0, 1.0, -2.0, 3.0, -0.75, 0.125}, {4, 3}, kFloat64)
                       .requires_grad_();
  const Tensor t8 = tensor({2, 0, 1, 1}, {4}, kUInt8);
  const Tensor loss = cross_entropy(x, t8);
  check_values(loss, {1.192293799807741});
  loss.backward();
  check_values(x.grad(), {0.04382259803500917, 0.009778143317671862, -0.05360074135268103, -0.07417150599455652,
                          0.050375706957262734, 0.023795799037293747, 0.06487411508560478, -0.0736538718254397,
                          0.008779756739834933, 0.23149565301093497, -0.24455574406571795, 0.01306009105478294});
  check_values(nll_loss(x.detach(), t8, Reduction::Sum), {-3.75});
  check_values(cross_entropy(x.detach().select(0, 1), tensor({2}, {1}, kUInt8).reshape({})), {2.351951863802802});
  // PyTorch's nll_loss2d (3-D or more input) takes Long only; other integer types are refused.
  CHECK_THROWS_CONTAINS(cross_entropy(zeros({2, 3, 4}), zeros({2, 4}, kUInt8)),
                        "cross_entropy: expected scalar type Long but found Byte");
  CHECK_THROWS_CONTAINS(nll_loss(x, tensor({2, 0, 1, 1}, {4}, kFloat16)),
                        "nll_loss: expected target dtype to be Long or Byte (int64 or uint8 class indices), but "
                        "got float16");
}

TEST_CASE("float32 cross_entropy agrees with float64 on a large batch") {
  manual_seed(19);
  const Tensor x = random_input({4096, 10}, 19, 4.0);
  const Tensor t = randint(0, 10, {4096});
  const std::vector<int64_t> tv = t.to_vector<int64_t>();
  for (double eps : {0.0, 0.1}) {
    const double want = ref_cross_entropy(x, tv, Reduction::Mean, -100, eps)[0];
    CHECK(cross_entropy(x, t, Reduction::Mean, -100, eps).item<double>() == doctest::Approx(want).epsilon(1e-12));
    Tensor x32 = x.detach().to(kFloat32).requires_grad_();
    Tensor l32 = cross_entropy(x32, t, Reduction::Mean, -100, eps);
    CHECK(l32.dtype() == kFloat32);
    CHECK(l32.item<double>() == doctest::Approx(want).epsilon(1e-6));
    l32.backward();
    // Each row's gradient sums to 0 (softmax sums to 1, the smoothed target too).
    const std::vector<double> g = x32.grad().to_vector<double>();
    for (int64_t n = 0; n < 4096; n += 511) {
      double s = 0;
      for (int64_t c = 0; c < 10; ++c) s += g[n * 10 + c];
      CHECK(std::abs(s) < 1e-9);
    }
  }
}

TEST_CASE("cross_entropy and nll_loss argument errors") {
  const Tensor x = zeros({3, 5});
  CHECK_THROWS_CONTAINS(cross_entropy(x, targets({0, 1, 12}, {3})), "Target 12 is out of bounds.");
  CHECK_THROWS_CONTAINS(cross_entropy(x, targets({0, 1, 12}, {3})), "[0, 5)");
  CHECK_THROWS_CONTAINS(cross_entropy(x, targets({0, -3, 1}, {3})), "Target -3 is out of bounds.");
  CHECK_THROWS_CONTAINS(nll_loss(x, targets({0, 5, 1}, {3})), "nll_loss: Target 5 is out of bounds.");
  CHECK_NOTHROW(cross_entropy(x, targets({0, 1, 12}, {3}), Reduction::Mean, 12));  // 12 is ignore_index here
  CHECK_THROWS_CONTAINS(cross_entropy(x, targets({0, 1, 2, 3}, {4})),
                        "Expected input batch_size (3) to match target batch_size (4).");
  CHECK_THROWS_CONTAINS(cross_entropy(x, zeros({3})), "expected target dtype to be Long");
  CHECK_THROWS_CONTAINS(nll_loss(x, zeros({3})), "but got float32");
  CHECK_THROWS_CONTAINS(cross_entropy(x, zeros({3, 2}, kInt64)),
                        "0D or 1D target tensor expected, multi-target not supported");
  CHECK_THROWS_CONTAINS(cross_entropy(zeros({3, 5, 4}), zeros({3, 5}, kInt64)),
                        "Expected target size [3, 4], got [3, 5]");
  CHECK_THROWS_CONTAINS(cross_entropy(zeros({3, 5, 4}), zeros({3}, kInt64)), "Expected target size [3, 4], got [3]");
  CHECK_THROWS_CONTAINS(cross_entropy(x, zeros({}, kInt64)), "Expected target size [3], got []");
  CHECK_THROWS_CONTAINS(cross_entropy(scalar_tensor(1.0), zeros({}, kInt64)), "Expected 1 or more dimensions (got 0)");
  CHECK_THROWS_CONTAINS(cross_entropy(zeros({5}), zeros({3}, kInt64)), "For 1D input, expected a 0D target");
  CHECK_THROWS_CONTAINS(cross_entropy(x, targets({0, 1, 2}, {3}), Reduction::Mean, -100, 1.5),
                        "label_smoothing must be between 0.0 and 1.0. Got: 1.5");
  CHECK_THROWS_CONTAINS(cross_entropy(x, targets({0, 1, 2}, {3}), Reduction::Mean, -100, -0.1),
                        "label_smoothing must be between 0.0 and 1.0");
  CHECK_THROWS_CONTAINS(cross_entropy(zeros({3, 5}, kInt64), targets({0, 1, 2}, {3})),
                        "expected a floating point input");
  CHECK_THROWS_CONTAINS(cross_entropy(Tensor(), targets({0}, {1})), "expected defined input and target");
  CHECK_THROWS_CONTAINS(nll_loss(x, Tensor()), "expected defined input and target");
}

// ---- mse_loss -------------------------------------------------------------------------------

TEST_CASE("mse_loss matches the direct formula and finite differences") {
  const Tensor x = random_input({3, 7}, 20), y = random_input({3, 7}, 21);
  const std::vector<double> xv = x.to_vector<double>(), yv = y.to_vector<double>();
  std::vector<double> sq;
  double total = 0;
  for (size_t i = 0; i < xv.size(); ++i) {
    sq.push_back((xv[i] - yv[i]) * (xv[i] - yv[i]));
    total += sq.back();
  }
  check_values(mse_loss(x, y, Reduction::None), sq);
  check_values(mse_loss(x, y, Reduction::Sum), {total});
  check_values(mse_loss(x, y), {total / 21});
  check_values(mse_loss(wave({3, 4}), wave({3, 4}, 1.1, 0.0, true)), {4.974585045900629});  // PyTorch
  check_values(mse_loss(wave({3, 4}), wave({3, 4}, 1.1, 0.0, true), Reduction::Sum), {59.695020550807556});
  for (Reduction r : kReductions) {
    const std::string reduction = reduction_name(r);
    CAPTURE(reduction);
    check_gradients([&](const std::vector<Tensor>& in) { return as_1d(mse_loss(in[0], in[1], r)); },
                    {random_input({3, 7}, 22), random_input({3, 7}, 23)});
  }
  // Gradient to the input only (a target without grad).
  check_gradients([&](const std::vector<Tensor>& in) { return as_1d(mse_loss(in[0], y.detach())); },
                  {random_input({3, 7}, 24)});
  // Large float32 input (parallel blocks) agrees with float64.
  const Tensor a = random_input({300, 400}, 25), b = random_input({300, 400}, 26);
  const double want = mse_loss(a, b).item<double>();
  CHECK(mse_loss(a.to(kFloat32), b.to(kFloat32)).item<double>() == doctest::Approx(want).epsilon(1e-6));
  CHECK(std::isnan(mse_loss(zeros({0}), zeros({0})).item<double>()));
}

TEST_CASE("mse_loss errors") {
  CHECK_THROWS_CONTAINS(mse_loss(zeros({3}), zeros({4})),
                        "mse_loss: expected input and target of the same shape (they are not broadcast), got input "
                        "[3] and target [4]");
  CHECK_THROWS_CONTAINS(mse_loss(zeros({3, 1}), zeros({3})), "same shape");
  CHECK_THROWS_CONTAINS(mse_loss(zeros({3}), zeros({3}, kFloat64)), "same dtype, got float32 and float64");
  CHECK_THROWS_CONTAINS(mse_loss(zeros({3}, kInt64), zeros({3}, kInt64)), "expected a floating point input");
  CHECK_THROWS_CONTAINS(mse_loss(zeros({3}), Tensor()), "expected defined input and target");
}
