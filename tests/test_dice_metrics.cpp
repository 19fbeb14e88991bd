// Dice loss, BCE + Dice, the loss modules, and the Dice / IoU metrics: values
// worked out by hand, float64 finite-difference gradient checks, the
// per-sample / batch options, the empty-mask cases and the errors. PyTorch
// (torch-op reference) goldens: tests/test_seg_loss_goldens.cpp.
#include <cmath>

#include "tests/test_util.h"

using namespace minidl;
using minidl::testing::allclose;
using minidl::testing::check_gradients;

namespace {

Tensor doubles(const std::vector<double>& v, const Shape& shape) { return tensor(v, shape, kFloat64); }

Tensor random_leaf(const Shape& shape, uint64_t seed, double scale = 1.0) {
  manual_seed(seed);
  return (randn(shape, kFloat64) * scale).detach().requires_grad_(true);
}

Tensor mask_leaf(const Shape& shape, uint64_t seed) {
  manual_seed(seed);
  return gt(rand(shape, kFloat64), 0.5).detach().requires_grad_(true);
}

double sigmoid_of(double x) { return 1.0 / (1.0 + std::exp(-x)); }

}  // namespace

TEST_CASE("dice_loss: per-sample and batch values by hand") {
  // Sample 0: logits 0, 0 (p = 0.5, 0.5), target 1, 0. Sample 1: logits 2, -2, target 1, 1.
  const Tensor x = doubles({0, 0, 2, -2}, {2, 1, 2}), t = doubles({1, 0, 1, 1}, {2, 1, 2});
  const double a = sigmoid_of(2), b = sigmoid_of(-2), s = 1.0;
  const double d0 = (2 * 0.5 + s) / (1.0 + 1.0 + s), d1 = (2 * (a + b) + s) / ((a + b) + 2.0 + s);
  CHECK(dice_loss(x, t).item<double>() == doctest::Approx(1 - (d0 + d1) / 2));
  const double batch = (2 * (0.5 + a + b) + s) / ((1.0 + a + b) + 3.0 + s);
  CHECK(dice_loss(x, t, 1.0, true).item<double>() == doctest::Approx(1 - batch));
  const double d0s = (2 * 0.5 + 0.1) / (1.0 + 1.0 + 0.1), d1s = (2 * (a + b) + 0.1) / ((a + b) + 2.0 + 0.1);
  CHECK(dice_loss(x, t, 0.1).item<double>() == doctest::Approx(1 - (d0s + d1s) / 2));
  // Perfect, confident prediction: loss near 0; an empty target predicted empty: 0 thanks to smooth.
  CHECK(dice_loss(doubles({30, -30}, {1, 2}), doubles({1, 0}, {1, 2})).item<double>() == doctest::Approx(0.0));
  CHECK(dice_loss(doubles({-40, -40}, {1, 2}), doubles({0, 0}, {1, 2})).item<double>() == doctest::Approx(0.0));
  // A 1-D input is N samples of one element.
  CHECK(dice_loss(doubles({0, 2}, {2}), doubles({1, 1}, {2})).item<double>() ==
        doctest::Approx(1 - ((2 * 0.5 + s) / (1.5 + s) + (2 * a + s) / (a + 1 + s)) / 2));
}

TEST_CASE("dice_loss and bce_dice_loss gradients match finite differences") {
  for (bool batch : {false, true}) {
    CAPTURE(batch);
    check_gradients([&](auto& in) { return dice_loss(in[0], in[1], 1.0, batch); },
                    {random_leaf({2, 3, 2, 3}, 20, 2.0), mask_leaf({2, 3, 2, 3}, 21)});
    check_gradients([&](auto& in) { return dice_loss(in[0], in[1], 0.01, batch); },
                    {random_leaf({3, 1, 5}, 22), random_leaf({3, 1, 5}, 23, 0.3)});
    check_gradients([&](auto& in) { return bce_dice_loss(in[0], in[1], 0.7, 1.3, 1.0, batch); },
                    {random_leaf({2, 2, 3, 2, 2}, 24, 2.0), mask_leaf({2, 2, 3, 2, 2}, 25)});
  }
  const Tensor x = random_leaf({2, 1, 4}, 26), t = mask_leaf({2, 1, 4}, 27);
  CHECK(bce_dice_loss(x, t, 0.25, 2.0).item<double>() ==
        doctest::Approx(0.25 * binary_cross_entropy_with_logits(x, t).item<double>() +
                        2.0 * dice_loss(x, t).item<double>()));
}

TEST_CASE("dice_loss errors") {
  CHECK_THROWS_CONTAINS(dice_loss(randn({2, 3}), rand({2, 4})),
                        "dice_loss: expected a target of the input's shape [2, 3], got [2, 4]");
  CHECK_THROWS_CONTAINS(dice_loss(randn({2, 3}), rand({2, 3}, kFloat64)),
                        "dice_loss: expected a target of the input's dtype float32, got float64");
  CHECK_THROWS_CONTAINS(dice_loss(full({}, 1.0), full({}, 1.0)), "dice_loss: expected an input of shape (N, ...)");
  CHECK_THROWS_CONTAINS(dice_loss(randn({2, 3}), rand({2, 3}), -1.0), "dice_loss: expected smooth >= 0, got -1");
  CHECK_THROWS_CONTAINS(bce_dice_loss(randn({2, 3}), rand({3, 2})), "bce_dice_loss: expected a target of the input's");
  CHECK_THROWS_CONTAINS(nn::DiceLoss(nn::DiceLossOptions().smooth(-0.5)), "DiceLoss: expected smooth >= 0");
}

