// The segmentation losses and reductions: float64 finite-difference gradient
// checks (odd shapes, every reduction), values worked out by hand, edge cases
// (clamped logs, large logits, ties, empty masks) and PyTorch's error
// messages. PyTorch goldens: tests/test_seg_loss_goldens.cpp; the test device:
// tests/test_device_ops.cpp.
#include <cmath>
#include <limits>

#include "tests/test_util.h"

using namespace minidl;
using minidl::testing::allclose;
using minidl::testing::check_gradients;

namespace {

Tensor random_leaf(const Shape& shape, uint64_t seed, double scale = 1.0) {
  manual_seed(seed);
  return (randn(shape, kFloat64) * scale).detach().requires_grad_(true);
}

Tensor uniform_leaf(const Shape& shape, uint64_t seed, double lo, double hi) {
  manual_seed(seed);
  return (rand(shape, kFloat64) * (hi - lo) + lo).detach().requires_grad_(true);
}

Tensor doubles(const std::vector<double>& v, const Shape& shape) { return tensor(v, shape, kFloat64); }

const Reduction kReductions[] = {Reduction::None, Reduction::Sum, Reduction::Mean};

}  // namespace

// ---- cross_entropy / nll_loss with class weights ---------------------------------------------

TEST_CASE("weighted cross_entropy: the mean divides by the summed weights of the kept targets") {
  // Zero logits: -log p = log 3 at every position; targets 0, 2, ignored, 2.
  const Tensor x = zeros({4, 3}, kFloat64).requires_grad_(true);
  const Tensor w = doubles({1.0, 5.0, 3.0}, {3});
  const Tensor t = tensor<int64_t>({0, 2, -100, 2});
  const double l3 = std::log(3.0);
  CHECK(cross_entropy(x, t, w, Reduction::Sum).item<double>() == doctest::Approx(7 * l3));
  CHECK(cross_entropy(x, t, w).item<double>() == doctest::Approx(7 * l3 / 7));  // / (1 + 3 + 3)
  const std::vector<double> none = cross_entropy(x, t, w, Reduction::None).to_vector<double>();
  const std::vector<double> want{1 * l3, 3 * l3, 0.0, 3 * l3};
  for (size_t i = 0; i < 4; ++i) CHECK(none[i] == doctest::Approx(want[i]));
  // Smoothing: + eps / C * sum_c w_c * log 3 on each kept position, same divisor.
  const double eps = 0.3;
  const double per = (1 - eps) * l3, smooth = eps / 3 * 9 * l3;
  CHECK(cross_entropy(x, t, w, Reduction::Mean, -100, eps).item<double>() ==
        doctest::Approx((per * 7 + 3 * smooth) / 7));
  // nll_loss: -w_t x_t, mean over the summed weights.
  const Tensor lp = doubles({-1, -2, -3, -4, -5, -6, -7, -8, -9, -10, -11, -12}, {4, 3});
  CHECK(nll_loss(lp, t, w).item<double>() == doctest::Approx((1 * 1 + 3 * 6 + 3 * 12) / 7.0));
}

TEST_CASE("weighted cross_entropy and nll_loss gradients match finite differences") {
  const Tensor w = doubles({0.5, 2.0, 1.5, 0.25, 1.0}, {5});
  const Tensor x = random_leaf({7, 5}, 1, 2.0), xs = random_leaf({2, 5, 3, 2}, 2);
  const Tensor t = tensor<int64_t>({4, 0, -100, 2, 1, 3, 2});
  const Tensor ts = tensor<int64_t>({0, 4, 2, -100, 1, 1, 3, 3, 0, 2, -100, 4}, {2, 3, 2});
  for (Reduction r : kReductions)
    for (double eps : {0.0, 0.2}) {
      CAPTURE(static_cast<int>(r));
      CAPTURE(eps);
      check_gradients([&](auto& in) { return cross_entropy(in[0], t, w, r, -100, eps); }, {x});
      check_gradients([&](auto& in) { return cross_entropy(in[0], ts, w, r, -100, eps); }, {xs});
      check_gradients([&](auto& in) { return nll_loss(in[0], t, w, r); }, {x});
    }
  // A 1-D input with a 0-d target.
  check_gradients([&](auto& in) { return cross_entropy(in[0], full({}, 3.0, kInt64), w, Reduction::Mean, -100, 0.1); },
                  {random_leaf({5}, 3)});
}

