// The segmentation losses and reductions against PyTorch:
// tests/goldens/seg_losses.safetensors (scripts/make_loss_goldens.py) holds
// float64 inputs, outputs, an upstream gradient gy and PyTorch's gradients of
// sum(y * gy) for cross_entropy with class weights and with probability
// targets, nll_loss with weights, amax/amin, binary_cross_entropy(_with_logits)
// and the Dice / BCE+Dice losses (those two computed in the script from torch
// ops). Every case runs in float64 (to ~1e-10) and float32 (to ~1e-4).
#include <nlohmann/json.hpp>

#include "tests/golden_util.h"

using namespace minidl;
using json = nlohmann::json;

namespace {

using minidl::testing::check_close;
using minidl::testing::Golden;
using minidl::testing::kPrecisions;
using minidl::testing::load_golden;
using minidl::testing::Precision;

Reduction reduction_of(const json& c) {
  const std::string r = c.at("reduction");
  return r == "mean" ? Reduction::Mean : r == "sum" ? Reduction::Sum : Reduction::None;
}

// The golden's constant `name` (class weights, pos_weight) at precision p, or undefined.
Tensor constant(const Golden& g, size_t i, const std::string& name, const Precision& p) {
  return g.has(i, name) ? g.get(i, name).to(p.dtype) : Tensor();
}

// y = f(x, target, p) with x (and a floating target) as leaves; compares y, gx and gtarget.
template <class F>
void run_case(const Golden& g, size_t i, F f) {
  const std::string what = "seg_losses case" + std::to_string(i) + " " + g.cases[i].dump() + " ";
  for (const Precision& p : kPrecisions) {
    const std::string tag = what + dtype_name(p.dtype) + " ";
    Tensor x = g.get(i, "x").to(p.dtype).detach().requires_grad_(true);
    Tensor target;
    if (g.has(i, "target")) {
      const Tensor& t = g.get(i, "target");
      target = is_floating(t.dtype()) ? t.to(p.dtype).detach().requires_grad_(true) : t;
    }
    Tensor y;
    try {
      y = f(x, target, p);
      y.backward(g.get(i, "gy").to(p.dtype));
    } catch (const std::exception& e) {
      FAIL_CHECK(tag, "threw: ", e.what());
      continue;
    }
    check_close(tag + "y", y, g.get(i, "y"), p);
    check_close(tag + "gx", x.grad(), g.get(i, "gx"), p);
    if (g.has(i, "gtarget")) check_close(tag + "gtarget", target.grad(), g.get(i, "gtarget"), p);
  }
}

}  // namespace

TEST_CASE("goldens: segmentation losses, amax/amin match PyTorch") {
  const Golden g = load_golden("seg_losses.safetensors");
  REQUIRE(g.cases.size() == 52);
  std::map<std::string, int> seen;
  for (size_t i = 0; i < g.cases.size(); ++i) {
    const json& c = g.cases[i];
    const std::string op = c.at("op");
    ++seen[op];
    if (op == "cross_entropy") {
      CHECK(g.has(i, "weight") == c.at("weighted").get<bool>());
      CHECK(g.has(i, "gtarget") == (c.at("target") == "probabilities"));
      run_case(g, i, [&](const Tensor& x, const Tensor& t, const Precision& p) {
        return cross_entropy(x, t, constant(g, i, "weight", p), reduction_of(c), c.at("ignore_index").get<int64_t>(),
                             c.at("label_smoothing").get<double>());
      });
    } else if (op == "nll_loss") {
      run_case(g, i, [&](const Tensor& x, const Tensor& t, const Precision& p) {
        return nll_loss(x, t, constant(g, i, "weight", p), reduction_of(c), c.at("ignore_index").get<int64_t>());
      });
    } else if (op == "amax" || op == "amin") {
      const Shape dims = c.at("dims").get<std::vector<int64_t>>();
      const bool keepdim = c.at("keepdim");
      run_case(g, i, [&](const Tensor& x, const Tensor&, const Precision&) {
        return op == "amax" ? amax(x, dims, keepdim) : amin(x, dims, keepdim);
      });
    } else if (op == "binary_cross_entropy") {
      run_case(g, i, [&](const Tensor& x, const Tensor& t, const Precision& p) {
        return binary_cross_entropy(x, t, constant(g, i, "weight", p), reduction_of(c));
      });
    } else if (op == "binary_cross_entropy_with_logits") {
      run_case(g, i, [&](const Tensor& x, const Tensor& t, const Precision& p) {
        return binary_cross_entropy_with_logits(x, t, constant(g, i, "weight", p), reduction_of(c),
                                                constant(g, i, "pos_weight", p));
      });
    } else if (op == "dice_loss") {
      run_case(g, i, [&](const Tensor& x, const Tensor& t, const Precision&) {
        return dice_loss(x, t, c.at("smooth").get<double>(), c.at("batch").get<bool>());
      });
    } else {
      REQUIRE(op == "bce_dice_loss");
      // Through the module, as a training loop would call it.
      nn::BCEDiceLoss criterion(nn::BCEDiceLossOptions()
                                    .bce_weight(c.at("bce_weight").get<double>())
                                    .dice_weight(c.at("dice_weight").get<double>())
                                    .smooth(c.at("smooth").get<double>())
                                    .batch(c.at("batch").get<bool>()));
      run_case(g, i, [&](const Tensor& x, const Tensor& t, const Precision&) { return criterion(x, t); });
    }
  }
  // Every family is covered (a script change that drops one fails here).
  CHECK(seen["cross_entropy"] == 19);
  CHECK(seen["nll_loss"] == 3);
  CHECK(seen["amax"] + seen["amin"] == 8);
  CHECK(seen["binary_cross_entropy"] == 6);
  CHECK(seen["binary_cross_entropy_with_logits"] == 9);
  CHECK(seen["dice_loss"] == 5);
  CHECK(seen["bce_dice_loss"] == 2);
}