TEST_CASE("loss modules forward to their ops; BCE weights are buffers") {
  manual_seed(28);
  const Tensor x = randn({3, 2, 4}), t = gt(rand({3, 2, 4}), 0.5), w = rand({4}) + 0.5, pw = rand({2, 1}) + 0.5;
  // The buffers alias the given tensors (as register_buffer does), so to() below converts a copy.
  nn::BCEWithLogitsLoss bce(
      nn::BCEWithLogitsLossOptions().weight(w.clone()).pos_weight(pw.clone()).reduction(Reduction::Sum));
  CHECK(bce(x, t).item<double>() == binary_cross_entropy_with_logits(x, t, w, Reduction::Sum, pw).item<double>());
  CHECK(bce->buffers().size() == 2);
  bce->to(kFloat64);
  CHECK(bce->pos_weight.dtype() == kFloat64);
  CHECK(nn::BCEWithLogitsLoss()->buffers().empty());  // undefined weights are not listed
  const Tensor p = sigmoid(x);
  nn::BCELoss bce_p(nn::BCELossOptions().weight(w));
  CHECK(bce_p(p, t).item<double>() == binary_cross_entropy(p, t, w).item<double>());
  nn::DiceLoss dice(nn::DiceLossOptions().smooth(0.5).batch(true));
  CHECK(dice(x, t).item<double>() == dice_loss(x, t, 0.5, true).item<double>());
  CHECK(dice->extra_repr() == "smooth=0.5, batch=True");
  nn::BCEDiceLoss both;
  CHECK(both(x, t).item<double>() == bce_dice_loss(x, t).item<double>());
  CHECK(both->extra_repr() == "bce_weight=1.0, dice_weight=1.0, smooth=1.0, batch=False");
}

// ---- metrics ----------------------------------------------------------------------------------

TEST_CASE("dice_score and iou_score at a threshold, per sample and over the batch") {
  // Sample 0: pred 1 1 0 0 vs fg 1 0 1 0 -> |p&f| 1, |p| 2, |f| 2. Sample 1: pred 1 0 0 0 vs fg 1 0 0 0: perfect.
  const Tensor probs = doubles({0.9, 0.6, 0.4, 0.1, 0.7, 0.5, 0.2, 0.0}, {2, 4});
  const Tensor target = doubles({1, 0, 1, 0, 1, 0, 0, 0}, {2, 4});
  CHECK(metrics::dice_score(probs, target).item<double>() == doctest::Approx((0.5 + 1.0) / 2));
  CHECK(metrics::iou_score(probs, target).item<double>() == doctest::Approx((1.0 / 3 + 1.0) / 2));
  // Batch: |p&f| 2, |p| 3, |f| 3.
  CHECK(metrics::dice_score(probs, target, {.batch = true}).item<double>() == doctest::Approx(4.0 / 6));
  CHECK(metrics::iou_score(probs, target, {.batch = true}).item<double>() == doctest::Approx(2.0 / 4));
  // 0.5 is not above the threshold 0.5; at 0.45 it is (sample 1 then has |p| 2).
  CHECK(metrics::dice_score(probs, target, {.threshold = 0.45}).item<double>() ==
        doctest::Approx((0.5 + 2.0 / 3) / 2));
  // Logits: sigmoid first, same decisions as the probabilities.
  const Tensor logits = doubles({2.2, 0.4, -0.4, -2.2, 0.85, 0.0, -1.4, -9.0}, {2, 4});
  CHECK(metrics::dice_score(logits, target, {.from_logits = true}).item<double>() == doctest::Approx(0.75));
  // Integer masks are accepted; the result is detached, of the input's dtype.
  const Tensor s = metrics::iou_score(probs.clone().requires_grad_(true), target.to(kInt64));
  CHECK(!s.requires_grad());
  CHECK(s.dtype() == kFloat64);
  CHECK(s.item<double>() == doctest::Approx((1.0 / 3 + 1.0) / 2));
}

TEST_CASE("dice_score and iou_score: an empty prediction of an empty mask scores 1") {
  const Tensor probs = doubles({0.1, 0.2, 0.9, 0.1}, {2, 2}), target = doubles({0, 0, 0, 1}, {2, 2});
  // Sample 0: empty/empty -> 1. Sample 1: pred {0}, fg {1}: no overlap -> 0.
  CHECK(metrics::dice_score(probs, target).item<double>() == 0.5);
  CHECK(metrics::iou_score(probs, target).item<double>() == 0.5);
  CHECK(metrics::dice_score(zeros({3, 5}), zeros({3, 5}), {.batch = true}).item<double>() == 1.0);
  CHECK(metrics::iou_score(zeros({3, 5}), zeros({3, 5})).item<double>() == 1.0);
  // Something predicted where nothing is: 0.
  CHECK(metrics::dice_score(ones({1, 4}), zeros({1, 4})).item<double>() == 0.0);
}

TEST_CASE("dice_score and iou_score errors") {
  CHECK_THROWS_CONTAINS(metrics::dice_score(rand({2, 3}), rand({3, 2})),
                        "dice_score: expected a target of the input's shape [2, 3], got [3, 2]");
  CHECK_THROWS_CONTAINS(metrics::iou_score(ones({2}, kInt64), ones({2}, kInt64)),
                        "iou_score: expected a floating point input, got int64");
  CHECK_THROWS_CONTAINS(metrics::iou_score(full({}, 0.5), full({}, 1.0)), "iou_score: expected an input of shape (N, ...)");
}