TEST_CASE("weighted cross_entropy: all weight on ignored classes gives nan, as PyTorch") {
  const Tensor x = randn({3, 2}, kFloat64);
  CHECK(std::isnan(cross_entropy(x, tensor<int64_t>({-100, -100, -100}), doubles({1, 1}, {2})).item<double>()));
  CHECK(std::isnan(cross_entropy(x, tensor<int64_t>({0, 1, 0}), zeros({2}, kFloat64)).item<double>()));
  CHECK(cross_entropy(x, tensor<int64_t>({0, 1, 0}), zeros({2}, kFloat64), Reduction::Sum).item<double>() == 0.0);
}

// ---- cross_entropy with probability targets ---------------------------------------------------

TEST_CASE("cross_entropy with one-hot probabilities equals cross_entropy with class indices") {
  const Tensor x = random_leaf({4, 3, 2}, 4);
  const Tensor idx = tensor<int64_t>({0, 2, 1, 1, 2, 0, 0, 1}, {4, 2});
  std::vector<double> onehot(24, 0.0);
  const std::vector<int64_t> iv = idx.to_vector<int64_t>();
  for (int64_t n = 0; n < 4; ++n)
    for (int64_t s = 0; s < 2; ++s) onehot[(n * 3 + iv[n * 2 + s]) * 2 + s] = 1.0;
  const Tensor q = doubles(onehot, {4, 3, 2});
  const Tensor w = doubles({0.5, 1.0, 2.0}, {3});
  for (Reduction r : {Reduction::None, Reduction::Sum})
    for (double eps : {0.0, 0.25}) {
      CHECK(allclose(cross_entropy(x, q, w, r, -100, eps), cross_entropy(x, idx, w, r, -100, eps), 1e-12, 1e-12));
      CHECK(allclose(cross_entropy(x, q, r, -100, eps), cross_entropy(x, idx, r, -100, eps), 1e-12, 1e-12));
    }
  // "mean": probabilities divide by the number of positions, indices by the summed weights.
  CHECK(cross_entropy(x, q, w).item<double>() ==
        doctest::Approx(cross_entropy(x, idx, w, Reduction::Sum).item<double>() / 8));
}

TEST_CASE("cross_entropy with probability targets: gradients for input and target") {
  const Tensor x = random_leaf({3, 4, 5}, 5), w = doubles({0.5, 1.0, 2.0, 0.7}, {4});
  manual_seed(6);
  const Tensor q = softmax(randn({3, 4, 5}, kFloat64), 1).detach().requires_grad_(true);
  for (Reduction r : kReductions)
    for (double eps : {0.0, 0.1}) {
      check_gradients([&](auto& in) { return cross_entropy(in[0], in[1], r, -100, eps); }, {x, q});
      check_gradients([&](auto& in) { return cross_entropy(in[0], in[1], w, r, -100, eps); }, {x, q});
    }
  check_gradients([&](auto& in) { return cross_entropy(in[0], in[1]); },
                  {random_leaf({5}, 7), uniform_leaf({5}, 8, 0.0, 0.4)});
  CHECK(cross_entropy(x, q, Reduction::None).shape() == Shape{3, 5});
  CHECK(std::isnan(cross_entropy(zeros({0, 3}, kFloat64), zeros({0, 3}, kFloat64)).item<double>()));
}

TEST_CASE("cross_entropy with probability targets, smoothing and a -inf logit: inf, as PyTorch") {
  // PyTorch 2.15: inf (the smoothed target is positive for every class);
  // splitting the sum as (1 - eps) sum q d + eps / C sum d made 0 * inf NaN.
  const Tensor x = tensor({1.0, 2.0, -INFINITY, 3.0}, {1, 4});
  const Tensor q = tensor({0.5, 0.5, 0.0, 0.0}, {1, 4});
  CHECK(std::isinf(cross_entropy(x, q, Reduction::Mean, -100, 0.1).item<double>()));
  // Finite logits: PyTorch 2.15's 2.285773515701294 (float32).
  const Tensor xf = tensor({1.0, 2.0, 0.5, 3.0}, {1, 4}), qf = tensor({0.5, 0.25, 0.25, 0.0}, {1, 4});
  CHECK(cross_entropy(xf, qf, Reduction::Mean, -100, 0.1).item<double>() == doctest::Approx(2.2857735).epsilon(1e-7));
}

TEST_CASE("cross_entropy and nll_loss weight and probability-target errors") {
  const Tensor x = randn({4, 3}), t = tensor<int64_t>({0, 1, 2, 0});
  CHECK_THROWS_CONTAINS(cross_entropy(x, t, ones({4})),
                        "cross_entropy: weight tensor should be defined either for all 3 classes or no classes but "
                        "got weight tensor of shape: [4]");
  CHECK_THROWS_CONTAINS(nll_loss(x, t, ones({3, 1})), "nll_loss: weight tensor should be defined either for all 3");
  CHECK_THROWS_CONTAINS(cross_entropy(x, t, ones({3}, kFloat64)), "expected scalar type float32 but found float64");
  CHECK_THROWS_CONTAINS(cross_entropy(x, rand({4, 3}), Reduction::Mean, 1),
                        "ignore_index is not supported for floating point target");
  CHECK_THROWS_CONTAINS(cross_entropy(x, ones({4, 3}, kInt64)),
                        "Expected floating point type for target with class probabilities, got int64");
  CHECK_THROWS_CONTAINS(cross_entropy(x, rand({4, 3}, kFloat64)), "expected input and target of the same dtype");
  CHECK_THROWS_CONTAINS(cross_entropy(x, rand({4, 3}), ones({2})), "weight tensor should be defined either for all 3");
  CHECK_THROWS_CONTAINS(cross_entropy(x, rand({4, 2})), "expected target dtype to be Long");
  CHECK_THROWS_CONTAINS(cross_entropy(x, rand({4, 3}), Reduction::Mean, -100, 1.5),
                        "label_smoothing must be between 0.0 and 1.0. Got: 1.5");
}

// ---- amax / amin -----------------------------------------------------------------------------

TEST_CASE("amax and amin over several dims, keepdim, and their gradients") {
  const Tensor x = doubles({1, 7, 3, 7, 2, 0, -1, 5, 5, 4, 9, 9}, {2, 3, 2});
  CHECK(amax(x, {1, 2}).to_vector<double>() == std::vector<double>{7, 9});
  CHECK(amin(x, {0, 2}, true).shape() == Shape{1, 3, 1});
  CHECK(amin(x, {0, 2}, true).to_vector<double>() == std::vector<double>{-1, 3, 0});
  CHECK(amax(x).dim() == 0);
  CHECK(amax(x).item<double>() == 9);
  CHECK(amax(x, {-1}).shape() == Shape{2, 3});
  CHECK(amax(tensor<int64_t>({3, 8, 2, 8}, {2, 2}), {1}).to_vector<int64_t>() == std::vector<int64_t>{8, 8});
  CHECK(amax(full({}, 2.0), {0}).item<double>() == 2.0);
  // Ties share the gradient evenly within each reduced slice: two 7s, two 9s.
  Tensor xl = x.clone().requires_grad_(true);
  amax(xl, {1, 2}).backward(doubles({1.0, 4.0}, {2}));
  CHECK(xl.grad().to_vector<double>() == std::vector<double>{0, 0.5, 0, 0.5, 0, 0, 0, 0, 0, 0, 2, 2});
  // Distinct values: the finite differences are well defined.
  for (bool keepdim : {false, true}) {
    check_gradients([&](auto& in) { return amax(in[0], {0, 2}, keepdim); }, {random_leaf({3, 4, 5}, 9)});
    check_gradients([&](auto& in) { return amin(in[0], {-1}, keepdim); }, {random_leaf({3, 4, 5}, 10)});
    check_gradients([&](auto& in) { return amin(in[0], {}, keepdim); }, {random_leaf({2, 3, 3}, 11)});
  }
  // A NaN in a slice is its result, and that slice's gradient is nan (PyTorch's too).
  Tensor xn = doubles({1, NAN, 2, 3}, {2, 2}).requires_grad_(true);
  const Tensor yn = amax(xn, {1});
  CHECK(std::isnan(yn.to_vector<double>()[0]));
  yn.sum().backward();
  const std::vector<double> gn = xn.grad().to_vector<double>();
  CHECK((std::isnan(gn[0]) && std::isnan(gn[1]) && gn[2] == 0.0 && gn[3] == 1.0));
}

TEST_CASE("amax and amin errors") {
  const Tensor x = randn({2, 3, 4});
  CHECK_THROWS_CONTAINS(amax(randn({2, 0, 3}), {1}), "amax(): Expected reduction dim 1 to have non-zero size.");
  CHECK_THROWS_CONTAINS(amin(randn({2, 0, 3})), "amin(): Expected reduction dim to be specified for input.numel() == 0");
  CHECK_THROWS_CONTAINS(amax(x, {1, 1}), "dim 1 appears multiple times in the list of dims");
  CHECK_THROWS_CONTAINS(amax(x, {3}), "Dimension out of range (expected to be in range of [-3, 2], but got 3)");
  CHECK(amax(randn({2, 0, 3}), {0}).shape() == Shape{0, 3});
}

// ---- binary_cross_entropy --------------------------------------------------------------------

TEST_CASE("binary_cross_entropy: values, clamped logs, gradients") {
  const Tensor x = doubles({0.0, 1.0, 0.5, 0.9}, {4}), t = doubles({1.0, 0.0, 0.3, 1.0}, {4});
  const std::vector<double> l = binary_cross_entropy(x, t, Tensor(), Reduction::None).to_vector<double>();
  CHECK(l[0] == 100.0);  // log 0 clamped to -100
  CHECK(l[1] == 100.0);
  CHECK(l[2] == doctest::Approx(std::log(2.0)));
  CHECK(l[3] == doctest::Approx(-std::log(0.9)));
  Tensor xl = x.clone().requires_grad_(true);
  binary_cross_entropy(xl, t, Tensor(), Reduction::Sum).backward();
  const std::vector<double> g = xl.grad().to_vector<double>();
  CHECK(g[0] == doctest::Approx(-1e12));  // (x - t) / max(x (1 - x), 1e-12)
  CHECK(g[1] == doctest::Approx(1e12));
  CHECK(g[2] == doctest::Approx(0.2 / 0.25));
  const Tensor w = doubles({0.5, 2.0, 1.0}, {3});
  for (Reduction r : kReductions) {
    check_gradients([&](auto& in) { return binary_cross_entropy(in[0], in[1], Tensor(), r); },
                    {uniform_leaf({3, 5}, 12, 0.05, 0.95), uniform_leaf({3, 5}, 13, 0.0, 1.0)});
    check_gradients([&](auto& in) { return binary_cross_entropy(in[0], in[1], w.reshape({3, 1, 1}), r); },
                    {uniform_leaf({2, 3, 2, 3}, 14, 0.05, 0.95), uniform_leaf({2, 3, 2, 3}, 15, 0.0, 1.0)});
  }
  CHECK(binary_cross_entropy(doubles({0.2, 0.6}, {2}), doubles({0, 1}, {2}), doubles({2, 0.5}, {2})).item<double>() ==
        doctest::Approx((-2 * std::log(0.8) - 0.5 * std::log(0.6)) / 2));
  CHECK(std::isnan(binary_cross_entropy(zeros({0}), zeros({0})).item<double>()));
}

TEST_CASE("binary_cross_entropy_with_logits: stable, pos_weight, gradients") {
  // Large logits: log(1 + exp(100)) would overflow in a naive form.
  const Tensor x = doubles({100.0, -100.0, 0.0, 3.0}, {4}), t = doubles({0.0, 1.0, 1.0, 0.25}, {4});
  const std::vector<double> l = binary_cross_entropy_with_logits(x, t, Tensor(), Reduction::None).to_vector<double>();
  CHECK(l[0] == doctest::Approx(100.0));
  CHECK(l[1] == doctest::Approx(100.0));
  CHECK(l[2] == doctest::Approx(std::log(2.0)));
  CHECK(l[3] == doctest::Approx(0.75 * 3.0 + std::log1p(std::exp(-3.0))));
  const std::vector<double> lf = binary_cross_entropy_with_logits(x.to(kFloat32), t.to(kFloat32), Tensor(),
                                                                  Reduction::None).to_vector<double>();
  CHECK(lf[0] == doctest::Approx(100.0));
  // pos_weight p scales the positive term: t = 1, x = 0 -> p log 2.
  CHECK(binary_cross_entropy_with_logits(zeros({1, 2}, kFloat64), ones({1, 2}, kFloat64), Tensor(), Reduction::Sum,
                                         doubles({3.0, 0.5}, {2}))
            .item<double>() == doctest::Approx(3.5 * std::log(2.0)));
  const Tensor pw = doubles({0.5, 2.0, 3.0}, {3, 1, 1}), w = doubles({1.5, 0.5}, {2});
  for (Reduction r : kReductions) {
    check_gradients([&](auto& in) { return binary_cross_entropy_with_logits(in[0], in[1], Tensor(), r); },
                    {random_leaf({3, 5}, 16, 3.0), uniform_leaf({3, 5}, 17, 0.0, 1.0)});
    check_gradients([&](auto& in) { return binary_cross_entropy_with_logits(in[0], in[1], w, r, pw); },
                    {random_leaf({2, 3, 2, 2}, 18, 3.0), uniform_leaf({2, 3, 2, 2}, 19, 0.0, 1.0)});
  }
}

TEST_CASE("binary_cross_entropy errors") {
  const Tensor p = rand({4, 3}), t = rand({4, 3});
  CHECK_THROWS_CONTAINS(binary_cross_entropy(p, rand({4, 2})),
                        "binary_cross_entropy: Using a target size ([4, 2]) that is different to the input size "
                        "([4, 3]) is deprecated. Please ensure they have the same size.");
  CHECK_THROWS_CONTAINS(binary_cross_entropy(p + 1.0, t), "all elements of input should be between 0 and 1");
  CHECK_THROWS_CONTAINS(binary_cross_entropy(full({2}, NAN), rand({2})),
                        "all elements of input should be between 0 and 1");
  CHECK_THROWS_CONTAINS(binary_cross_entropy(p, t.to(kFloat64)), "Found dtype float64 but expected float32");
  CHECK_THROWS_CONTAINS(binary_cross_entropy(p, t, ones({2})),
                        "The size of tensor a (2) must match the size of tensor b (3) at non-singleton dimension 1");
  CHECK_THROWS_CONTAINS(binary_cross_entropy(p, t, ones({2, 4, 3})), "it has more dimensions");
  CHECK_THROWS_CONTAINS(binary_cross_entropy(p, t, ones({3}).requires_grad_(true)),
                        "The function 'binary_cross_entropy' is not differentiable with respect to argument 'weight'");
  CHECK_THROWS_CONTAINS(binary_cross_entropy_with_logits(p, rand({4, 2})),
                        "Target size ([4, 2]) must be the same as input size ([4, 3])");
  CHECK_THROWS_CONTAINS(binary_cross_entropy_with_logits(p, ones({4, 3}, kInt64)),
                        "Found dtype int64 but expected float32");
  CHECK_THROWS_CONTAINS(binary_cross_entropy_with_logits(randn({2, 3, 4, 5}), rand({2, 3, 4, 5}), Tensor(),
                                                         Reduction::Mean, ones({3})),
                        "The size of tensor a (3) must match the size of tensor b (5) at non-singleton dimension 3");
  CHECK_THROWS_CONTAINS(binary_cross_entropy_with_logits(p, t, Tensor(), Reduction::Mean, ones({3}, kFloat64)),
                        "expected pos_weight of dtype float32, got float64");
}
